"""Helpers every checkpoint family uses to turn a foreign config and state dict into ours.

* config getters (``get``, ``get_int``, ``get_float``, ``get_bool``, ``activation``, ``rope``) that turn a
  missing or mistyped value (a bool or float for an integer, null, a string, NaN, infinity, a negative
  number) into a ``CheckpointError`` naming the file and the key;
* ``expected_shapes``: the shape of every tensor our ``Transformer`` needs for a config, built on
  the meta device (no memory);
* ``Tensors``: takes tensors out of a foreign state dict by name, checking each shape, and
  complains about whatever is left over.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from explorer.core.checkpoint.validate import current, meta_model
from explorer.core.config import ROPE_SCALING_KEYS, ModelConfig
from explorer.core.errors import CheckpointError

_ACTIVATIONS = {"silu": "silu", "swish": "silu", "gelu": "gelu", "gelu_new": "gelu_tanh",
                "gelu_pytorch_tanh": "gelu_tanh", "gelu_fast": None, "relu": "relu"}

# buffers that older checkpoints saved beside the weights; recomputed, never needed
_IGNORED_SUFFIXES = (".rotary_emb.inv_freq", ".attention.bias", ".attention.masked_bias")


def where(family: str) -> str:
    ctx = current()
    return f"{ctx.source}/config.json ({family})" if ctx is not None else f"{family} config.json"


def get(hf: dict[str, Any], family: str, key: str, default: Any = ...) -> Any:
    value = hf.get(key, default)
    if value is ...:
        raise CheckpointError(f"{where(family)} lacks {key!r}")
    return value


def get_int(hf: dict[str, Any], family: str, key: str, default: Any = ..., low: int = 0) -> int:
    """An integer >= ``low``: not a bool, a float, a string or null (a ``default`` of None passes through)."""
    value = get(hf, family, key, default)
    if value is None and default is None:
        return value
    if isinstance(value, bool) or not isinstance(value, int):
        raise CheckpointError(f"{where(family)}: {key} should be an integer (got {value!r:.60})")
    if value < low:
        raise CheckpointError(f"{where(family)}: {key} should be at least {low} (got {value})")
    return value


def get_float(hf: dict[str, Any], family: str, key: str, default: Any = ...) -> float:
    """A finite number (an integer is accepted): not a bool, a string, null, NaN or infinity."""
    value = get(hf, family, key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise CheckpointError(f"{where(family)}: {key} should be a finite number (got {value!r:.60})")
    return float(value)


def get_bool(hf: dict[str, Any], family: str, key: str, default: Any = ...) -> bool:
    value = get(hf, family, key, default)
    if not isinstance(value, bool):
        raise CheckpointError(f"{where(family)}: {key} should be true or false (got {value!r:.60})")
    return value


def activation(hf: dict[str, Any], family: str, default: str, key: str = "hidden_act") -> str:
    act = hf.get(key, default)
    if not isinstance(act, str) or _ACTIVATIONS.get(act) is None:
        raise CheckpointError(f"{where(family)}: activation {act!r:.60} is not supported "
                              f"({', '.join(k for k, v in _ACTIVATIONS.items() if v)} are)")
    return _ACTIVATIONS[act]


def rope(hf: dict[str, Any], family: str, theta_keys: tuple[str, ...],
         scaled_ok: bool = False) -> tuple[float, float | None]:
    """(rope theta, partial rotary factor or None), from ``rope_parameters`` (transformers 5) or the older keys.

    A RoPE scaling variant is refused unless ``scaled_ok`` (then ``rope_scaling`` reads it)."""
    params = hf.get("rope_parameters") or {}
    scaling = hf.get("rope_scaling") or {}
    if not isinstance(params, dict) or not isinstance(scaling, dict):
        raise CheckpointError(f"{where(family)}: rope_parameters / rope_scaling should be objects")
    for section in (params, scaling):
        kind = section.get("rope_type", section.get("type", "default"))
        if kind not in (None, "default") and not (scaled_ok and isinstance(kind, str) and kind in ROPE_SCALING_KEYS):
            supported = ", ".join(k for k in ROPE_SCALING_KEYS if k != "default") if scaled_ok else "none"
            raise CheckpointError(f"{where(family)}: RoPE scaling of type {kind!r:.40} is not supported "
                                  f"(supported scaling types: {supported})")
    theta = params.get("rope_theta")
    for key in theta_keys:
        if theta is None:
            theta = hf.get(key)
    partial = params.get("partial_rotary_factor", hf.get("partial_rotary_factor", hf.get("rotary_pct")))
    theta = 10000.0 if theta is None else theta
    for name, value in (("rope theta", theta), ("rotary fraction", partial)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not math.isfinite(value) or value <= 0):
            raise CheckpointError(f"{where(family)}: {name} should be a positive number (got {value!r:.60})")
    if partial is not None and partial > 1:
        raise CheckpointError(f"{where(family)}: rotary fraction should be at most 1 (got {partial!r})")
    return float(theta), (None if partial is None else float(partial))


def rope_scaling(hf: dict[str, Any], family: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    """The RoPE scaling variant as ``ModelConfig.rope_scaling`` keeps it (empty: plain rotary positions).

    Read from ``params`` or from ``rope_parameters`` (transformers 5) / ``rope_scaling`` (older files);
    the defaults transformers fills in are filled in the same way."""
    if params is None:
        params = {**(hf.get("rope_scaling") or {}), **(hf.get("rope_parameters") or {})}
    kind = params.get("rope_type", params.get("type")) or "default"
    if kind == "default":
        return {}
    if not isinstance(kind, str) or kind not in ROPE_SCALING_KEYS:
        raise CheckpointError(f"{where(family)}: RoPE scaling of type {kind!r:.40}, which is not supported "
                              f"(supported: {', '.join(k for k in ROPE_SCALING_KEYS if k != 'default')})")
    out = {k: v for k, v in params.items() if k not in ("rope_theta", "partial_rotary_factor", "type")}
    out["rope_type"] = kind
    context = get_int(hf, family, "max_position_embeddings", 2048)
    if kind in ("llama3", "yarn", "longrope"):
        if hf.get("original_max_position_embeddings") is not None:  # transformers gives it priority
            out["original_max_position_embeddings"] = hf["original_max_position_embeddings"]
        out.setdefault("original_max_position_embeddings", context)
    if kind in ("dynamic", "yarn", "longrope"):
        out["max_position_embeddings"] = context
    for key in ROPE_SCALING_KEYS[kind]:
        value = out.get(key)
        if key in ("short_factor", "long_factor"):  # LongRoPE: one positive factor per frequency
            if not isinstance(value, list) or not value or any(
                    isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0
                    for v in value):
                raise CheckpointError(f"{where(family)}: LongRoPE's {key} should be a list of positive "
                                      f"numbers (got {value!r:.80})")
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0 \
                or value > 1 << 24:  # a factor of 1e308 would overflow the context it scales
            raise CheckpointError(f"{where(family)}: RoPE scaling {kind!r} needs a positive number {key} "
                                  f"up to {1 << 24:,} (got {value!r:.40})")
    return out


def sliding_layers(hf: dict[str, Any], family: str, n_layers: int,
                   default: Callable[[int], bool]) -> tuple[int, ...]:
    """The layers that attend within a sliding window: config.json's ``layer_types`` (transformers 5)
    or, in older files, the family's rule ``default(layer)``."""
    types = hf.get("layer_types")
    if types is None:
        return tuple(i for i in range(n_layers) if default(i))
    known = ("sliding_attention", "full_attention")
    if not isinstance(types, list) or len(types) != n_layers or any(t not in known for t in types):
        raise CheckpointError(f"{where(family)}: layer_types should list {n_layers} of {known} (got {types!r})")
    return tuple(i for i, t in enumerate(types) if t == "sliding_attention")


