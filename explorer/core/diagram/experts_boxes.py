"""A mixture-of-experts layer as diagram boxes: the router, the chosen experts (and the shared expert beside
them), their weighted sum; ``moe_details``, the rule each box says. Used by ``boxes._ffn`` for a layer whose
plan's FFN is a mixture of experts."""

from __future__ import annotations

from typing import TYPE_CHECKING

from explorer.core.config import ModelConfig

if TYPE_CHECKING:
    from explorer.core.diagram.boxes import _Builder

EXPERTS, RESID = "experts", "residual"  # the panels the boxes open (ids of explorer/ui/panels/registry.py)
ROUTERS = {"softmax_topk": "softmax over every expert, then its top {k}",
           "topk_softmax": "its top {k} logits, then a softmax over those",
           "sigmoid_topk": "sigmoid of every logit; the top {k} (with a bias for choosing)",
           "sparsemixer": "sparsemixer: the best and the next best, each weighted within its band",
           "topk_sigmoid": "its top {k} logits; sigmoid of each scales the token into that expert"}


def moe_details(cfg: ModelConfig, activation: str) -> tuple[str, ...]:
    """What a mixture of experts does: its router's rule, its experts, the shared expert."""
    lines = [f"router: one logit per expert ({cfg.n_experts}); "
             + ROUTERS[cfg.moe_router].format(k=cfg.experts_per_token)]
    if cfg.moe_groups > 1:
        lines.append(f"only the experts of the token's best {cfg.moe_topk_groups} of {cfg.moe_groups} groups")
    if cfg.moe_norm_topk:
        lines.append("the chosen weights renormalised to sum to 1")
    if cfg.moe_scale != 1.0:
        lines.append(f"weights times {cfg.moe_scale:g}")
    act = "clamped SwiGLU with biases" if cfg.moe_glu_limit is not None else f"gated {activation}"
    lines.append(f"each expert: {act}, d_model → {cfg.d_expert} → d_model; it runs only on its tokens")
    return tuple(lines)


def experts_boxes(b: _Builder, layer: int, column: int, after: str | None, same_row: bool = False,
                  activation: str = "SiLU") -> str:
    """A mixture of experts: the router, the chosen experts (and the shared expert beside them), their sum."""
    cfg, n, p = b.cfg, b.n, f"blocks.{layer}.moe."
    E, k = cfg.n_experts, cfg.experts_per_token
    details = moe_details(cfg, activation)
    router = b.add(f"L{layer}.moe.router", "router", f"Router → top {k} of {E} experts", (n, E), "n × experts",
                   p + "probs", EXPERTS, layer, column, details=details[:-1], after=after, same_row=same_row)
    experts = b.add(f"L{layer}.moe.experts", "experts", f"{k} experts per token", (n, k, cfg.d_expert),
                    "n × k × d_expert", p + "weights", EXPERTS, layer, column, details=details[-1:], after=router)
    ends = [experts]
    if cfg.d_shared:
        gate = " × sigmoid gate" if cfg.moe_shared_gate else ""
        ends.append(b.add(f"L{layer}.moe.shared", "shared_expert", "Shared expert" + gate, (n, cfg.d_shared),
                          "n × d_shared", p + "shared_out", EXPERTS, layer, column + 1,
                          details=(f"every token: gated {activation}, d_model → {cfg.d_shared} → d_model",),
                          after=after, same_row=True))
    return b.add(f"L{layer}.ffn.out", "ffn_out", "Experts' weighted sum" + (" + shared" if cfg.d_shared else ""),
                 (n, cfg.d_model), "n × d_model", f"blocks.{layer}.mlp.out", RESID, layer, column, after=tuple(ends))

