"""A trace as safetensors under TransformerLens' hook names, and back.

``write_trace_safetensors`` writes every key a ``Trace`` can give (stored or derived) under the name
TransformerLens' ``HookedTransformer`` gives the same activation, with a leading batch axis of 1 and
TransformerLens' axis order, so that ``cache["blocks.0.attn.hook_pattern"]`` and the file's tensor of
that name can be compared directly. The metadata (``__metadata__``, strings only) holds the prompt,
the token ids and strings, the model name and configuration, and what the capture stored.
``read_trace_safetensors`` turns such a file back into a ``Trace`` without a model, for the app's
File > Open trace: whatever was exported is there, whatever needs the weights is not.

The file is written by a small streaming writer (the safetensors layout: an 8-byte header length, a
JSON header of names, dtypes, shapes and byte offsets, then the raw bytes): the header is computed
from the configuration alone, then one array at a time is produced and written, so a long prompt on a
large model never holds every layer's n x n patterns at once. It is read back with the
``safetensors`` package, which never executes anything from a file.

The mapping (L layers; ``rot`` for models with rotary positions) is ``TL_NAMES`` below and the
README's table. TransformerLens' ``from_pretrained`` folds and centres weights, which changes the
residual stream; compare against ``HookedTransformer.from_pretrained_no_processing``.
"""

from __future__ import annotations

import json
import os
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from explorer.core import arguments
from explorer.core.config import ModelConfig
from explorer.core.errors import ExplorerError
from explorer.core.text import MESSAGE_LIMIT, TOKEN_LIMIT, capped_text, capped_token, shown
from explorer.core.trace import Trace, TraceMeta
from explorer.core.trace_keys import INTEGER_SITES, site_shape

FORMAT = "transformer-explorer-trace"
FORMAT_VERSION = "1"
EXTRA = "explorer."  # prefix of what TransformerLens has no hook for (raw norm statistics, ...)

# our site (inside block l) -> TransformerLens hook, and how our axes become TL's (after batch)
TL_NAMES: dict[str, str] = {
    "resid_pre": "hook_resid_pre",
    "attn.q": "attn.hook_q",             # attn.hook_rot_q when positions are rotary (q is after rotation)
    "attn.k": "attn.hook_k",             # attn.hook_rot_k likewise
    "attn.v": "attn.hook_v",
    "attn.scores": "attn.hook_attn_scores",
    "attn.pattern": "attn.hook_pattern",
    "attn.z": "attn.hook_z",
    "attn.out": "hook_attn_out",
    "resid_mid": "hook_resid_mid",       # explorer.blocks.{l}.resid_mid for parallel attention + MLP
    "mlp.pre": "mlp.hook_pre",
    "mlp.post": "mlp.hook_post",
    "mlp.out": "hook_mlp_out",
    # mixtures of experts (TransformerLens 4's MoE bridge: the router is the block's gate, its output the logits)
    "moe.router_logits": "mlp.gate.hook_out",
    "moe.weights": "mlp.hook_expert_weights",     # [batch, pos, k]: what multiplies each chosen expert
    "moe.experts": "mlp.hook_expert_indices",     # [batch, pos, k]: the chosen experts (int64)
    "moe.shared_out": "mlp.shared_experts.hook_out",
}
# what TransformerLens has no hook for is written under our own key, prefixed (EXTRA), in our layout
OWN_SITES = ("attn.sink", "attn.scores_precap", "moe.probs", "moe.choice", "moe.expert_out")
_HEAD_MAJOR = ("attn.q", "attn.k", "attn.v", "attn.z")  # ours [H, n, dh] -> TL [batch, pos, H, dh]
_STATS = ("mean", "var", "mean_square")
_FLOAT = np.dtype(np.float32)


class TraceFileError(ExplorerError):
    """A trace file that cannot be read back (not ours, damaged, or inconsistent with its config)."""


@dataclass(frozen=True)
class Entry:
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    produce: Callable[[], np.ndarray]