def window(hf: dict[str, Any], family: str) -> int | None:
    value = hf.get("sliding_window")
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
        raise CheckpointError(f"{where(family)}: sliding_window should be a positive integer (got {value!r:.60})")
    return value


def number(hf: dict[str, Any], family: str, key: str, default: Any = None) -> float | None:
    """An optional positive number (multipliers, soft caps)."""
    value = hf.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise CheckpointError(f"{where(family)}: {key} should be a positive number (got {value!r:.60})")
    return float(value)


# --- helpers shared by Phi, Phi-3, GPT-Neo, GPT-J, OPT, BLOOM and Falcon

def rotary_dim(d_head: int, partial: float | None, family: str) -> int | None:
    """How many dimensions of each head rotate (None: all of them), as transformers rounds it."""
    if partial is None or partial == 1.0:
        return None
    dim = int(d_head * partial)
    if dim <= 0 or dim % 2 or dim > d_head:
        raise CheckpointError(f"{family}: the rotary part of each head ({dim} of {d_head} dimensions) "
                              "must be even, positive and fit the head")
    return dim


def positive_window(hf: dict[str, Any], family: str, key: str) -> int | None:
    window = hf.get(key)
    if window is None:
        return None
    if isinstance(window, bool) or not isinstance(window, int) or window <= 0:
        raise CheckpointError(f"{family} config.json: {key} should be a positive integer (got {window!r})")
    return window


