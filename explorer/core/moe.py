"""Mixtures of experts: a router picks each token's experts, and each expert runs only on its tokens.

A block whose plan says ``ffn == "moe"`` (core/plan.py) replaces the dense FFN with a ``MoE``: a router
(one logit per expert for each token), a bank of ``n_experts`` gated FFNs of width ``d_expert``
(``Experts``), and, in some families, a shared expert every token goes through. ``moe_forward`` is the
one readable forward pass of it, the way the families' own code runs it:

1. ``router_logits`` = x . W_router (+ bias);
2. ``router_scores``: the family's scores over every expert (``probs``: softmax, or sigmoid) and the
   scores the top-k is taken over (``choice``: the probabilities, the logits, or sigmoid + a bias; in
   group-limited routing only the experts of the token's best groups);
3. the top ``experts_per_token`` of ``choice`` are the token's experts (best first);
4. ``expert_weights``: what each chosen expert's output is multiplied by (renormalised, scaled, as the
   family does; PhiMoE's sparsemixer has its own rule);
5. each expert runs on the tokens routed to it and its weighted output is added at their rows;
6. the shared expert (times its sigmoid gate, Qwen2-MoE) is added.

Capture and interventions go through ``rec`` like every site of the forward pass: ``moe.router_logits``
and ``moe.choice`` are what an expert intervention changes (switched off: -inf in both, so the token's
experts come from the rest and the weights renormalise as the family's do; forced: +inf in ``choice``;
scaled: the logit times a factor); ``moe.expert_out`` (each chosen expert's weighted output, [n, k, d])
is computed only when a recorder asks for it (the Trace derives it by re-running the block).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from explorer.core.attention import Rec, _no_capture
from explorer.core.modules import FFN, activation

if TYPE_CHECKING:
    from explorer.core.config import ModelConfig


class Router(nn.Module):
    """One logit per expert for each token: x . W [E, d] (+ gpt-oss's bias). DeepSeek-V3's choice bias is
    added to the scores only to choose (``choice_bias``, a buffer the checkpoint holds)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(cfg.n_experts, cfg.d_model))
        self.bias = nn.Parameter(torch.zeros(cfg.n_experts)) if cfg.moe_router_bias else None
        if cfg.moe_choice_bias:
            self.register_buffer("choice_bias", torch.zeros(cfg.n_experts))
        else:
            self.choice_bias = None

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.weight, self.bias)


class Experts(nn.Module):
    """The expert bank: ``n_experts`` gated FFNs as three stacked weights (nn.Linear's [out, in] per expert):
    W_gate, W_in [E, f, d], W_out [E, d, f] (and gpt-oss's biases).

    A bank kept as a GGUF file stores it (core/quant/packed.py) is a ``Packed`` module in place of the
    parameter: ``matrix(name, e)`` then expands expert ``e``'s matrix alone, never the whole bank."""

    BANKS = ("W_gate", "W_in", "W_out")  # the weights a load may hold packed (core/quant/packed.packable)

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        E, f, d = cfg.n_experts, cfg.d_expert, cfg.d_model
        self.cfg = cfg
        self.W_gate = nn.Parameter(torch.zeros(E, f, d))
        self.W_in = nn.Parameter(torch.zeros(E, f, d))
        self.W_out = nn.Parameter(torch.zeros(E, d, f))
        bias = cfg.moe_expert_bias
        self.b_gate = nn.Parameter(torch.zeros(E, f)) if bias else None
        self.b_in = nn.Parameter(torch.zeros(E, f)) if bias else None
        self.b_out = nn.Parameter(torch.zeros(E, d)) if bias else None

    def matrix(self, name: str, e: int, dtype: torch.dtype) -> Tensor:
        """Expert ``e``'s matrix of bank ``name`` (a packed bank expands that expert only, in ``dtype``)."""
        bank = getattr(self, name)
        return bank.expert(e, dtype) if isinstance(bank, nn.Module) else bank[e]  # a Packed bank is a module

    def forward(self, x: Tensor, e: int) -> Tensor:
        """Expert ``e`` on its tokens' vectors x [t, d] -> [t, d]."""
        W_gate, W_in, W_out = (self.matrix(name, e, x.dtype) for name in self.BANKS)
        gate = F.linear(x, W_gate, None if self.b_gate is None else self.b_gate[e])   # [t, f]
        up = F.linear(x, W_in, None if self.b_in is None else self.b_in[e])           # [t, f]
        return F.linear(glu(self.cfg, gate, up), W_out, None if self.b_out is None else self.b_out[e])