def tl_name(key: str, cfg: ModelConfig) -> str | None:
    """TransformerLens' name for one of our trace keys (None for norm statistics: see ``hook_scale``)."""
    if key in ("embed", "pos_embed"):
        return f"hook_{key}"
    if key == "logits":
        return "logits"
    match = re.match(r"^blocks\.(\d+)\.(.+)$", key)
    if not match or match.group(2) not in TL_NAMES:
        return None
    layer, site = match.groups()
    if site == "resid_mid" and cfg.parallel_residual:
        return f"{EXTRA}blocks.{layer}.resid_mid"
    name = TL_NAMES[site]
    if cfg.positions == "rotary" and site in ("attn.q", "attn.k"):
        name = name.replace("hook_", "hook_rot_")
    return f"blocks.{layer}.{name}"


def _tl_layout(site: str, array: np.ndarray) -> np.ndarray:
    if site in _HEAD_MAJOR:
        array = array.transpose(1, 0, 2)
    return np.ascontiguousarray(array[None], dtype=_dtype(site))


def _dtype(site: str) -> np.dtype:
    return np.dtype(np.int64) if site in INTEGER_SITES else _FLOAT


def router_scores(trace: Trace, layer: int) -> np.ndarray:
    """TransformerLens 4's ``hook_router_scores`` [1, n, E]: each chosen expert's weight at its expert, 0 elsewhere."""
    experts, weights = trace[f"blocks.{layer}.moe.experts"], trace[f"blocks.{layer}.moe.weights"]
    scores = np.zeros((len(experts), trace.config.n_experts), dtype=_FLOAT)
    np.put_along_axis(scores, experts, weights.astype(_FLOAT), axis=-1)
    return scores[None]


def _site(key: str) -> str:
    match = re.match(r"^blocks\.\d+\.(.+)$", key)
    return match.group(1) if match else key


def _shape_of(key: str, cfg: ModelConfig, n: int) -> tuple[int, ...]:
    """Our shape of ``key`` for n tokens (from the configuration and its per-layer plan, without computing anything)."""
    match = re.match(r"^blocks\.(\d+)\.(.+)$", key)
    if match:
        return site_shape(cfg, match.group(2), n, int(match.group(1)))
    return site_shape(cfg, key, n)


def _tl_shape(site: str, shape: tuple[int, ...]) -> tuple[int, ...]:
    if site in _HEAD_MAJOR:
        shape = (shape[1], shape[0], shape[2])
    return (1, *shape)


def _scale(trace: Trace, prefix: str) -> np.ndarray:
    """TransformerLens' ``hook_scale`` [1, n, 1]: sqrt(var + eps) (LayerNorm), sqrt(mean(x^2) + eps) (RMSNorm)."""
    key = f"{prefix}.var" if trace.config.norm == "layernorm" else f"{prefix}.mean_square"
    stat = np.asarray(trace[key], dtype=np.float64)
    scale = np.sqrt(stat + trace.config.norm_eps).astype(np.float32)
    if scale.ndim == 2:  # per head [H, n] -> TransformerLens' [batch, pos, head_index, 1]
        return np.ascontiguousarray(scale.T[None, :, :, None])
    return scale[None, :, None]


