"""The per-layer plan: what each block of a model is, read from the flat configuration.

``ModelConfig`` keeps flat keys (config.json and trace files store it so), and most of its switches are
the same for every block. Models of 2025-26 differ from block to block: some blocks are mixtures of
experts and others dense FFNs (DeepSeek's first dense layers, Llama 4's interleaving), some attend
within a sliding window or a chunk and others to every earlier token, some have no rotary positions
(Llama 4's and SmolLM3's NoPE layers), and a hybrid mixes attention with recurrent mixers. The flat
keys that say so (``sliding_layers``, ``chunked_layers``, ``nope_layers``, ``moe_layers``,
``layer_mixers``, ...) are read here, once, into one ``LayerPlan`` per block: ``cfg.plan[l]`` (or
``cfg.layer(l)``). Everything that builds or runs a block, and everything that derives a value of it,
asks the plan, never the flat keys:

* ``model.Block`` builds the block's modules from its plan (head counts and sizes, FFN kind and width);
* the forward pass makes one mask per (attention kind, window) and one set of rotary angles per
  (rotary, local base) that the plan names (``attention.layer_mask``, ``Transformer.rotary_for``);
* the Trace derives a layer's scores with the same mask and lists the keys that layer has.

A new per-layer fact is one field here (with its default: the plain block) and one line in
``layer_plans`` reading the flat key that carries it; nothing else changes shape. This module does
not import torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, get_args

if TYPE_CHECKING:
    from explorer.core.config import ModelConfig

Mixer = Literal["attention", "deltanet", "mamba2", "short_conv", "none"]  # none: an FFN-only block (Nemotron-H)
AttentionKind = Literal["full", "sliding", "chunked"]
FFNKind = Literal["dense", "moe", "none"]
MIXERS, ATTENTION_KINDS, FFN_KINDS = get_args(Mixer), get_args(AttentionKind), get_args(FFNKind)
IMPLEMENTED_MIXERS = MIXERS  # the mixers model.py runs (core/mixers/: Gated DeltaNet, Mamba-2, LFM2's convolution)
RECURRENT_MIXERS = ("deltanet", "mamba2", "short_conv")  # keep a state instead of keys and values


@dataclass(frozen=True)
class LayerPlan:
    """One block, as the forward pass meets it: its token mixer, its attention's reach and positions, its FFN.

    Shapes are per layer (a model whose layers differ in head sizes or K/V heads gives each its own); for
    today's families they are the config's.
    """

    layer: int
    # --- the token mixer
    mixer: Mixer = "attention"
    attention: AttentionKind = "full"   # full: every earlier key; sliding: the last ``window``; chunked: the
    window: int | None = None           #   keys in the query's own block of ``window`` positions (Llama 4)
    rotary: bool = False                # rotary positions turn q and k on this layer (False: NoPE or none)
    local_rope: bool = False            # turns with the local rotary base (Gemma 3's sliding layers)
    n_heads: int = 1
    n_kv_heads: int = 1
    d_head: int = 1                     # width of each head's q and k
    d_head_v: int = 1                   # width of each head's v and z (MLA: differs from d_head)
    qk_norm: str = "none"               # the layer's q/k norm (config.QKNorm); "none" where the layer has none
    temperature: bool = False           # Llama 4's NoPE layers: q scaled by a factor that grows with position
    rotary_dim: int = 0                 # how many of each head's dimensions rotate (its own d_head where it differs)
    kv_from: int | None = None          # Gemma 4: reuses the keys and values of this earlier layer (computes none)
    k_eq_v: bool = False                # Gemma 4's global layers: v is k's projection (before k's norm)
    parallel_ssm: bool = False          # Falcon-H1: a Mamba-2 scan beside the attention, both outputs added
    # --- the FFN
    ffn: FFNKind = "dense"              # dense FFN, mixture of experts (core/moe.py), or none
    d_ff: int = 0                       # the dense FFN's width (0 for "moe" and "none")

    @property
    def is_moe(self) -> bool:
        return self.ffn == "moe"

    @property
    def has_ffn(self) -> bool:
        return self.ffn != "none"

    @property
    def is_attention(self) -> bool:
        return self.mixer == "attention"

    @property
    def is_recurrent(self) -> bool:
        """A mixer that carries a state from token to token (DeltaNet, Mamba-2, a short convolution)."""
        return self.mixer in RECURRENT_MIXERS

    def describe(self) -> str:
        """One line: 'layer 3: sliding attention (window 4096), no rotary, mixture of experts'."""
        what = MIXER_NAMES[self.mixer] if self.mixer != "attention" else f"{self.attention} attention"
        if self.window is not None and self.is_attention:
            what += f" ({'chunk' if self.attention == 'chunked' else 'window'} {self.window})"
        if self.mixer == "attention" and not self.rotary:
            what += ", no rotary"
        if self.parallel_ssm:
            what += ", a Mamba-2 scan beside it"
        if self.kv_from is not None:
            what += f", keys and values of layer {self.kv_from}"
        ffn = {"dense": f"FFN d_ff={self.d_ff}", "moe": "mixture of experts", "none": "no FFN"}[self.ffn]
        return f"layer {self.layer}: {what}, {ffn}"


MIXER_NAMES = {"attention": "attention", "deltanet": "Gated DeltaNet", "mamba2": "Mamba-2",
               "short_conv": "short convolution", "none": "no token mixer"}


def layer_plans(cfg: ModelConfig) -> tuple[LayerPlan, ...]:
    """Every block's plan, from the flat keys (``ModelConfig.plan`` keeps them)."""
    sliding, chunked = set(cfg.sliding_layers), set(cfg.chunked_layers)
    nope, moe = set(cfg.nope_layers), set(cfg.moe_layers)
    normed = None if cfg.qk_norm_layers is None else set(cfg.qk_norm_layers)
    rotary = cfg.positions == "rotary"
    mixers = cfg.layer_mixers or ("attention",) * cfg.n_layers
    sharing = kv_sources(cfg, sliding)
    plans = []
    for layer in range(cfg.n_layers):
        kind, window = "full", None
        if layer in chunked and cfg.attention_chunk is not None:
            kind, window = "chunked", cfg.attention_chunk
        elif layer in sliding and cfg.sliding_window is not None:
            kind, window = "sliding", cfg.sliding_window
        mixer = mixers[layer]
        turns = rotary and layer not in nope and mixer == "attention"
        wide = 2 if cfg.wide_shared_ffn and layer in sharing else 1  # Gemma 4: the sharing layers' FFN is wider
        if layer in moe:
            ffn, d_ff = "moe", 0
        elif layer in cfg.ffn_free_layers:
            ffn, d_ff = "none", 0
        else:
            ffn, d_ff = ("dense", cfg.d_ff * wide) if cfg.has_ffn else ("none", 0)
        glob = kind == "full" and cfg.global_d_head is not None  # Gemma 4's global layers: wider heads
        d_head = cfg.global_d_head if glob else cfg.d_head
        plans.append(LayerPlan(
            layer=layer, mixer=mixer, attention=kind, window=window, rotary=turns,
            local_rope=turns and kind == "sliding" and cfg.rotary_base_local is not None,
            n_heads=cfg.n_heads, n_kv_heads=(cfg.global_kv_heads or cfg.kv_heads) if glob else cfg.kv_heads,
            d_head=d_head, d_head_v=d_head if glob else cfg.d_head_v or cfg.d_head,
            qk_norm=cfg.qk_norm if normed is None or layer in normed else "none",
            temperature=cfg.attn_temperature is not None and rotary and not turns and mixer == "attention",
            rotary_dim=(cfg.rotary_dim if cfg.rotary_dim and not glob else d_head) if turns else 0,
            kv_from=sharing.get(layer), k_eq_v=cfg.attn_k_eq_v and kind == "full",
            parallel_ssm=cfg.parallel_ssm and mixer == "attention",
            ffn=ffn, d_ff=d_ff))
    return tuple(plans)