def glu(cfg: ModelConfig, gate: Tensor, up: Tensor) -> Tensor:
    """An expert's neurons: act(gate) * up; gpt-oss clamps both and computes (up + 1) * g * sigmoid(alpha g)."""
    if cfg.moe_glu_limit is None:
        return activation(cfg.activation)(gate) * up
    limit = cfg.moe_glu_limit
    gate, up = gate.clamp(max=limit), up.clamp(-limit, limit)
    return (up + 1) * (gate * torch.sigmoid(gate * cfg.moe_glu_alpha))


class MoE(nn.Module):
    """A block's mixture of experts: router, expert bank, and the shared expert (with its gate) where there is one."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.router = Router(cfg)
        self.experts = Experts(cfg)
        self.shared = FFN(cfg, cfg.d_shared, bias=False, gated=True) if cfg.d_shared else None
        self.shared_gate = nn.Linear(cfg.d_model, 1, bias=False) if cfg.moe_shared_gate else None


# --- routing: the one rule per family kind, used by the forward pass and by the analysis ---------------

def router_scores(cfg: ModelConfig, logits: Tensor, choice_bias: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """(probs, choice) [..., E] in float32 from the router's logits: ``probs`` the family's score of every
    expert (softmax; sigmoid for sigmoid routers), ``choice`` what the top-k is taken over (the probabilities,
    the logits, or sigmoid + the choice bias), -inf outside the token's best groups in group-limited routing."""
    logits = logits.float()
    if cfg.moe_router == "sigmoid_topk":
        probs = logits.sigmoid()
        choice = probs if choice_bias is None else probs + choice_bias.float()
    else:
        probs = torch.softmax(logits, dim=-1)
        choice = probs if cfg.moe_router == "softmax_topk" else logits
    if cfg.moe_groups > 1:
        choice = group_limited(cfg, choice)
    return probs, choice


def group_limited(cfg: ModelConfig, choice: Tensor) -> Tensor:
    """Only the experts of each token's ``moe_topk_groups`` best groups stay choosable (the rest -inf); a
    group's score is its best expert's (DeepSeek-V2) or its best two's sum (sigmoid routers: DeepSeek-V3)."""
    groups = cfg.moe_groups
    per = choice.shape[-1] // groups
    grouped = choice.unflatten(-1, (groups, per))                              # [..., G, E/G]
    if cfg.moe_router == "sigmoid_topk":
        score = grouped.topk(min(2, per), dim=-1).values.sum(-1)
    else:
        score = grouped.max(dim=-1).values                                      # [..., G]
    best = score.topk(cfg.moe_topk_groups, dim=-1).indices
    keep = torch.zeros_like(score, dtype=torch.bool).scatter(-1, best, True)   # [..., G]
    return choice.masked_fill(~keep.repeat_interleave(per, dim=-1), float("-inf"))


def choose(cfg: ModelConfig, choice: Tensor) -> Tensor:
    """Each token's experts: the top ``experts_per_token`` of its choice scores, best first.  [..., k]"""
    return choice.topk(cfg.experts_per_token, dim=-1).indices


