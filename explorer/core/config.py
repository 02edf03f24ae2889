"""The one configuration type that describes every architecture the explorer runs.

A transformer here is a stack of identical blocks between an embedding and an un-embedding.
The switches below choose the variant: where the norm sits, what kind of norm, how positions
enter, the FFN's activation and whether it is gated, and whether attention is causal.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from explorer.core.errors import CheckpointError

NORMS = ("layernorm", "rmsnorm", "none")
NORM_PLACEMENTS = ("pre", "post", "sandwich", "output")  # sandwich: pre and output norms; output: OLMo 2
QK_NORMS = ("none", "head", "per_head", "full")
# RoPE scaling types (explorer/core/rope.py computes them) and the keys each needs
ROPE_SCALING_KEYS = {"default": (), "linear": ("factor",), "dynamic": ("factor", "max_position_embeddings"),
                     "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
                     "yarn": ("original_max_position_embeddings",),
                     "longrope": ("short_factor", "long_factor", "original_max_position_embeddings",
                                  "max_position_embeddings")}
POSITIONS = ("learned", "sinusoidal", "rotary", "none")
ACTIVATIONS = ("gelu_tanh", "gelu", "relu", "silu")


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
    # --- Gemma/Qwen/OLMo/Granite switches (issue 16a)
    attn_out_bias: bool | None = None  # W_O's bias; None = as attn_bias (Qwen2: q/k/v have biases, W_O none)
    norm_offset: float = 0.0  # RMSNorm multiplies by (offset + w): Gemma stores w - 1 and uses offset 1
    norm_affine: bool = True  # False: norms without weight or bias (OLMo's LayerNorm)
    qk_norm: str = "none"  # head: each head's q, k over d_head (Qwen3, Gemma 3); per_head: a weight per head
    #                        (StableLM); full: all heads' q (k) as one vector (OLMo 2)
    qkv_clip: float | None = None  # OLMo: q, k, v clamped to [-clip, clip]
    embed_scale: float = 1.0  # embedding rows times this (Gemma: sqrt(d); Granite: embedding_multiplier)
    attn_scale: float | None = None  # scores = q.k * attn_scale; None = 1/sqrt(d_head)
    attn_softcap: float | None = None  # Gemma 2: scores -> cap * tanh(scores / cap) before the mask
    final_softcap: float | None = None  # Gemma 2: logits -> cap * tanh(logits / cap)
    residual_scale: float = 1.0  # Granite: each sublayer's output times this before it is added
    logit_scale: float = 1.0  # Granite: logits times this (1 / logits_scaling)
    sliding_window: int | None = None  # a sliding layer's query sees only the last W keys (itself included)
    sliding_layers: tuple[int, ...] = ()  # which layers slide (Gemma 2: every other one)
    rope_scaling: tuple[tuple[str, Any], ...] = ()  # RoPE scaling parameters (explorer/core/rope.py), as pairs
    rotary_base_local: float | None = None  # rotary base of the sliding layers, unscaled (Gemma 3)
    # --- Phi/GPT-J/OPT/BLOOM/Falcon switches (issue 16c)
    alibi: bool = False  # BLOOM: ALiBi, a per-head penalty -m_h * (i - j) on the scores instead of positions
    alibi_before_scale: bool = False  # Falcon-RW: the penalty is added before the scale, (q.k + bias) / sqrt(d_head)
    rotary_interleaved: bool = False  # GPT-J: rotary turns pairs (x_2i, x_2i+1), not (x_i, x_i+r/2)
    shared_norm: bool = False  # parallel block whose attention and FFN read one norm (Phi, GPT-J, Falcon)
    embed_norm: bool = False  # BLOOM: a LayerNorm right after the token embedding
    unembed_bias: bool = False  # Phi, GPT-J: the un-embedding adds a bias per vocabulary entry
    d_embed: int | None = None  # OPT-350m: embeddings narrower than d_model, projected in and out

    def __post_init__(self) -> None:
        # JSON gives lists: keep the frozen config hashable and comparable
        object.__setattr__(self, "sliding_layers", tuple(int(i) for i in self.sliding_layers))
        scaling = self.rope_scaling.items() if isinstance(self.rope_scaling, dict) else self.rope_scaling
        object.__setattr__(self, "rope_scaling", tuple(sorted(  # LongRoPE's per-frequency factors: tuples
            (str(k), tuple(v) if isinstance(v, list) else v) for k, v in scaling)))
        problems = []
        for name in ("vocab_size", "n_ctx", "d_model", "n_layers", "n_heads", "d_head"):
            if int(getattr(self, name)) <= 0:
                problems.append(f"{name} must be positive (got {getattr(self, name)})")
        if self.d_ff < 0:
            problems.append(f"d_ff must not be negative (got {self.d_ff})")
        if self.norm not in NORMS:
            problems.append(f"norm must be one of {NORMS} (got {self.norm!r})")
        if self.norm_placement not in NORM_PLACEMENTS:
            problems.append(f"norm_placement must be one of {NORM_PLACEMENTS} (got {self.norm_placement!r})")
        if self.positions not in POSITIONS:
            problems.append(f"positions must be one of {POSITIONS} (got {self.positions!r})")
        if self.activation not in ACTIVATIONS:
            problems.append(f"activation must be one of {ACTIVATIONS} (got {self.activation!r})")
        if self.n_kv_heads is not None and (self.n_kv_heads <= 0 or self.n_heads % self.n_kv_heads):
            problems.append(f"n_heads ({self.n_heads}) must be a multiple of n_kv_heads ({self.n_kv_heads})")
        if self.positions == "sinusoidal" and self.d_model % 2:
            problems.append("sinusoidal positions need an even d_model")
        if self.rotary_dim is not None and (self.rotary_dim % 2 or not 0 < self.rotary_dim <= self.d_head):
            problems.append(f"rotary_dim must be even and in (0, d_head] (got {self.rotary_dim})")
        problems += self._problems_16a()
        if self.shared_norm and not self.parallel_residual:
            problems.append("shared_norm needs parallel_residual (one norm feeds attention and FFN side by side)")
        if self.d_embed is not None and self.d_embed <= 0:
            problems.append(f"d_embed must be positive (got {self.d_embed})")
        if problems:
            raise CheckpointError("Invalid model configuration: " + "; ".join(problems))

    def _problems_16a(self) -> list[str]:
        problems = []
        if self.qk_norm not in QK_NORMS:
            problems.append(f"qk_norm must be one of {QK_NORMS} (got {self.qk_norm!r})")
        if self.sliding_window is not None and self.sliding_window <= 0:
            problems.append(f"sliding_window must be positive (got {self.sliding_window})")
        if any(not 0 <= i < self.n_layers for i in self.sliding_layers):
            problems.append(f"sliding_layers must name layers 0..{self.n_layers - 1} (got {self.sliding_layers})")
        for name in ("attn_softcap", "final_softcap", "qkv_clip"):
            if getattr(self, name) is not None and getattr(self, name) <= 0:
                problems.append(f"{name} must be positive (got {getattr(self, name)})")
        kind = self.rope.get("rope_type", "default")
        if kind not in ROPE_SCALING_KEYS:
            problems.append(f"RoPE scaling type {kind!r} is not one of {tuple(ROPE_SCALING_KEYS)}")
        elif missing := [k for k in ROPE_SCALING_KEYS[kind] if self.rope.get(k) is None]:
            problems.append(f"RoPE scaling {kind!r} needs {', '.join(missing)}")
        return problems

    @property
    def rope(self) -> dict[str, Any]:
        """The RoPE scaling parameters as a mapping (empty: plain rotary positions)."""
        return dict(self.rope_scaling)

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
        positions = "ALiBi positions" if self.alibi else f"{self.positions} positions"
        return (f"{self.arch}: {self.n_layers} layers, d_model={self.d_model}, {heads} of d_head={self.d_head}, "
                f"{ffn}, {norm}, {positions}, {'causal' if self.causal else 'bidirectional'}"
                + self._describe_16a())

    def _describe_16a(self) -> str:
        extras = []
        if self.sliding_layers and self.sliding_window:
            extras.append(f"sliding window {self.sliding_window} on {len(self.sliding_layers)} layers")
        if self.attn_softcap or self.final_softcap:
            extras.append("soft-capped " + " and ".join(
                name for name, cap in (("scores", self.attn_softcap), ("logits", self.final_softcap)) if cap))
        if self.qk_norm != "none":
            extras.append("q/k norms")
        if self.rope:
            extras.append(f"RoPE scaling {self.rope.get('rope_type')}")
        return "".join(f", {e}" for e in extras)