# --- tensors --------------------------------------------------------------------------------

class Tensors:
    """Takes tensors out of a checkpoint by their name there, checking the shape ours will need."""

    def __init__(self, weights: dict[str, torch.Tensor], family: str) -> None:
        self.sd = {k: v for k, v in weights.items() if not k.endswith(_IGNORED_SUFFIXES)}
        if isinstance(weights, dict):
            weights.clear()  # consumed: a tensor converted by copy (a reshape) is then held once
        self.family = family

    def take(self, name: str, shape: tuple[int, ...]) -> torch.Tensor:
        if name not in self.sd:
            raise CheckpointError(f"{self.family} checkpoint lacks tensor {name}")
        t = self.sd.pop(name)
        if not isinstance(t, torch.Tensor):
            raise CheckpointError(f"{self.family} checkpoint: {name} is not a tensor")
        if tuple(t.shape) != tuple(shape):
            raise CheckpointError(f"{self.family} checkpoint: tensor {name} has shape {tuple(t.shape)}, "
                                  f"the config implies {tuple(shape)}")
        return t

    def unembedding(self, out: dict[str, torch.Tensor], cfg: ModelConfig, shapes: dict[str, tuple[int, ...]],
                    name: str = "lm_head.weight") -> torch.Tensor:
        """The un-embedding matrix: the embedding itself when tied (a tied copy some writers save under
        ``name`` is dropped), else the checkpoint's ``name``, shape-checked."""
        if cfg.tie_embeddings:
            self.sd.pop(name, None)
            return out["embed.weight"]
        return self.take(name, shapes["unembed.weight"])

    def finish(self) -> None:
        if self.sd:
            raise CheckpointError(f"{self.family} checkpoint has unexpected tensors: {', '.join(sorted(self.sd)[:6])}"
                                  + (" ..." if len(self.sd) > 6 else ""))


def expected_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    return {k: tuple(v.shape) for k, v in meta_model(cfg).state_dict().items()}


# a multimodal file's language model under the text model's names (Gemma 3, Gemma 4, Mistral 3, Qwen3.5)
LANGUAGE_MODEL_PREFIXES = {"model.language_model.": "model.", "language_model.model.": "model.",
                           "language_model.lm_head.": "lm_head."}


def language_model_weights(weights: dict[str, torch.Tensor], dropped: tuple[str, ...],
                           prefixes: dict[str, str] = LANGUAGE_MODEL_PREFIXES) -> dict[str, torch.Tensor]:
    """The language model's tensors of a multimodal file: those starting with one of ``dropped`` (the vision or
    audio towers, projectors, an extra prediction head) left out, the rest renamed by their first matching prefix."""
    out = {}
    for name, tensor in weights.items():
        if name.startswith(dropped):
            continue
        for theirs, ours in prefixes.items():
            if name.startswith(theirs):
                name = ours + name[len(theirs):]
                break
        out[name] = tensor
    return out
