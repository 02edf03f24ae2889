"""The one configuration type that describes every architecture the explorer runs.

A transformer here is a stack of identical blocks between an embedding and an un-embedding.
The switches below choose the variant: where the norm sits, what kind of norm, how positions
enter, the FFN's activation and whether it is gated, and whether attention is causal.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from explorer.core.errors import CheckpointError

NORMS = ("layernorm", "rmsnorm", "none")
NORM_PLACEMENTS = ("pre", "post")
POSITIONS = ("learned", "sinusoidal", "rotary", "none")
ACTIVATIONS = ("gelu_tanh", "gelu", "relu", "silu")

# Sanity bounds: far above every real checkpoint (Llama-3.1-405B: 126 layers, d 16384, 128 heads,
# d_ff 53248; Gemma: vocabulary 262144; contexts up to 1M), far below what would only exhaust memory.
INT_BOUNDS: dict[str, tuple[int, int]] = {
    "vocab_size": (1, 1 << 22), "n_ctx": (1, 1 << 24), "d_model": (1, 1 << 16), "n_layers": (1, 1024),
    "n_heads": (1, 1024), "d_head": (1, 1 << 14), "d_ff": (0, 1 << 20), "n_kv_heads": (1, 1024),
    "rotary_dim": (2, 1 << 14)}
FLOAT_BOUNDS: dict[str, tuple[float, float]] = {"norm_eps": (0.0, 1.0), "rotary_base": (0.0, 1e15)}  # (low, high]
_CHOICES = {"norm": NORMS, "norm_placement": NORM_PLACEMENTS, "positions": POSITIONS, "activation": ACTIVATIONS}
_BOOLS = ("final_norm", "gated_ffn", "attn_only", "parallel_residual", "causal", "attn_bias", "mlp_bias",
          "tie_embeddings")

# Set while a checkpoint loads (checkpoint/validate.py): called with every ModelConfig built then, so
# each family's config is checked against the machine's memory before its model is allocated.
LOAD_CHECK: ContextVar[Callable[[Any], None] | None] = ContextVar("LOAD_CHECK", default=None)


def _type_problems(cfg: ModelConfig) -> list[str]:
    problems = []
    for name in INT_BOUNDS:
        value = getattr(cfg, name)
        if value is None and name in ("n_kv_heads", "rotary_dim"):
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            problems.append(f"{name} must be an integer (got {value!r})")
    for name in FLOAT_BOUNDS:
        value = getattr(cfg, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            problems.append(f"{name} must be a finite number (got {value!r})")
    for name, choices in _CHOICES.items():
        if getattr(cfg, name) not in choices:
            problems.append(f"{name} must be one of {choices} (got {getattr(cfg, name)!r})")
    for name in _BOOLS:
        if not isinstance(getattr(cfg, name), bool):
            problems.append(f"{name} must be true or false (got {getattr(cfg, name)!r})")
    if not isinstance(cfg.arch, str):
        problems.append(f"arch must be a string (got {cfg.arch!r})")
    return problems


def _range_problems(cfg: ModelConfig) -> list[str]:
    problems = []
    for name, (low, high) in INT_BOUNDS.items():
        value = getattr(cfg, name)
        if value is not None and not low <= value <= high:
            problems.append(f"{name} must be in [{low}, {high:,}] (got {value:,})")
    for name, (low, high) in FLOAT_BOUNDS.items():
        value = getattr(cfg, name)
        if not low < value <= high:
            problems.append(f"{name} must be in ({low:g}, {high:g}] (got {value!r})")
    if problems:
        return problems
    if cfg.n_kv_heads is not None and cfg.n_heads % cfg.n_kv_heads:
        problems.append(f"n_heads ({cfg.n_heads}) must be a multiple of n_kv_heads ({cfg.n_kv_heads})")
    if cfg.positions == "sinusoidal" and cfg.d_model % 2:
        problems.append("sinusoidal positions need an even d_model")
    if cfg.rotary_dim is not None and (cfg.rotary_dim % 2 or cfg.rotary_dim > cfg.d_head):
        problems.append(f"rotary_dim must be even and in (0, d_head] (got {cfg.rotary_dim})")
    if cfg.positions == "rotary" and cfg.rotary_dim is None and cfg.d_head % 2:
        problems.append(f"rotary positions need an even d_head (got {cfg.d_head})")
    return problems


def parameter_count(cfg: ModelConfig) -> int:
    """The number of weights ``Transformer(cfg)`` holds (tied embeddings counted once), from the shapes alone."""
    d, dh, H, Hkv, dff = cfg.d_model, cfg.d_head, cfg.n_heads, cfg.kv_heads, cfg.d_ff
    norm = 0 if cfg.norm == "none" else (2 * d if cfg.norm == "layernorm" else d)
    attn = 2 * d * H * dh + 2 * d * Hkv * dh + (H * dh + 2 * Hkv * dh + d if cfg.attn_bias else 0)
    ffn = 0
    if cfg.has_ffn:
        ffn = (3 if cfg.gated_ffn else 2) * d * dff + ((2 if cfg.gated_ffn else 1) * dff + d if cfg.mlp_bias else 0)
    block = norm + attn + (norm if cfg.has_ffn else 0) + ffn
    total = cfg.vocab_size * d * (1 if cfg.tie_embeddings else 2) + cfg.n_layers * block
    total += cfg.n_ctx * d if cfg.positions == "learned" else 0
    total += norm if cfg.final_norm else 0
    return total


@dataclass(frozen=True)
class ModelConfig:
    """Shapes and switches of a decoder (or encoder) transformer.

    Symbols used across the code base: V = ``vocab_size``, n = tokens in the prompt,
    d = ``d_model``, H = ``n_heads``, d_head = ``d_head``, d_ff = ``d_ff``, L = ``n_layers``.
    """

    vocab_size: int
    n_ctx: int
    d_model: int
    n_layers: int
    n_heads: int
    d_head: int
    d_ff: int
    arch: str = "gpt2"
    n_kv_heads: int | None = None  # grouped-query attention: fewer K/V heads than Q heads
    norm: str = "layernorm"
    norm_placement: str = "pre"
    norm_eps: float = 1e-5
    final_norm: bool = True
    positions: str = "learned"
    rotary_dim: int | None = None  # rotary: how many dimensions of each head rotate (None = all)
    rotary_base: float = 10000.0
    activation: str = "gelu_tanh"
    gated_ffn: bool = False
    attn_only: bool = False  # no FFN sublayer at all
    parallel_residual: bool = False  # attention and FFN both read the block's input
    causal: bool = True
    attn_bias: bool = True
    mlp_bias: bool = True
    tie_embeddings: bool = True

    def __post_init__(self) -> None:
        problems = _type_problems(self) or _range_problems(self)
        if problems:
            raise CheckpointError("invalid model configuration: " + "; ".join(problems))
        check = LOAD_CHECK.get()
        if check is not None:  # while a checkpoint loads: does it fit the machine? (checkpoint/validate.py)
            check(self)

    @property
    def kv_heads(self) -> int:
        return self.n_kv_heads or self.n_heads

    @property
    def has_ffn(self) -> bool:
        return not self.attn_only and self.d_ff > 0

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise CheckpointError(f"Unknown model configuration keys: {', '.join(unknown)}")
        try:
            return cls(**data)
        except TypeError as exc:  # a required field is missing
            raise CheckpointError(f"Incomplete model configuration: {exc}") from None

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def describe(self) -> str:
        norm = "no norm" if self.norm == "none" else f"{self.norm_placement}-norm {self.norm}"
        ffn = "attention only" if not self.has_ffn else (
            f"{'gated ' if self.gated_ffn else ''}{self.activation} FFN d_ff={self.d_ff}")
        heads = f"{self.n_heads} heads" + (f" ({self.kv_heads} K/V heads)" if self.kv_heads != self.n_heads else "")
        return (f"{self.arch}: {self.n_layers} layers, d_model={self.d_model}, {heads} of d_head={self.d_head}, "
                f"{ffn}, {norm}, {self.positions} positions, {'causal' if self.causal else 'bidirectional'}")