def trace_entries(trace: Trace) -> list[Entry]:
    """Every tensor the file will hold, in order, with its shape known before anything is computed."""
    cfg, n = trace.config, trace.n_tokens
    available = trace.keys()
    entries = [Entry("tokens", (1, n), np.dtype(np.int64), lambda: trace.token_ids[None].astype(np.int64))]
    scaled: set[str] = set()

    def add_key(key: str) -> None:
        name = tl_name(key, cfg)
        site = _site(key)
        if name is not None:
            entries.append(Entry(name, _tl_shape(site, _shape_of(key, cfg, n)), _dtype(site),
                                 lambda k=key, s=site: _tl_layout(s, trace[k])))
            if site == "moe.weights":
                layer = int(key.split(".")[1])
                entries.append(Entry(f"blocks.{layer}.mlp.hook_router_scores", (1, n, cfg.n_experts), _FLOAT,
                                     lambda la=layer: router_scores(trace, la)))
        elif site in OWN_SITES:
            entries.append(Entry(EXTRA + key, _shape_of(key, cfg, n), _FLOAT,
                                 lambda k=key: np.ascontiguousarray(trace[k], dtype=_FLOAT)))
        elif site.split(".")[-1] in _STATS:  # a norm statistic: TL's hook_scale once, ours kept as extras
            prefix = key.rsplit(".", 1)[0]
            shape = _shape_of(key, cfg, n)
            if prefix not in scaled:
                scaled.add(prefix)
                tl_shape = (1, n, shape[0], 1) if len(shape) == 2 else (1, n, 1)
                entries.append(Entry(f"{prefix}.hook_scale", tl_shape, _FLOAT, lambda p=prefix: _scale(trace, p)))
            entries.append(Entry(EXTRA + key, shape, _FLOAT,
                                 lambda k=key: np.ascontiguousarray(trace[k], dtype=_FLOAT)))

    for key in available:
        if not key.startswith("blocks.") and key not in ("resid_final", "logits"):
            add_key(key)
    for layer in range(cfg.n_layers):
        for key in available:
            if key.startswith(f"blocks.{layer}."):
                add_key(key)
        after = f"blocks.{layer + 1}.resid_pre" if layer + 1 < cfg.n_layers else "resid_final"
        if after in available:  # TL's hook_resid_post: the stream leaving the block
            entries.append(Entry(f"blocks.{layer}.hook_resid_post", (1, n, cfg.d_model), _FLOAT,
                                 lambda k=after: _tl_layout("resid", trace[k])))
    if "logits" in available:
        entries.append(Entry("logits", (1, n, cfg.vocab_size), _FLOAT, lambda: _tl_layout("logits", trace["logits"])))
    return entries


def capture_settings(trace: Trace) -> dict[str, Any]:
    """What the capture stored (the rest was derived for the export), read off the stored arrays."""
    from explorer.core.trace import kind_of

    kinds, layers, dtypes = set(), set(), set()
    for key in trace.stored_keys():
        match = re.match(r"^blocks\.(\d+)\.(.+)$", key)
        kinds.add(kind_of(match.group(2) if match else key))
        if match:
            layers.add(int(match.group(1)))
        dtypes.add(trace.stored_dtype(key))
    return {"stored_kinds": sorted(kinds), "stored_layers": sorted(layers), "storage_dtype": sorted(dtypes)}


def trace_metadata(trace: Trace, prompt: str | None = None) -> dict[str, str]:
    from explorer.core.trace import KINDS

    meta = trace.meta
    return {
        "format": FORMAT, "format_version": FORMAT_VERSION, "naming": "TransformerLens HookedTransformer",
        "model_name": meta.model_name, "prompt": prompt if prompt is not None else "",
        "token_ids": json.dumps([int(i) for i in trace.token_ids]),
        "tokens": json.dumps(list(trace.tokens), ensure_ascii=False),
        "config": json.dumps(trace.config.to_dict()),
        "capture": json.dumps({**capture_settings(trace), "kinds": list(KINDS)}),
        "device": meta.device, "dtype": meta.dtype, "weights": str(meta.extra.get("weights") or meta.dtype),
        "truncated_from": "" if meta.truncated_from is None else str(meta.truncated_from),
        "exported_dtype": "float32",
        **({"chat": meta.chat.to_json()} if meta.chat is not None else {}),  # each token's turn, role and kind
    }


_DTYPE_CODES = {np.dtype(np.float32): "F32", np.dtype(np.int64): "I64", np.dtype(np.float16): "F16"}