def kv_sources(cfg: ModelConfig, sliding: set[int]) -> dict[int, int]:
    """Gemma 4's KV sharing: each of the last ``kv_shared_layers`` layers -> the last earlier (unshared) layer of
    its kind (sliding or full), whose keys and values it reads instead of computing its own."""
    first = cfg.n_layers - cfg.kv_shared_layers
    if not cfg.kv_shared_layers or first <= 0:
        return {}
    last = {}
    for layer in range(first):
        last[layer in sliding] = layer
    return {layer: last[layer in sliding] for layer in range(first, cfg.n_layers) if (layer in sliding) in last}


def plan_problems(cfg: ModelConfig) -> list[str]:
    """What is wrong with the flat keys the plan reads (called by ``ModelConfig``'s validation)."""
    problems = []
    n = cfg.n_layers
    for name in ("chunked_layers", "nope_layers", "moe_layers", "qk_norm_layers"):
        layers = getattr(cfg, name)
        if layers is None and name == "qk_norm_layers":
            continue
        if any(not 0 <= i < n for i in layers):
            problems.append(f"{name} must name layers 0..{n - 1} (got {tuple(layers)!r:.80})")
    if cfg.chunked_layers and cfg.attention_chunk is None:
        problems.append("chunked_layers need attention_chunk (the chunk length)")
    if set(cfg.chunked_layers) & set(cfg.sliding_layers):
        problems.append("a layer cannot be both sliding and chunked")
    if cfg.layer_mixers:
        if len(cfg.layer_mixers) != n:
            problems.append(f"layer_mixers must name one mixer per layer ({n}; got {len(cfg.layer_mixers)})")
        elif bad := sorted({m for m in cfg.layer_mixers if m not in MIXERS}, key=str):
            problems.append(f"layer_mixers must be among {MIXERS} (got {bad!r:.80})")
    return problems + _moe_problems(cfg) + _hybrid_problems(cfg)


