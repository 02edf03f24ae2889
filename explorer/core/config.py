"""The one configuration type that describes every architecture the explorer runs.

A transformer here is a stack of identical blocks between an embedding and an un-embedding.
The switches below choose the variant: where the norm sits, what kind of norm, how positions
enter, the FFN's activation and whether it is gated, and whether attention is causal.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from dataclasses import dataclass
from typing import Any, Literal, get_args

from explorer.core.errors import CheckpointError
from explorer.core.plan import LayerPlan, layer_plans, plan_problems

Norm = Literal["layernorm", "rmsnorm", "none"]
NormPlacement = Literal["pre", "post", "sandwich", "output"]  # sandwich: pre and output norms; output: OLMo 2
QKNorm = Literal["none", "head", "per_head", "full", "head_unscaled"]  # head_unscaled: Llama 4 (no weight)
Positions = Literal["learned", "sinusoidal", "rotary", "none"]
Activation = Literal["gelu_tanh", "gelu", "relu", "silu", "relu2"]  # relu2: relu(x)^2 (Nemotron-H)
# how a mixture of experts routes (core/moe.py): softmax then top-k (Mixtral, Qwen, OLMoE, DeepSeek-V2); top-k of the
# logits then softmax (gpt-oss, GraniteMoE); sigmoid, top-k of sigmoid + bias (DeepSeek-V3, GLM-4.5); PhiMoE's
# sparsemixer; top-k of the logits then sigmoid (Llama 4)
Router = Literal["softmax_topk", "topk_softmax", "sigmoid_topk", "sparsemixer", "topk_sigmoid"]
NORMS, NORM_PLACEMENTS, QK_NORMS = get_args(Norm), get_args(NormPlacement), get_args(QKNorm)
ROUTERS = get_args(Router)
# RoPE scaling types (explorer/core/rope.py computes them) and the keys each needs
ROPE_SCALING_KEYS = {"default": (), "linear": ("factor",), "dynamic": ("factor", "max_position_embeddings"),
                     "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
                     "yarn": ("original_max_position_embeddings",),
                     "longrope": ("short_factor", "long_factor", "original_max_position_embeddings",
                                  "max_position_embeddings"),
                     "proportional": ("proportion",)}  # Gemma 4's global layers: the first p x d/2 pairs turn
POSITIONS, ACTIVATIONS = get_args(Positions), get_args(Activation)

# Sanity bounds: far above every real checkpoint (Llama-3.1-405B: 126 layers, d 16384, 128 heads,
# d_ff 53248; Gemma: vocabulary 262144; contexts up to 1M), far below what would only exhaust memory.
INT_BOUNDS: dict[str, tuple[int, int]] = {
    "vocab_size": (1, 1 << 22), "n_ctx": (1, 1 << 24), "d_model": (1, 1 << 16), "n_layers": (1, 1024),
    "n_heads": (1, 1024), "d_head": (1, 1 << 14), "d_ff": (0, 1 << 20), "n_kv_heads": (1, 1024),
    "rotary_dim": (2, 1 << 14), "sliding_window": (1, 1 << 24), "token_types": (0, 1 << 16),
    "attention_chunk": (1, 1 << 24), "d_head_v": (1, 1 << 14), "kv_lora_rank": (1, 1 << 16),
    "q_lora_rank": (1, 1 << 16), "n_experts": (0, 1 << 16), "experts_per_token": (0, 1 << 10),
    "d_expert": (0, 1 << 20), "d_shared": (0, 1 << 20), "moe_groups": (1, 1 << 16), "moe_topk_groups": (1, 1 << 16)}
FLOAT_BOUNDS: dict[str, tuple[float, float]] = {"norm_eps": (0.0, 1.0), "rotary_base": (0.0, 1e15)}  # (low, high]
_CHOICES = {"norm": NORMS, "norm_placement": NORM_PLACEMENTS, "positions": POSITIONS, "activation": ACTIVATIONS,
            "moe_router": ROUTERS}
_BOOLS = ("final_norm", "gated_ffn", "attn_only", "parallel_residual", "causal", "attn_bias", "mlp_bias",
          "tie_embeddings", "norm_affine", "embed_norm", "mlm_head", "attn_sinks", "moe_norm_topk",
          "moe_router_bias", "moe_choice_bias", "moe_shared_gate", "moe_expert_bias", "moe_input_weight",
          "attn_output_gate", "attn_k_eq_v", "v_norm", "conv_bias", "mixer_bias", "layer_scalars", "wide_shared_ffn",
          "parallel_ssm")
_OPTIONAL = ("n_kv_heads", "rotary_dim", "sliding_window", "attn_out_bias", "attn_scale", "attn_softcap",
             "final_softcap", "qkv_clip", "rotary_base_local", "attention_chunk", "d_head_v", "kv_lora_rank",
             "q_lora_rank", "attn_temperature", "moe_glu_limit", "ssm_dt_max")
_FINITE = ("norm_offset", "embed_scale", "residual_scale", "logit_scale", "attn_scale", "attn_softcap",
           "final_softcap", "qkv_clip", "rotary_base_local", "attn_temperature", "attn_temperature_floor",
           "moe_scale", "moe_jitter", "moe_glu_limit", "moe_glu_alpha", "ssm_dt_min", "ssm_dt_max")  # finite numbers (or None where optional)
# per-layer lists (config.json gives lists; kept as tuples): layer numbers, or (layer_mixers) one name per layer
_LAYER_LISTS = ("sliding_layers", "chunked_layers", "nope_layers", "moe_layers", "qk_norm_layers", "ffn_free_layers")


def _type_problems(cfg: ModelConfig) -> list[str]:
    problems = []
    for name in INT_BOUNDS:
        value = getattr(cfg, name)
        if value is None and name in _OPTIONAL:
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
    for name in _FINITE:
        value = getattr(cfg, name)
        if value is None and name in _OPTIONAL:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            problems.append(f"{name} must be a finite number (got {value!r:.60})")
    for name in _BOOLS:
        if not isinstance(getattr(cfg, name), bool):
            problems.append(f"{name} must be true or false (got {getattr(cfg, name)!r})")
    if cfg.attn_out_bias is not None and not isinstance(cfg.attn_out_bias, bool):
        problems.append(f"attn_out_bias must be true, false or null (got {cfg.attn_out_bias!r:.60})")
    if not isinstance(cfg.qk_norm, str):
        problems.append(f"qk_norm must be a string (got {cfg.qk_norm!r:.60})")
    for name in _LAYER_LISTS:
        layers = getattr(cfg, name)
        if layers is None and name == "qk_norm_layers":
            continue
        if not isinstance(layers, (list, tuple)) or not all(isinstance(i, int) and not isinstance(i, bool)
                                                            for i in layers):
            problems.append(f"{name} must be a list of layer numbers (got {layers!r:.60})")
    mixers = cfg.layer_mixers
    if not isinstance(mixers, (list, tuple)) or not all(isinstance(m, str) for m in mixers):
        problems.append(f"layer_mixers must be a list of mixer names (got {mixers!r:.60})")
    scaling = cfg.rope_scaling
    pairs = list(scaling.items()) if isinstance(scaling, dict) else scaling
    if not isinstance(pairs, (list, tuple)) or not all(
            isinstance(p, (list, tuple)) and len(p) == 2 and isinstance(p[0], str) and _plain_value(p[1])
            for p in pairs):
        problems.append(f"rope_scaling must map names to numbers or strings (got {scaling!r:.80})")
    if not isinstance(cfg.arch, str):
        problems.append(f"arch must be a string (got {cfg.arch!r})")
    return problems


def _plain_value(value: Any) -> bool:
    if isinstance(value, (list, tuple)):
        return all(_plain_value(v) for v in value)
    if isinstance(value, float):
        return math.isfinite(value)
    return value is None or isinstance(value, (str, bool, int))


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


@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    """Shapes and switches of a decoder (or encoder) transformer, in the order the forward pass meets them.

    Symbols used across the code base: V = ``vocab_size``, n = tokens in the prompt,
    d = ``d_model``, H = ``n_heads``, d_head = ``d_head``, d_ff = ``d_ff``, L = ``n_layers``.
    The fields stay flat (config.json and trace files store them as flat keys); each section below
    is one step of ``Transformer.forward``. Keyword arguments only.
    """

    arch: str = "gpt2"
    # --- shapes
    vocab_size: int
    n_ctx: int
    d_model: int
    n_layers: int
    n_heads: int
    d_head: int
    d_ff: int
    # --- 1. embedding: token rows (times a scale), token types, a norm over the sum
    d_embed: int | None = None  # OPT-350m: embeddings narrower than d_model, projected in and out
    embed_scale: float = 1.0  # embedding rows times this (Gemma: sqrt(d); Granite: embedding_multiplier)
    token_types: int = 0  # BERT's token-type (segment) embeddings; the one segment, type 0, is added everywhere
    embed_norm: bool = False  # a norm over the summed embeddings before the first block (BERT, BLOOM)
    # --- 2. positions: added to the embedding, or turning q and k (rotary), or a bias on the scores (ALiBi)
    positions: Positions = "learned"
    rotary_dim: int | None = None  # rotary: how many dimensions of each head rotate (None = all)
    rotary_base: float = 10000.0
    rotary_base_local: float | None = None  # rotary base of the sliding layers, unscaled (Gemma 3)
    rope_scaling: tuple[tuple[str, Any], ...] = ()  # RoPE scaling parameters (explorer/core/rope.py), as pairs
    rotary_interleaved: bool = False  # GPT-J: rotary turns pairs (x_2i, x_2i+1), not (x_i, x_i+r/2)
    alibi: bool = False  # BLOOM: ALiBi, a per-head penalty -m_h * (i - j) on the scores instead of positions
    alibi_before_scale: bool = False  # Falcon-RW: the penalty is added before the scale, (q.k + bias) / sqrt(d_head)
    nope_layers: tuple[int, ...] = ()  # layers without rotary positions (Llama 4's, SmolLM3's NoPE layers)
    # --- 3. attention: projections, q/k norms, scores (scale, bias, mask, cap), pattern, output
    causal: bool = True
    n_kv_heads: int | None = None  # grouped-query attention: fewer K/V heads than Q heads
    attn_bias: bool = True
    attn_out_bias: bool | None = None  # W_O's bias; None = as attn_bias (Qwen2: q/k/v have biases, W_O none)
    qkv_clip: float | None = None  # OLMo: q, k, v clamped to [-clip, clip]
    qk_norm: QKNorm = "none"  # head: each head's q, k over d_head (Qwen3, Gemma 3); per_head: a weight per head
    #                           (StableLM); full: all heads' q (k) as one vector (OLMo 2)
    attn_scale: float | None = None  # scores = q.k * attn_scale; None = 1/sqrt(d_head)
    attn_softcap: float | None = None  # Gemma 2: scores -> cap * tanh(scores / cap) before the mask
    sliding_window: int | None = None  # a sliding layer's query sees only the last W keys (itself included)
    sliding_layers: tuple[int, ...] = ()  # which layers slide (Gemma 2: every other one)
    attention_chunk: int | None = None  # Llama 4: a chunked layer's query sees the keys of its own block of C
    chunked_layers: tuple[int, ...] = ()  # which layers attend within chunks
    qk_norm_layers: tuple[int, ...] | None = None  # the layers with the q/k norm (None: every layer; Llama 4: rotary ones)
    attn_temperature: float | None = None  # Llama 4's NoPE layers: q x (1 + t * log1p(floor((pos + 1) / floor)))
    attn_temperature_floor: float = 8192.0
    attn_sinks: bool = False  # gpt-oss: a learned logit per head joins every softmax row (the "sink"), then is dropped
    d_head_v: int | None = None  # each head's v (and z) width where it differs from d_head (MLA)
    kv_lora_rank: int | None = None  # multi-head latent attention (DeepSeek): K/V through a rank-r latent, rotary
    q_lora_rank: int | None = None  #   on a separate slice of rotary_dim dimensions (d_head = no-rope + rotary_dim)
    layer_mixers: tuple[str, ...] = ()  # one token mixer per layer (plan.Mixer); () = attention everywhere
    attn_output_gate: bool = False  # Qwen3.5/Next: each head's output times sigmoid of a second query projection
    global_d_head: int | None = None  # Gemma 4: the full (global) layers' head size and K/V heads where they differ
    global_kv_heads: int | None = None
    attn_k_eq_v: bool = False  # Gemma 4: on the full layers v is k's projection (before k's norm)
    v_norm: bool = False  # Gemma 4: each head's v RMS-normed (no weight)
    kv_shared_layers: int = 0  # Gemma 4: the last N layers reuse the K/V of the last earlier layer of their kind
    # hybrid token mixers (core/mixers/): a short causal convolution, then Gated DeltaNet or Mamba-2's scan
    conv_kernel: int = 4  # the convolution's width (DeltaNet's and Mamba-2's before the scan; LFM2's own)
    conv_bias: bool = False
    mixer_bias: bool = False  # Mamba-2, LFM2: their in and out projections have biases
    delta_k_heads: int = 0  # Gated DeltaNet: q/k heads of delta_d_k, v heads of delta_d_v (a multiple)
    delta_v_heads: int = 0
    delta_d_k: int = 0
    delta_d_v: int = 0
    ssm_heads: int = 0  # Mamba-2: heads of ssm_d_head channels; B, C of ssm_d_state per group of heads
    ssm_d_head: int = 0
    ssm_groups: int = 1
    ssm_d_state: int = 0
    ssm_chunk: int = 256  # the scan's chunk length (the reference's; the numbers do not depend on it)
    ssm_dt_min: float = 0.0  # the step size Δ clamped to [min, max] (max None: no upper limit)
    ssm_dt_max: float | None = None
    ssm_norm: str = "after_gate"  # RMSNorm(y * SiLU(z)) per group; "before_gate": RMSNorm(y) * SiLU(z); "none": y * SiLU(z)
    parallel_ssm: bool = False  # Falcon-H1: a Mamba-2 layer beside every attention layer, both outputs added
    # --- 4. norms and the residual stream: where each sublayer's norm sits and how its output is added
    norm: Norm = "layernorm"
    norm_placement: NormPlacement = "pre"
    norm_eps: float = 1e-5
    norm_offset: float = 0.0  # RMSNorm multiplies by (offset + w): Gemma stores w - 1 and uses offset 1
    norm_affine: bool = True  # False: norms without weight or bias (OLMo's LayerNorm)
    shared_norm: bool = False  # parallel block whose attention and FFN read one norm (Phi, GPT-J, Falcon)
    parallel_residual: bool = False  # attention and FFN both read the block's input
    residual_scale: float = 1.0  # Granite: each sublayer's output times this before it is added
    layer_scalars: bool = False  # Gemma 4: the stream leaving each block times a learned scalar (its layer_scalar)
    d_per_layer: int = 0  # Gemma 4's per-layer embeddings: width (0: none) and their vocabulary
    per_layer_vocab: int = 0
    final_norm: bool = True
    # --- 5. FFN
    attn_only: bool = False  # no FFN sublayer at all
    activation: Activation = "gelu_tanh"
    gated_ffn: bool = False
    mlp_bias: bool = True
    # mixtures of experts (core/moe.py): the blocks in moe_layers route each token to experts_per_token of
    # n_experts gated FFNs of width d_expert (plus a shared expert of width d_shared where the family has one)
    moe_layers: tuple[int, ...] = ()
    n_experts: int = 0
    experts_per_token: int = 0
    d_expert: int = 0
    moe_router: Router = "softmax_topk"
    moe_norm_topk: bool = False  # the chosen experts' weights renormalised to sum to 1
    moe_scale: float = 1.0  # the routed experts' weights times this (DeepSeek's routed_scaling_factor)
    moe_groups: int = 1  # group-limited routing: experts in groups, the token's experts drawn from its best groups
    moe_topk_groups: int = 1
    moe_router_bias: bool = False  # gpt-oss: the router adds a bias per expert
    moe_choice_bias: bool = False  # DeepSeek-V3: a bias per expert added for choosing only (not to the weights)
    moe_jitter: float = 0.0  # PhiMoE's sparsemixer: experts within 2 x this (relative) of the chosen one share the softmax
    d_shared: int = 0  # the shared expert's width (0: none)
    moe_shared_gate: bool = False  # Qwen2-MoE: the shared expert's output times sigmoid(x . w_gate)
    moe_expert_bias: bool = False  # gpt-oss: the experts' projections have biases
    moe_input_weight: bool = False  # Llama 4: the routing weight multiplies the expert's input, not its output
    moe_glu_limit: float | None = None  # gpt-oss: the clamped GLU (up + 1) * g * sigmoid(alpha * g), g and up clamped
    moe_glu_alpha: float = 1.702
    ffn_free_layers: tuple[int, ...] = ()  # blocks without an FFN (Nemotron-H's mixer blocks)
    wide_shared_ffn: bool = False  # Gemma 4: the KV-sharing layers' FFN twice d_ff wide
    # --- 6. output: the masked-LM head (encoders), the un-embedding, the logits' scale and cap
    mlm_head: bool = False  # masked-LM head before the un-embedding: dense, activation, norm; a bias after it
    tie_embeddings: bool = True
    unembed_bias: bool = False  # Phi, GPT-J: the un-embedding adds a bias per vocabulary entry
    logit_scale: float = 1.0  # Granite: logits times this (1 / logits_scaling)
    final_softcap: float | None = None  # Gemma 2: logits -> cap * tanh(logits / cap)

    def __post_init__(self) -> None:
        problems = _type_problems(self) or _range_problems(self)
        if not problems:
            # JSON gives lists: keep the frozen config hashable and comparable
            for name in _LAYER_LISTS:  # JSON gives lists: keep the frozen config hashable and comparable
                if getattr(self, name) is not None:
                    object.__setattr__(self, name, tuple(int(i) for i in getattr(self, name)))
            object.__setattr__(self, "layer_mixers", tuple(self.layer_mixers))
            scaling = self.rope_scaling.items() if isinstance(self.rope_scaling, dict) else self.rope_scaling
            object.__setattr__(self, "rope_scaling", tuple(sorted(  # LongRoPE's per-frequency factors: tuples
                (str(k), tuple(v) if isinstance(v, list) else v) for k, v in scaling)))
            problems = self._attention_problems() + self._layout_problems() + plan_problems(self)
        if problems:
            raise CheckpointError("invalid model configuration: " + "; ".join(problems))

    def _attention_problems(self) -> list[str]:
        """q/k norms, sliding windows, caps and clips, RoPE scaling."""
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
        elif self.rope:
            problems += _rope_problems(self)
        return problems

    def _layout_problems(self) -> list[str]:
        """ALiBi, the interleaved rotary, a shared norm, narrower embeddings."""
        problems = [f"{name} must be true or false (got {getattr(self, name)!r:.60})" for name in
                    ("alibi", "alibi_before_scale", "rotary_interleaved", "shared_norm", "unembed_bias")
                    if not isinstance(getattr(self, name), bool)]
        if self.shared_norm is True and not self.parallel_residual:
            problems.append("shared_norm needs parallel_residual (one norm feeds attention and FFN side by side)")
        d_embed = self.d_embed
        if d_embed is not None and (isinstance(d_embed, bool) or not isinstance(d_embed, int)
                                    or not 1 <= d_embed <= INT_BOUNDS["d_model"][1]):
            problems.append(f"d_embed must be a positive integer up to {INT_BOUNDS['d_model'][1]} (got {d_embed!r:.60})")
        return problems

    @property
    def rope(self) -> dict[str, Any]:
        """The RoPE scaling parameters as a mapping (empty: plain rotary positions)."""
        return dict(self.rope_scaling)

    @functools.cached_property
    def plan(self) -> tuple[LayerPlan, ...]:
        """One ``LayerPlan`` per block: its mixer, attention reach, rotary, head shapes, FFN (core/plan.py)."""
        return layer_plans(self)

    def layer(self, layer: int) -> LayerPlan:
        """Block ``layer``'s plan (``cfg.plan[layer]``)."""
        return self.plan[layer]

    @property
    def is_moe(self) -> bool:
        """Whether any block is a mixture of experts."""
        return bool(self.moe_layers)

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
        if not isinstance(data, dict):
            raise CheckpointError(f"a model configuration is a dict of its fields, not a {type(data).__name__}")
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
                + self._describe_extras())

    def _describe_extras(self) -> str:
        """Sliding windows, soft caps, q/k norms and RoPE scaling, where the model has them."""
        extras = []
        if self.sliding_layers and self.sliding_window:
            extras.append(f"sliding window {self.sliding_window} on {len(self.sliding_layers)} layers")
        if self.attn_softcap or self.final_softcap:
            extras.append("soft-capped " + " and ".join(
                name for name, cap in (("scores", self.attn_softcap), ("logits", self.final_softcap)) if cap))
        if self.chunked_layers:
            extras.append(f"chunked attention ({self.attention_chunk}) on {len(self.chunked_layers)} layers")
        if self.nope_layers:
            extras.append(f"no rotary on {len(self.nope_layers)} layers")
        if self.attn_sinks:
            extras.append("attention sinks")
        if self.kv_lora_rank is not None:
            extras.append(f"latent attention (rank {self.kv_lora_rank})")
        if self.moe_layers:
            shared = " + a shared expert" if self.d_shared else ""
            extras.append(f"{self.n_experts} experts (top {self.experts_per_token}){shared} on "
                          f"{len(self.moe_layers)} of {self.n_layers} layers")
        for mixer in sorted({m for m in self.layer_mixers if m != "attention"}):
            from explorer.core.plan import MIXER_NAMES

            extras.append(f"{MIXER_NAMES[mixer]} on {self.layer_mixers.count(mixer)} of {self.n_layers} layers")
        if self.kv_shared_layers or self.d_per_layer or self.layer_scalars:
            extras.append("Gemma 4's KV sharing, per-layer embeddings and layer scalars")
        if self.qk_norm != "none":
            extras.append("q/k norms")
        if self.rope:
            extras.append(f"RoPE scaling {self.rope.get('rope_type')}")
        return "".join(f", {e}" for e in extras)


def _rope_problems(cfg: ModelConfig) -> list[str]:
    """The RoPE scaling's optional fields (explorer/core/rope_checks.py; issue 26)."""
    from explorer.core.rope_checks import scaling_problems

    rotary_dim = cfg.rotary_dim or cfg.d_head
    return scaling_problems(cfg.rope, rotary_dim) if isinstance(rotary_dim, int) else []