def _header(entries: list[Entry], metadata: dict[str, str]) -> bytes:
    header: dict[str, Any] = {"__metadata__": metadata}
    offset = 0
    for e in entries:
        size = int(np.prod(e.shape, dtype=np.int64)) * e.dtype.itemsize
        header[e.name] = {"dtype": _DTYPE_CODES[e.dtype], "shape": list(e.shape), "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return raw + b" " * (-len(raw) % 8)  # the data starts 8-byte aligned, as safetensors writes it


def write_trace_safetensors(trace: Trace, target: str | os.PathLike[str], prompt: str | None = None,
                            provenance: dict[str, Any] | None = None) -> Path:
    """Write ``trace`` as safetensors under TransformerLens' names (atomically; one array in memory at a time).
    ``provenance`` (``core/provenance.record``) goes into the metadata as JSON text."""
    from explorer.core.export import atomic_path

    arguments.instance(trace, Trace, "trace", "a Trace (LoadedModel.trace)")
    arguments.path(target, "target")
    arguments.instance(prompt, str, "prompt", "text (a str) or None", none=True)
    entries = trace_entries(trace)
    metadata = trace_metadata(trace, prompt)
    if provenance is not None:
        metadata["provenance"] = json.dumps(provenance, ensure_ascii=False, default=str)
    header = _header(entries, metadata)
    target = Path(target)
    with atomic_path(target) as tmp, open(tmp, "wb") as out:
        out.write(struct.pack("<Q", len(header)))
        out.write(header)
        for e in entries:
            array = e.produce()
            if array.shape != e.shape or array.dtype != e.dtype:
                raise RuntimeError(f"{e.name}: produced {array.shape} {array.dtype}, declared {e.shape} {e.dtype}")
            out.write(np.ascontiguousarray(array).tobytes())
    return target


# --- reading back --------------------------------------------------------------------------------

def _our_key(name: str, cfg: ModelConfig) -> tuple[str, str] | None:
    """(our key, our site) for a name in our files; None for what is not read back (hook_scale, tokens)."""
    if name in ("hook_embed", "hook_pos_embed"):
        return name.removeprefix("hook_"), name.removeprefix("hook_")
    if name == "logits":
        return "logits", "logits"
    if name.startswith(EXTRA):
        key = name.removeprefix(EXTRA)
        return key, _site(key)
    match = re.match(r"^blocks\.(\d+)\.(.+)$", name)
    if not match:
        return None
    layer, hook = int(match.group(1)), match.group(2).replace("hook_rot_", "hook_")
    if hook == "hook_resid_post" and layer == cfg.n_layers - 1:
        return "resid_final", "resid_final"
    for site, tl in TL_NAMES.items():
        if tl == hook:
            return f"blocks.{layer}.{site}", site
    return None


def _from_file(site: str, array: np.ndarray) -> np.ndarray:
    """Our layout of a tensor in the file: TL's layout less the batch axis (norm statistics and our own
    keys are ours already)."""
    if site.split(".")[-1] in _STATS or site in OWN_SITES:
        return np.ascontiguousarray(array)
    if array.ndim < 2 or array.shape[0] != 1:
        raise ValueError(f"expected a leading batch axis of 1, got shape {tuple(array.shape)}")
    array = array[0]
    if site in _HEAD_MAJOR:
        array = array.transpose(1, 0, 2)
    return np.ascontiguousarray(array)


def read_trace_safetensors(path: str | os.PathLike[str]) -> Trace:
    """A ``Trace`` without a model from a file ``write_trace_safetensors`` wrote (File > Open trace).

    Everything exported is there; what needs the weights (a logit lens, a neuron's vocabulary effect,
    nearest vocabulary neighbours, re-running a block) is not, and the Trace says so when asked.
    """
    from safetensors import safe_open

    path = arguments.path(path, "path")
    try:
        with safe_open(str(path), framework="numpy") as f:
            meta = f.metadata() or {}
            if meta.get("format") != FORMAT:
                raise TraceFileError(f"{path.name} is not a Transformer Explorer trace (no '{FORMAT}' metadata)")
            cfg = ModelConfig.from_dict(json.loads(meta["config"]))
            token_ids, tokens = _checked_tokens(path, meta, cfg)
            n = len(token_ids)
            arrays: dict[str, np.ndarray] = {}
            for name in f.keys():
                mapped = _our_key(name, cfg)
                if mapped is None:
                    continue
                key, site = mapped
                value = _from_file(site, f.get_tensor(name))
                expected = _shape_of(key, cfg, n)
                if tuple(value.shape) != expected:
                    raise TraceFileError(f"{path.name}: {name} gives {key} the shape {tuple(value.shape)}; "
                                         f"the configuration implies {expected}")
                value.flags.writeable = False
                arrays[key] = value
        if not arrays:
            raise TraceFileError(f"{shown(path.name)} holds no traced tensors (only its metadata)")
        truncated = meta.get("truncated_from") or None
        if truncated is not None and (not str(truncated).isdigit() or not n <= int(truncated) <= 1 << 40):
            raise TraceFileError(f"{shown(path.name)}: truncated_from {shown(truncated, 40)!r} is not a token count "
                                 f"of at least {n}")
        trace_meta = TraceMeta(model_name=shown(meta.get("model_name", "")), device=shown(meta.get("device", "cpu"), 40),
                               dtype=shown(meta.get("dtype", "float32"), 40),
                               truncated_from=int(truncated) if truncated else None,
                               extra={"source_file": str(path), "prompt": capped_text(meta.get("prompt", ""), "prompt"),
                                      "notes": _cut_notes(meta, tokens), "weights": shown(meta.get("weights", ""), 40),
                                      # the exporting run's record, as JSON text (dropped if implausibly long)
                                      "provenance": _provenance_text(meta.get("provenance", ""))},
                               chat=_chat_spans(path, meta.get("chat"), n))
        return Trace(token_ids, [capped_token(t) for t in tokens], cfg, arrays, trace_meta, model=None)
    except ExplorerError as exc:
        if isinstance(exc, TraceFileError):
            raise TraceFileError(shown(str(exc), MESSAGE_LIMIT)) from None
        raise TraceFileError(shown(f"{path.name}: {exc}", MESSAGE_LIMIT)) from None
    except Exception as exc:  # noqa: BLE001 - a damaged or foreign file: one line for the user
        raise TraceFileError(shown(f"cannot read {path.name} as a trace: {type(exc).__name__}: {exc}",
                                   MESSAGE_LIMIT)) from None


def _chat_spans(path: Path, text: str | None, n: int) -> Any:
    """The file's chat spans (None for a trace of raw text, and for files written before they existed)."""
    if not text:
        return None
    from explorer.core.chat.spans import ChatSpans

    try:
        return ChatSpans.from_json(text, n)
    except (ValueError, TypeError, RecursionError) as exc:
        raise TraceFileError(f"{shown(path.name)}: its chat spans cannot be read: {shown(str(exc), 120)}") from None


def _provenance_text(text: str) -> str:
    """A file's provenance record as it was written, or "" for one too long to be ours (it is JSON: not cut)."""
    return text if len(text) <= 1_000_000 else ""


def _cut_notes(meta: dict[str, str], tokens: list[str]) -> list[str]:
    """What of the file's text was cut before it is shown (``explorer.core.text``): the prompt, the model's
    name, tokens."""
    notes = []
    prompt, name = meta.get("prompt", ""), meta.get("model_name", "")
    if capped_text(prompt) != prompt:
        notes.append(f"the prompt in the file has {len(prompt):,} characters: only its start is shown")
    if shown(name) != name:
        notes.append(f"the model's name in the file has {len(name):,} characters: it is shown cut or escaped")
    long_tokens = sum(len(t) > TOKEN_LIMIT for t in tokens)
    if long_tokens:
        notes.append(f"{long_tokens} token(s) longer than {TOKEN_LIMIT:,} characters are shown cut")
    return notes


def _checked_tokens(path: Path, meta: dict[str, str], cfg: ModelConfig) -> tuple[list[int], list[str]]:
    """The metadata's token ids (whole numbers in the vocabulary) and their strings, as many of each."""
    token_ids, tokens = json.loads(meta["token_ids"]), json.loads(meta["tokens"])
    if not isinstance(token_ids, list) or not token_ids or any(
            isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < cfg.vocab_size for i in token_ids):
        raise TraceFileError(f"{shown(path.name)}: token_ids should be a list of ids in the vocabulary "
                             f"(0 to {cfg.vocab_size - 1}); got {shown(meta['token_ids'], 60)}")
    if not isinstance(tokens, list) or len(tokens) != len(token_ids) or not all(isinstance(t, str) for t in tokens):
        raise TraceFileError(f"{shown(path.name)}: {len(token_ids)} token ids but not as many token strings")
    return token_ids, tokens