def expert_weights(cfg: ModelConfig, logits: Tensor, probs: Tensor, experts: Tensor) -> Tensor:
    """What each chosen expert's output is multiplied by (Llama 4: its input), float32.  [..., k]"""
    router = cfg.moe_router
    if router == "sparsemixer":
        weights = sparsemixer_weights(logits.float(), experts, cfg.moe_jitter)
    elif router == "topk_softmax":                                              # gpt-oss, GraniteMoE
        weights = torch.softmax(logits.float().gather(-1, experts), dim=-1)
    elif router == "topk_sigmoid":                                              # Llama 4
        weights = torch.sigmoid(logits.float().gather(-1, experts))
    else:
        weights = probs.gather(-1, experts)
        if cfg.moe_norm_topk:                                                   # renormalised over the chosen
            weights = weights / (weights.sum(-1, keepdim=True) + (1e-20 if router == "sigmoid_topk" else 0.0))
    return weights * cfg.moe_scale if cfg.moe_scale != 1.0 else weights


def sparsemixer_weights(scores: Tensor, experts: Tensor, eps: float) -> Tensor:
    """PhiMoE's sparsemixer at inference: each of the two chosen experts gets its probability in a softmax
    over the experts within 2 x ``eps`` (relative) of it; the second's softmax leaves the first out.  [..., 2]"""
    def share(masked: Tensor, pick: Tensor) -> Tensor:
        ref = scores.gather(-1, pick)
        far = (ref - scores) / scores.abs().clamp(min=ref) > 2 * eps
        return torch.softmax(masked.masked_fill(far, float("-inf")), dim=-1).gather(-1, pick)

    first, second = experts[..., :1], experts[..., 1:2]
    return torch.cat([share(scores, first), share(scores.scatter(-1, first, float("-inf")), second)], dim=-1)


def records(rec: Rec, site: str, layer: int) -> bool:
    """Whether ``rec`` asks for ``site`` (something only computed on request: each expert's own output)."""
    asks = getattr(rec, "records", None)
    return rec is not _no_capture and asks is not None and bool(asks(site, layer))


# --- the forward pass -----------------------------------------------------------------------------------

def moe_forward(cfg: ModelConfig, moe: MoE, x: Tensor, rec: Rec = _no_capture, layer: int = 0) -> Tensor:
    """The mixture of experts on its normed input x [B, n, d] -> what it adds to the stream [B, n, d]."""
    B, n, d = x.shape
    k = cfg.experts_per_token
    logits = rec("moe.router_logits", layer, moe.router(x))                    # [B, n, E]
    probs, choice = router_scores(cfg, logits, moe.router.choice_bias)         # [B, n, E] float32
    choice = rec("moe.choice", layer, choice)                                  # what the top-k is taken over
    rec("moe.probs", layer, probs)
    experts = choose(cfg, choice)                                              # [B, n, k], best first
    weights = expert_weights(cfg, logits, probs, experts)                      # [B, n, k]
    rec("moe.experts", layer, experts)
    rec("moe.weights", layer, weights)

    flat, chosen, w = x.reshape(B * n, d), experts.reshape(B * n, k), weights.reshape(B * n, k).to(x.dtype)
    routed = torch.zeros_like(flat)
    kept = flat.new_zeros(B * n, k, d) if records(rec, "moe.expert_out", layer) else None
    for e in chosen.unique().tolist():                                         # only the experts some token chose
        token, slot = (chosen == e).nonzero(as_tuple=True)                     # the rows routed to expert e
        if cfg.moe_input_weight:                                               # Llama 4: the weight scales the input
            y = moe.experts(flat[token] * w[token, slot, None], e)
        else:
            y = moe.experts(flat[token], e) * w[token, slot, None]             # [t, d]
        routed.index_add_(0, token, y)
        if kept is not None:
            kept[token, slot] = y
    if kept is not None:
        rec("moe.expert_out", layer, kept.view(B, n, k, d))                    # each chosen expert's weighted output
    out = routed.view(B, n, d)

    if moe.shared is not None:                                                 # every token's shared expert
        shared = moe.shared
        h = activation(cfg.activation)(shared.W_gate(x)) * shared.W_in(x)
        shared_out = shared.W_out(h)
        if moe.shared_gate is not None:                                        # Qwen2-MoE: a sigmoid gate on it
            shared_out = torch.sigmoid(moe.shared_gate(x)) * shared_out
        out = out + rec("moe.shared_out", layer, shared_out)
    return out
