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

Mixer = Literal["attention", "deltanet", "mamba2", "short_conv"]
AttentionKind = Literal["full", "sliding", "chunked"]
FFNKind = Literal["dense", "moe", "none"]
MIXERS, ATTENTION_KINDS, FFN_KINDS = get_args(Mixer), get_args(AttentionKind), get_args(FFNKind)
IMPLEMENTED_MIXERS = ("attention",)  # the mixers model.py runs today (the others: issue 36)


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

    def describe(self) -> str:
        """One line: 'layer 3: sliding attention (window 4096), no rotary, mixture of experts'."""
        what = self.mixer if self.mixer != "attention" else f"{self.attention} attention"
        if self.window is not None:
            what += f" ({'chunk' if self.attention == 'chunked' else 'window'} {self.window})"
        if self.mixer == "attention" and not self.rotary:
            what += ", no rotary"
        ffn = {"dense": f"FFN d_ff={self.d_ff}", "moe": "mixture of experts", "none": "no FFN"}[self.ffn]
        return f"layer {self.layer}: {what}, {ffn}"


def layer_plans(cfg: ModelConfig) -> tuple[LayerPlan, ...]:
    """Every block's plan, from the flat keys (``ModelConfig.plan`` keeps them)."""
    sliding, chunked = set(cfg.sliding_layers), set(cfg.chunked_layers)
    nope, moe = set(cfg.nope_layers), set(cfg.moe_layers)
    normed = None if cfg.qk_norm_layers is None else set(cfg.qk_norm_layers)
    rotary = cfg.positions == "rotary"
    plans = []
    for layer in range(cfg.n_layers):
        kind, window = "full", None
        if layer in chunked and cfg.attention_chunk is not None:
            kind, window = "chunked", cfg.attention_chunk
        elif layer in sliding and cfg.sliding_window is not None:
            kind, window = "sliding", cfg.sliding_window
        turns = rotary and layer not in nope
        if layer in moe:
            ffn, d_ff = "moe", 0
        else:
            ffn, d_ff = ("dense", cfg.d_ff) if cfg.has_ffn else ("none", 0)
        plans.append(LayerPlan(
            layer=layer, mixer=cfg.layer_mixers[layer] if cfg.layer_mixers else "attention",
            attention=kind, window=window, rotary=turns,
            local_rope=turns and kind == "sliding" and cfg.rotary_base_local is not None,
            n_heads=cfg.n_heads, n_kv_heads=cfg.kv_heads, d_head=cfg.d_head, d_head_v=cfg.d_head_v or cfg.d_head,
            qk_norm=cfg.qk_norm if normed is None or layer in normed else "none",
            temperature=cfg.attn_temperature is not None and rotary and not turns,
            ffn=ffn, d_ff=d_ff))
    return tuple(plans)


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
    return problems + _moe_problems(cfg)


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