def _moe_problems(cfg: ModelConfig) -> list[str]:
    if not cfg.moe_layers:
        return []
    problems = []
    E, k = cfg.n_experts, cfg.experts_per_token
    if E < 1 or not 1 <= k <= E:
        problems.append(f"a mixture of experts needs 1 <= experts_per_token ({k}) <= n_experts ({E})")
    if cfg.d_expert < 1:
        problems.append(f"a mixture of experts needs d_expert >= 1 (got {cfg.d_expert})")
    if E % cfg.moe_groups or cfg.moe_topk_groups > cfg.moe_groups:
        problems.append(f"n_experts ({E}) must split into moe_groups ({cfg.moe_groups}), of which moe_topk_groups "
                        f"({cfg.moe_topk_groups}) at most are chosen")
    elif cfg.moe_groups > 1 and cfg.moe_topk_groups * (E // cfg.moe_groups) < k:
        problems.append(f"the chosen groups hold {cfg.moe_topk_groups * (E // cfg.moe_groups)} experts, fewer than "
                        f"experts_per_token ({k})")
    if cfg.moe_router == "sparsemixer" and k != 2:
        problems.append(f"the sparsemixer router chooses 2 experts per token (got experts_per_token {k})")
    if cfg.moe_shared_gate and not cfg.d_shared:
        problems.append("moe_shared_gate needs a shared expert (d_shared)")
    if cfg.moe_glu_limit is not None and cfg.moe_glu_limit <= 0:
        problems.append(f"moe_glu_limit must be positive (got {cfg.moe_glu_limit})")
    return problems


# the flat keys of the hybrid layers (core/mixers/, Gemma 4) and what they must be
_POSITIVE = ("conv_kernel", "ssm_groups", "ssm_chunk")
_COUNTS = ("delta_k_heads", "delta_v_heads", "delta_d_k", "delta_d_v", "ssm_heads", "ssm_d_head", "ssm_d_state",
           "kv_shared_layers", "d_per_layer", "per_layer_vocab")
SSM_NORMS = ("after_gate", "before_gate", "none")  # where Mamba-2's gated RMSNorm sits (or none)
_NEEDS = {"deltanet": ("delta_k_heads", "delta_v_heads", "delta_d_k", "delta_d_v"),
          "mamba2": ("ssm_heads", "ssm_d_head", "ssm_d_state")}


def _hybrid_problems(cfg: ModelConfig) -> list[str]:
    problems = []
    for name in _POSITIVE + _COUNTS:
        value = getattr(cfg, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < (name in _POSITIVE) or value > 1 << 20:
            problems.append(f"{name} must be a whole number in [{int(name in _POSITIVE)}, {1 << 20}] (got {value!r:.40})")
    for name in ("global_d_head", "global_kv_heads"):
        value = getattr(cfg, name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1 << 14):
            problems.append(f"{name} must be a whole number in [1, {1 << 14}] or null (got {value!r:.40})")
    if not isinstance(cfg.ffn_free_layers, (list, tuple)) or not all(
            isinstance(i, int) and not isinstance(i, bool) and 0 <= i < cfg.n_layers for i in cfg.ffn_free_layers):
        problems.append(f"ffn_free_layers must name layers 0..{cfg.n_layers - 1} (got {cfg.ffn_free_layers!r:.60})")
    if problems:
        return problems
    used = set(cfg.layer_mixers) | ({"mamba2"} if cfg.parallel_ssm else set())
    if cfg.ssm_norm not in SSM_NORMS:
        problems.append(f"ssm_norm must be one of {SSM_NORMS} (got {cfg.ssm_norm!r:.40})")
    for mixer, keys in _NEEDS.items():
        if mixer in used and (missing := [k for k in keys if getattr(cfg, k) < 1]):
            problems.append(f"{mixer} layers need {', '.join(missing)}")
    if "deltanet" in used and cfg.delta_k_heads and cfg.delta_v_heads % cfg.delta_k_heads:
        problems.append(f"delta_v_heads ({cfg.delta_v_heads}) must be a multiple of delta_k_heads ({cfg.delta_k_heads})")
    if "mamba2" in used and cfg.ssm_heads and cfg.ssm_heads % cfg.ssm_groups:
        problems.append(f"ssm_heads ({cfg.ssm_heads}) must be a multiple of ssm_groups ({cfg.ssm_groups})")
    if cfg.global_kv_heads is not None and cfg.n_heads % cfg.global_kv_heads:
        problems.append(f"n_heads ({cfg.n_heads}) must be a multiple of global_kv_heads ({cfg.global_kv_heads})")
    if cfg.kv_shared_layers >= cfg.n_layers:
        problems.append(f"kv_shared_layers ({cfg.kv_shared_layers}) must leave layers that compute keys and values")
    if cfg.d_per_layer and cfg.per_layer_vocab < 1:
        problems.append("per-layer embeddings (d_per_layer) need per_layer_vocab")
    return problems


def largest_hybrid_tensor(cfg: ModelConfig) -> int:
    """The most numbers one tensor of the hybrid pieces holds (the weights files' header check): a DeltaNet's or a
    Mamba-2's fused in-projection, Gemma 4's wider global heads and FFNs, its per-layer embedding table."""
    d = cfg.d_model
    delta = d * (2 * cfg.delta_k_heads * cfg.delta_d_k + 2 * cfg.delta_v_heads * cfg.delta_d_v)
    inner = cfg.ssm_heads * cfg.ssm_d_head
    mamba = d * (2 * inner + 2 * cfg.ssm_groups * cfg.ssm_d_state + cfg.ssm_heads)
    heads = cfg.n_heads * (cfg.global_d_head or cfg.d_head) * d * (2 if cfg.attn_output_gate else 1)
    return max(delta, mamba, heads, 2 * d * cfg.d_ff * (2 if cfg.wide_shared_ffn else 1),
               cfg.per_layer_vocab * cfg.n_layers * cfg.d_per_layer)
