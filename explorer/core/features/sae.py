"""Opening an SAE or transcoder from a SAELens directory, checked before anything is read, and running it.

A directory holds ``cfg.json`` and ``sae_weights.safetensors`` (SAELens' ``save_model``). The order is
a checkpoint's: the config through strict getters (integers are integers, names are known), the
hook point it names against the open model (its width must be ``d_in``), the weights file's header
(our own parser: names, dtypes, shapes and byte ranges) against ``d_in``/``d_sae``, the bytes it
would take against the memory available, and only then the tensors, each checked to be finite.
Nothing is unpickled; a directory with only pickled weights is refused.

Encoding follows SAELens (``SAE.encode``) with ``sae_in = x - b_dec`` when ``apply_b_dec_to_input``:

* standard: ``relu(sae_in @ W_enc + b_enc)``; jumprelu: the same, zero where ``pre <= threshold``;
* topk: the k largest of ``pre`` (times ``|W_dec|`` with ``rescale_acts_by_decoder_norm``), relu'd;
* gated: ``[sae_in @ W_enc + b_gate > 0] * relu(sae_in @ (W_enc * exp(r_mag)) + b_mag)``;
* transcoder, jumprelu_transcoder: read at ``hook_name``, write ``d_out`` wide at ``hook_name_out``.

``normalize_activations``: ``none``, or ``expected_average_only_in``, which SAELens' ``load_from_disk``
leaves as the identity at run time (the scaling factor is folded into the weights of released SAEs).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from explorer.core.checkpoint.safe_io import read_json, read_safetensors, safetensors_header
from explorer.core.cancel import Cancelled
from explorer.core.checkpoint.validate import available_memory
from explorer.core.config import ModelConfig
from explorer.core.errors import CheckpointError
from explorer.core.features.hooks import HookPoint, SAEError, hook_point

CFG, WEIGHTS = "cfg.json", "sae_weights.safetensors"
MAX_CFG_BYTES = 1 << 20
MAX_D_SAE = 1 << 22  # 4M features: the largest released dictionaries are 1M
ARCHITECTURES: dict[str, tuple[str, ...]] = {  # the tensors each architecture has besides W_enc, W_dec, b_dec
    "standard": ("b_enc",), "jumprelu": ("b_enc", "threshold"), "topk": ("b_enc",),
    "gated": ("b_gate", "r_mag", "b_mag"), "transcoder": ("b_enc",), "jumprelu_transcoder": ("b_enc", "threshold"),
}
NORMALISATIONS = ("none", "expected_average_only_in")
_FLOATS = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


class SAEModelMismatch(SAEError):
    """The SAE's metadata names another model: a warning the caller may override (``allow_other_model``)."""


