"""Pure functions behind an Experts view: where each token was routed, how close the routing was, and what
each chosen expert wrote into the logit.

All read a ``Trace`` of a model with mixture-of-experts layers (its ``blocks.{l}.moe.*`` keys, core/moe.py):

* ``routing_map(trace, layer)``: tokens x experts, each chosen expert's weight (0 elsewhere), which were chosen,
  and every expert's score;
* ``lanes(trace, position)``: the selected token's experts and weights through every MoE layer;
* ``expert_load(trace, layer)``: how many tokens chose each expert, and the weight they gave it;
* ``topk_margin(trace, layer)`` and ``close_calls``: how far the k-th chosen expert's choice score is above the
  best one left out, per token: where a change as small as the model's rounding flips the routing
  (``flip_tolerance``: TransformerLens' notes measure Mixtral logit errors of ~2e-3 from such flips in half
  precision);
* ``expert_logit_effects(trace, target, position)``: each chosen expert's (and the shared expert's) direct effect
  on the target's logit, the DLA's FFN term split by expert (they add up to it).

Expert-level attribution patching is ``interventions/expert_attribution.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from explorer.core.analysis.dla import DLAError, _param, final_reader
from explorer.core.placement import weights_of

if TYPE_CHECKING:
    from explorer.core.config import ModelConfig
    from explorer.core.trace import Trace


def _reader(trace: Trace, model, target: int, p: int, distractor: int | None) -> np.ndarray:
    """r [d]: a write x into the final stream at ``p`` moves the target's logit (minus the distractor's) by
    x . r, the final norm's scale frozen at this position: the DLA's own reader (``dla.final_reader``)."""
    cfg = trace.config
    with weights_of(model.unembed) as unembed:
        W_U = unembed.weight
        u = cfg.logit_scale * (_param(W_U[target]) - (_param(W_U[distractor]) if distractor is not None else 0.0))
    return final_reader(trace, model, p, u)[0]


def moe_layers(config: ModelConfig) -> tuple[int, ...]:
    """The layers that are a mixture of experts, in order."""
    return tuple(config.moe_layers)


def _checked(trace: Trace, layer: int) -> str:
    if layer not in trace.config.moe_layers:
        raise ValueError(f"layer {layer} is not a mixture of experts (those are {list(trace.config.moe_layers)})")
    return f"blocks.{layer}.moe"


@dataclass(frozen=True)
class RoutingMap:
    weights: np.ndarray      # [n, E] each chosen expert's weight for the token, 0 where not chosen
    chosen: np.ndarray       # [n, E] bool: the token's experts
    probs: np.ndarray        # [n, E] every expert's score (softmax; sigmoid for sigmoid routers)


def routing_map(trace: Trace, layer: int) -> RoutingMap:
    """Tokens x experts of one MoE layer (what the routing map draws, the chosen ones marked)."""
    key = _checked(trace, layer)
    experts, weights = trace[f"{key}.experts"], trace[f"{key}.weights"]
    n, E = len(experts), trace.config.n_experts
    full = np.zeros((n, E), dtype=np.float32)
    np.put_along_axis(full, experts, weights.astype(np.float32), axis=1)
    chosen = np.zeros((n, E), dtype=bool)
    np.put_along_axis(chosen, experts, True, axis=1)
    return RoutingMap(full, chosen, np.asarray(trace[f"{key}.probs"]))


@dataclass(frozen=True)
class Lane:
    layer: int
    experts: tuple[int, ...]     # best first
    weights: tuple[float, ...]


def lanes(trace: Trace, position: int) -> list[Lane]:
    """The token at ``position``: its experts and their weights in every MoE layer, in order."""
    p = position % trace.n_tokens
    out = []
    for layer in trace.config.moe_layers:
        key = f"blocks.{layer}.moe"
        out.append(Lane(layer, tuple(int(e) for e in trace[f"{key}.experts"][p]),
                        tuple(float(w) for w in trace[f"{key}.weights"][p])))
    return out


@dataclass(frozen=True)
class Load:
    tokens: np.ndarray       # [E] how many of the prompt's tokens chose each expert
    weight: np.ndarray       # [E] the sum of the weights they gave it
    share: np.ndarray        # [E] tokens / (n x k): the expert's share of the layer's routed slots


def expert_load(trace: Trace, layer: int) -> Load:
    """Expert load over the prompt in one MoE layer."""
    routing = routing_map(trace, layer)
    tokens = routing.chosen.sum(0)
    slots = routing.chosen.shape[0] * trace.config.experts_per_token
    return Load(tokens.astype(np.int64), routing.weights.sum(0).astype(np.float64), tokens / max(slots, 1))


def load_by_layer(trace: Trace) -> np.ndarray:
    """[MoE layers, E] tokens per expert, every MoE layer (the load overview)."""
    return np.stack([expert_load(trace, layer).tokens for layer in trace.config.moe_layers])


@dataclass(frozen=True)
class Margin:
    margin: np.ndarray       # [n] k-th chosen choice score minus the best left out (>= 0; inf: nothing left out)
    kth: np.ndarray          # [n] the k-th chosen expert (the last one in)
    next: np.ndarray         # [n] the best expert left out (-1: none)
    scale: np.ndarray        # [n] the size of the scores compared (for a relative reading)


def topk_margin(trace: Trace, layer: int) -> Margin:
    """How close each token's routing was: the k-th expert in against the best one out, in the units of the
    scores the top-k is taken over (``moe.choice``: probabilities, logits or biased sigmoids by family)."""
    key = _checked(trace, layer)
    choice = np.asarray(trace[f"{key}.choice"], dtype=np.float64)
    experts = trace[f"{key}.experts"]
    n, k = experts.shape
    inside = np.take_along_axis(choice, experts, axis=1)
    kth_pos = np.argmin(inside, axis=1)                                   # the weakest of the chosen
    kth = experts[np.arange(n), kth_pos]
    rest = choice.copy()
    np.put_along_axis(rest, experts, -np.inf, axis=1)
    nxt = np.argmax(rest, axis=1)
    best_out = rest[np.arange(n), nxt]
    margin = inside[np.arange(n), kth_pos] - best_out
    none_out = ~np.isfinite(best_out)
    margin[none_out], nxt[none_out] = np.inf, -1
    scale = np.maximum(np.abs(inside[np.arange(n), kth_pos]), np.abs(np.where(none_out, 0.0, best_out)))
    return Margin(margin, kth.astype(np.int64), nxt.astype(np.int64), scale)


EPS = {"float32": float(np.finfo(np.float32).eps), "float16": 9.77e-4, "bfloat16": 7.81e-3,
       "float64": float(np.finfo(np.float64).eps)}


def flip_tolerance(dtype: str, scale: np.ndarray | float = 1.0) -> np.ndarray:
    """A margin below which the routing can flip from rounding alone: a few ulps of the model's precision at
    the scores' size (float32 ~1e-6 of them; bfloat16 ~3%)."""
    return 4.0 * EPS.get(dtype.replace("torch.", ""), EPS["float32"]) * np.maximum(np.asarray(scale, float), 1e-3)