@dataclass(eq=False)
class SAE:
    """An opened SAE or transcoder: its settings, its hook point in the open model, its weights (float32)."""

    path: Path
    architecture: str
    d_in: int
    d_sae: int
    d_out: int
    hook: HookPoint
    hook_out: HookPoint | None          # transcoders: where the decoder writes
    apply_b_dec_to_input: bool
    normalize_activations: str
    k: int | None
    rescale_acts_by_decoder_norm: bool
    model_name: str | None
    weights: dict[str, Tensor]
    warnings: list[str] = field(default_factory=list)
    _on: dict[tuple, dict[str, Tensor]] = field(default_factory=dict, repr=False)

    @property
    def name(self) -> str:
        return f"{self.path.name} @ {self.hook.hook_name}"

    @property
    def is_transcoder(self) -> bool:
        return self.architecture.endswith("transcoder")

    @property
    def W_dec(self) -> Tensor:
        return self.weights["W_dec"]

    def on(self, like: Tensor) -> dict[str, Tensor]:
        """The weights on ``like``'s device, float32 (cached per device)."""
        key = (like.device.type, like.device.index)
        if key not in self._on:
            self._on[key] = {k: v.to(like.device) for k, v in self.weights.items()}
        return self._on[key]

    # --- the math ---------------------------------------------------------------------------------
    def encode(self, x: Tensor | np.ndarray) -> Tensor:
        """Feature activations [..., d_sae] of activations [..., d_in] (float32)."""
        x = torch.as_tensor(x).float()
        w = self.on(x)
        sae_in = x - w["b_dec"] if self.apply_b_dec_to_input else x
        if self.architecture == "gated":
            gate = (sae_in @ w["W_enc"] + w["b_gate"]) > 0
            return gate.to(x.dtype) * torch.relu(sae_in @ (w["W_enc"] * w["r_mag"].exp()) + w["b_mag"])
        pre = sae_in @ w["W_enc"] + w["b_enc"]
        if self.architecture == "topk":
            if self.rescale_acts_by_decoder_norm:
                pre = pre * w["W_dec"].norm(dim=-1)
            values, indices = torch.topk(pre, k=min(self.k, self.d_sae), dim=-1, sorted=False)
            return torch.zeros_like(pre).scatter_(-1, indices, values.relu())
        acts = torch.relu(pre)
        if "threshold" in w:
            acts = acts * (pre > w["threshold"]).to(acts.dtype)
        return acts

    def decoder_rows(self, like: Tensor | None = None) -> Tensor:
        """W_dec as a feature's activation multiplies it: [d_sae, d_out] (divided by |W_dec| for rescaled topk)."""
        w = self.on(like) if like is not None else self.weights
        if self.rescale_acts_by_decoder_norm:
            return w["W_dec"] / w["W_dec"].norm(dim=-1, keepdim=True)
        return w["W_dec"]

    def decode(self, acts: Tensor | np.ndarray) -> Tensor:
        """The reconstruction [..., d_out] of feature activations [..., d_sae]."""
        acts = torch.as_tensor(acts).float()
        return acts @ self.decoder_rows(acts) + self.on(acts)["b_dec"]

    def edit(self, t: Tensor, rows: slice, local: Tensor, iv: Any) -> None:
        """Apply a feature intervention (``features/edits.py``) to the site tensor ``t`` in place, at batch
        ``rows`` and positions ``local``: ``x += (target - a_f) * d_f`` (target 0, ``amount`` or ``a_f * amount``)."""
        heads = self.hook.site == "attn.z"
        if heads:                                                      # [B, H, m, dh] -> [B, m, H * dh]
            sub = t[rows][:, :, local]
            B, H, m, dh = sub.shape
            x = sub.permute(0, 2, 1, 3).reshape(B, m, H * dh)
        else:
            x = t[rows, local]                                         # [B, m, d]
        x = x.float()
        a = self.encode(x)[..., iv.index]                              # [B, m]
        target = torch.zeros_like(a) if iv.mode == "zero" else (
            torch.full_like(a, iv.amount) if iv.mode == "clamp" else a * iv.amount)
        delta = (target - a)[..., None] * self.decoder_rows(x)[iv.index]  # [B, m, d_in]
        if heads:
            t[rows, :, local] += delta.reshape(B, m, H, dh).permute(0, 2, 1, 3).to(t.dtype)
        else:
            t[rows, local] += delta.to(t.dtype)

    def direction(self, feature: int) -> np.ndarray:
        """Feature ``feature``'s decoder row (what one unit of its activation adds), float32 [d_out]."""
        check_feature(self, feature)
        return self.decoder_rows()[feature].numpy().copy()

    def input_of(self, trace: Any) -> np.ndarray:
        """This SAE's input at every position of a Trace: [n, d_in] (heads flattened for attn.z)."""
        array = np.array(trace[self.hook.key], dtype=np.float32)  # a writable copy
        if self.hook.site == "attn.z":                   # ours [H, n, dh] -> TL's [n, H * dh]
            array = array.transpose(1, 0, 2).reshape(array.shape[1], -1)
        return array

    def activations(self, trace: Any, rows: slice | None = None, chunk: int = 128,
                    cancel: Any = None) -> np.ndarray:
        """Feature activations at the positions ``rows`` (default all) of a Trace: float32 [n_rows, d_sae],
        computed ``chunk`` rows at a time (``cancel``: a callable asked between chunks; True stops)."""
        x = torch.from_numpy(self.input_of(trace)[rows if rows is not None else slice(None)])
        out = np.empty((x.shape[0], self.d_sae), dtype=np.float32)
        with torch.inference_mode():
            for i in range(0, x.shape[0], chunk):
                if cancel is not None and cancel():
                    raise Cancelled("feature activations cancelled")
                out[i:i + chunk] = self.encode(x[i:i + chunk]).numpy()
        return out


def check_feature(sae: SAE, feature: int) -> None:
    if isinstance(feature, bool) or not isinstance(feature, (int, np.integer)) or not 0 <= feature < sae.d_sae:
        raise SAEError(f"feature {feature} is outside 0-{sae.d_sae - 1} ({sae.name})")


# --- opening ---------------------------------------------------------------------------------------

def _where(path: Path, key: str) -> str:
    return f"{path / CFG}: {key}"


def _int(raw: dict[str, Any], path: Path, key: str, default: Any = ..., low: int = 1) -> int:
    value = raw.get(key, default)
    if value is ...:
        raise SAEError(f"{path / CFG} lacks {key!r}")
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise SAEError(f"{_where(path, key)} should be an integer of at least {low} (got {value!r:.60})")
    return value


def _bool(raw: dict[str, Any], path: Path, key: str, default: bool) -> bool:
    value = raw.get(key, default)
    if not isinstance(value, bool):
        raise SAEError(f"{_where(path, key)} should be true or false (got {value!r:.60})")
    return value


def _str(raw: dict[str, Any], path: Path, key: str, default: Any = ..., choices: tuple[str, ...] = ()) -> Any:
    value = raw.get(key, default)
    if value is ...:
        raise SAEError(f"{path / CFG} lacks {key!r}")
    if value is None and default is None:
        return None
    if not isinstance(value, str) or (choices and value not in choices):
        wanted = f"one of {', '.join(choices)}" if choices else "a string"
        raise SAEError(f"{_where(path, key)} should be {wanted} (got {value!r:.60})")
    return value


def _flatten(raw: dict[str, Any], path: Path) -> dict[str, Any]:
    """SAELens 6's layout (metadata apart) and the older flat one (hook_point, activation_fn_str) as one dict."""
    meta = raw.get("metadata", {})
    if not isinstance(meta, dict):
        raise SAEError(f"{_where(path, 'metadata')} should be an object")
    flat = {**meta, **{k: v for k, v in raw.items() if k != "metadata"}}
    for old, new in (("hook_point", "hook_name"), ("activation_fn_str", "activation_fn"),
                     ("hook_point_head_index", "hook_head_index")):
        if old in flat and new not in flat:
            flat[new] = flat.pop(old)
    kwargs = flat.get("activation_fn_kwargs")
    if flat.get("activation_fn") == "topk" and isinstance(kwargs, dict) and "k" in kwargs:
        flat.setdefault("architecture", "topk")
        flat.setdefault("k", kwargs["k"])
    if isinstance(flat.get("normalize_activations"), bool):  # SAELens < 6 wrote a flag
        flat["normalize_activations"] = "expected_average_only_in" if flat["normalize_activations"] else "none"
    if "reshape_activations" not in flat and isinstance(flat.get("hook_name"), str):
        flat["reshape_activations"] = "hook_z" if flat["hook_name"].endswith("hook_z") else "none"
    if flat.get("normalize_activations") is None:
        flat["normalize_activations"] = "none"
    return flat


def _same_model(a: str, b: str) -> bool:
    def norm(s: str) -> str:
        return s.lower().rstrip("/").split("/")[-1].replace("_", "-")
    x, y = norm(a), norm(b)
    return x == y or x in y or y in x


def open_sae(directory: str | os.PathLike[str], cfg: ModelConfig, model_name: str | None = None,
             allow_other_model: bool = False) -> SAE:
    """Open the SAE in ``directory`` for a model of configuration ``cfg`` (see the module docstring).

    A ``metadata.model_name`` that differs from ``model_name`` raises :class:`SAEModelMismatch`
    unless ``allow_other_model``; then it is kept in ``SAE.warnings``."""
    from explorer.core import arguments

    path = arguments.path(directory, "directory").expanduser()
    arguments.instance(cfg, ModelConfig, "cfg", "a ModelConfig (LoadedModel.config)")
    if not path.is_dir():
        raise SAEError(f"{path} is not a directory (an SAE directory holds {CFG} and {WEIGHTS})")
    if not (path / WEIGHTS).exists():
        pickled = sorted(p.name for p in path.iterdir() if p.suffix in (".pt", ".pth", ".bin", ".pkl", ".ckpt"))
        extra = f"; pickled weights ({', '.join(pickled[:3])}) are never read" if pickled else ""
        raise SAEError(f"missing {WEIGHTS} in {path}{extra}")
    try:
        raw = read_json(path / CFG, MAX_CFG_BYTES)
    except CheckpointError as exc:
        raise SAEError(str(exc)) from None
    flat = _flatten(raw, path)
    arch = _str(flat, path, "architecture", "standard")
    if arch not in ARCHITECTURES:
        raise SAEError(f"{_where(path, 'architecture')} {arch!r:.60} is not supported "
                       f"(supported: {', '.join(ARCHITECTURES)})")
    transcoder = arch.endswith("transcoder")
    d_in, d_sae = _int(flat, path, "d_in"), _int(flat, path, "d_sae")
    if d_sae > MAX_D_SAE:
        raise SAEError(f"{_where(path, 'd_sae')} {d_sae:,} is more features than any SAE has (at most {MAX_D_SAE:,})")
    d_out = _int(flat, path, "d_out") if transcoder else d_in
    apply_b_dec = _bool(flat, path, "apply_b_dec_to_input", not transcoder)
    if transcoder and apply_b_dec:
        raise SAEError(f"{_where(path, 'apply_b_dec_to_input')}: a transcoder cannot subtract b_dec from its input")
    norm = _str(flat, path, "normalize_activations", "none")
    if norm not in NORMALISATIONS:
        raise SAEError(f"{_where(path, 'normalize_activations')} {norm!r:.40} is not supported "
                       f"(supported: {', '.join(NORMALISATIONS)})")
    reshape = _str(flat, path, "reshape_activations", "none", ("none", "hook_z"))
    k = _int(flat, path, "k") if arch == "topk" else None
    rescale = _bool(flat, path, "rescale_acts_by_decoder_norm", False) if arch == "topk" else False
    if flat.get("hook_head_index") is not None:
        raise SAEError(f"{_where(path, 'hook_head_index')}: SAEs on a single head are not supported")
    hook = hook_point(_str(flat, path, "hook_name"), cfg)
    if (hook.site == "attn.z") != (reshape == "hook_z"):
        raise SAEError(f"{_where(path, 'reshape_activations')} is {reshape!r}: an SAE on attn.hook_z reads the "
                       "heads' outputs flattened (hook_z), and only such an SAE does")
    hook_out = hook_point(_str(flat, path, "hook_name_out"), cfg) if transcoder else None
    if hook.width != d_in:
        raise SAEError(f"{path.name}: d_in is {d_in}, but {hook.hook_name} is {hook.width} wide in this model")
    if hook_out is not None and hook_out.width != d_out:
        raise SAEError(f"{path.name}: d_out is {d_out}, but {hook_out.hook_name} is {hook_out.width} wide "
                       "in this model")
    named = _str(flat, path, "model_name", None)
    warnings = []
    if named and model_name and not _same_model(named, model_name):
        line = f"{path.name} was trained on {named!r:.60}, but the open model is {model_name!r:.60}"
        if not allow_other_model:
            raise SAEModelMismatch(f"{line} (open it anyway to use it on this model)")
        warnings.append(line)
    weights = _read_weights(path / WEIGHTS, arch, d_in, d_sae, d_out)
    return SAE(path, arch, d_in, d_sae, d_out, hook, hook_out, apply_b_dec, norm, k, rescale, named, weights,
               warnings)