def close_calls(trace: Trace, layer: int, tolerance: float | np.ndarray | None = None) -> np.ndarray:
    """Tokens whose routing a change of ``tolerance`` (default: the model's rounding, ``flip_tolerance``) could
    flip: the k-th expert in is at most that far above the best left out.  [n] bool"""
    m = topk_margin(trace, layer)
    tol = flip_tolerance(trace.meta.dtype, m.scale) if tolerance is None else tolerance
    return m.margin <= tol


@dataclass(frozen=True)
class ExpertEffects:
    layer: int
    experts: tuple[int, ...]     # the token's chosen experts, best first
    effects: np.ndarray          # [k] each one's direct effect on the logit (its weighted output, read out)
    shared: float                # the shared expert's (0 without one)
    total: float                 # the layer's FFN term in the DLA (= effects.sum() + shared)


def expert_logit_effects(trace: Trace, target: int, position: int = -1, distractor: int | None = None,
                         model=None) -> list[ExpertEffects]:
    """Each MoE layer's chosen experts' direct effect on the target's logit (minus the distractor's) at
    ``position``: the final norm's scale frozen, as the DLA does (analysis/dla.py), so they add up to the
    layer's FFN term there."""
    model = model if model is not None else trace._model
    if model is None:
        raise DLAError("an expert's direct effect needs the model's un-embedding: this trace was opened without it")
    cfg = trace.config
    if cfg.norm != "none" and cfg.norm_placement != "pre":
        raise DLAError("direct effects need a pre-norm model: here each block normalises its output")
    p = position % trace.n_tokens
    r = _reader(trace, model, target, p, distractor)
    scale = float(cfg.residual_scale)
    out = []
    for layer in cfg.moe_layers:
        key = f"blocks.{layer}.moe"
        effects = scale * np.asarray(trace[f"{key}.expert_out"][p], dtype=np.float64) @ r     # [k]
        shared = float(scale * np.asarray(trace[f"{key}.shared_out"][p], np.float64) @ r) if cfg.d_shared else 0.0
        total = float(np.asarray(trace[f"blocks.{layer}.mlp.out"][p], dtype=np.float64) @ r)
        out.append(ExpertEffects(layer, tuple(int(e) for e in trace[f"{key}.experts"][p]), effects, shared, total))
    return out