def _shapes(arch: str, d_in: int, d_sae: int, d_out: int) -> dict[str, tuple[int, ...]]:
    shapes = {"W_enc": (d_in, d_sae), "W_dec": (d_sae, d_out), "b_dec": (d_out,)}
    shapes.update({name: (d_sae,) for name in ARCHITECTURES[arch]})
    return shapes


def _read_weights(file: Path, arch: str, d_in: int, d_sae: int, d_out: int) -> dict[str, Tensor]:
    try:
        entries = safetensors_header(file)
    except CheckpointError as exc:
        raise SAEError(str(exc)) from None
    shapes = _shapes(arch, d_in, d_sae, d_out)
    for name, shape in shapes.items():
        entry = entries.get(name)
        if entry is None:
            raise SAEError(f"{file}: a {arch} SAE needs tensor {name!r}, which the file lacks")
        if entry.shape != shape:
            raise SAEError(f"{file}: tensor {name} is {list(entry.shape)}, but cfg.json (d_in {d_in}, d_sae {d_sae}) "
                           f"implies {list(shape)}")
        if entry.dtype not in _FLOATS:
            raise SAEError(f"{file}: tensor {name} is {entry.dtype}, not a floating-point tensor")
    extra = sorted(set(entries) - set(shapes) - {"scaling_factor"})
    if extra:
        raise SAEError(f"{file}: unexpected tensor{'s' if len(extra) > 1 else ''} {', '.join(extra[:3])} "
                       f"for a {arch} SAE")
    wanted = {name: entries[name] for name in shapes}
    if "scaling_factor" in entries:
        if entries["scaling_factor"].shape != (d_sae,) or entries["scaling_factor"].dtype not in _FLOATS:
            raise SAEError(f"{file}: tensor scaling_factor should be {d_sae} floats")
        wanted["scaling_factor"] = entries["scaling_factor"]
    need = sum(math.prod(e.shape) for e in wanted.values()) * 4 * 2  # float32, and a copy while converting
    free = available_memory()
    if free is not None and need > free:
        raise SAEError(f"{file}: its weights need about {need / 2**30:.1f} GiB; {free / 2**30:.1f} GiB is free")
    try:
        tensors = read_safetensors(file, wanted)
    except CheckpointError as exc:
        raise SAEError(str(exc)) from None
    weights = {}
    for name, t in tensors.items():
        t = t.float()
        if not torch.isfinite(t).all():
            raise SAEError(f"{file}: tensor {name} holds NaN or infinite values")
        weights[name] = t
    scaling = weights.pop("scaling_factor", None)
    if scaling is not None and not torch.equal(scaling, torch.ones_like(scaling)):
        raise SAEError(f"{file}: a finetuning scaling_factor other than 1 is not supported")
    return weights
