"""What the Experts panel draws, computed from a trace alone (on the worker, memoised with the trace): each MoE
layer's routing map, top-k margins and load (``layer_view``), the selected token's lanes through every MoE
layer (``lanes_of``) and each chosen expert's direct effect on the DLA target's logit (``effects_of``). The
numbers are ``core/analysis/experts.py``'s, unchanged."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from explorer.core.analysis.dla import DLAError
from explorer.core.analysis.experts import expert_load, expert_logit_effects, flip_tolerance, routing_map, topk_margin
from explorer.core.display.labels import token_labels
from explorer.core.display.tokens import quoted
from explorer.core.trace import Trace
from explorer.ui.panels.base import PanelSnapshot, PanelView, clamp_token
from explorer.ui.panels.interventions.dla import dla_target

ORDERS = {"index": "expert number", "load": "load (busiest first)"}
VALUES = {"weights": "chosen weights", "scores": "every expert's router score"}
LANE_VALUES = {"weight": "weight", "effect": "direct effect on the logit"}
EFFECTS_NOW = 5e7  # multiply-adds of re-running the MoE blocks (their experts' outputs) up to this: at once, else later
NO_MOE = ("This model has no mixture-of-experts layers: each block's FFN is one dense network, so there are "
          "no experts to route to. The FFN neurons panel shows what its neurons do.")


@dataclass(frozen=True)
class ExpertsSnapshot(PanelSnapshot):
    """The Experts panel's options: the columns' order and what the routing map shows."""

    order: str = "index"
    values: str = "weights"


@dataclass(frozen=True)
class LayerView:
    """One MoE layer of one trace: what the routing map, the margin strip and the load bars draw."""

    layer: int
    weights: np.ndarray      # [n, E] each chosen expert's weight, 0 elsewhere (analysis.experts.routing_map)
    chosen: np.ndarray       # [n, E] bool
    scores: np.ndarray       # [n, E] every expert's router score (softmax or sigmoid)
    margin: np.ndarray       # [n] the k-th chosen expert's choice score minus the best left out (inf: none out)
    kth: np.ndarray          # [n] the last expert in
    next: np.ndarray         # [n] the best one left out (-1: none)
    tolerance: np.ndarray    # [n] the margin under which rounding in the model's dtype can flip the routing
    close: np.ndarray        # [n] bool: margin <= tolerance (analysis.experts.close_calls)
    close_bf16: int          # how many tokens would be close calls in bfloat16
    load: np.ndarray         # [E] tokens routed to each expert
    load_weight: np.ndarray  # [E] the sum of the weights they gave it
    load_share: np.ndarray   # [E] the expert's share of the layer's n x k routed slots
    by_load: np.ndarray      # [E] expert ids, busiest first (ties by number)
    typical_tolerance: float  # the median tolerance (the strip's dashed line)

    def columns(self, order: str) -> np.ndarray:
        return self.by_load if order == "load" else np.arange(self.weights.shape[1])


def moe_layer_of(trace: Trace, layer: int) -> int | None:
    """The MoE layer the panel shows for the selected ``layer``: itself, else the next MoE layer after it, else
    the last one before it (None: the model has none)."""
    layers = list(trace.config.moe_layers)
    if not layers:
        return None
    if layer in layers:
        return layer
    after = [m for m in layers if m > layer]
    return after[0] if after else layers[-1]


def layer_view(trace: Trace, layer: int) -> LayerView:
    """The routing map, margins and load of MoE layer ``layer`` (memoised with the trace)."""
    def compute() -> LayerView:
        routing = routing_map(trace, layer)
        margin = topk_margin(trace, layer)
        tolerance = flip_tolerance(trace.meta.dtype, margin.scale)
        load = expert_load(trace, layer)
        by_load = np.lexsort((np.arange(load.tokens.size), -load.tokens))
        close_bf16 = int((margin.margin <= flip_tolerance("bfloat16", margin.scale)).sum())
        return LayerView(layer, routing.weights, routing.chosen, np.asarray(routing.probs, np.float32),
                         margin.margin, margin.kth, margin.next, tolerance, margin.margin <= tolerance, close_bf16,
                         load.tokens, load.weight, load.share, by_load,
                         float(np.median(tolerance)) if tolerance.size else 0.0)

    return trace.memo(("experts.layer", layer), compute)


@dataclass(frozen=True)
class Tops:
    """Where the axes end over every MoE layer of a trace: a layer switch keeps them (no axis laid out again)."""

    margin: int              # the margin strip's last log10
    load: float              # the busiest expert's tokens
    weight: float            # the largest chosen weight
    score: float             # the largest router score


def axis_tops(trace: Trace) -> Tops:
    """``Tops`` of ``trace`` (memoised)."""
    def compute() -> Tops:
        views = [layer_view(trace, m) for m in trace.config.moe_layers]
        margins = np.concatenate([v.margin[np.isfinite(v.margin)] for v in views] + [np.zeros(0)])
        top = math.ceil(np.log10(max(float(margins.max(initial=0.0)), 1e-9)))
        return Tops(top, float(max(v.load.max(initial=0) for v in views)),
                    max(float(v.weights.max(initial=0.0)) for v in views),
                    max(float(v.scores.max(initial=0.0)) for v in views))

    return trace.memo(("experts.tops",), compute)


MARGIN_BINS = 96  # the margin strip's columns
LOG_FLOOR = -9    # margins below 1e-9 (a tie) are drawn at the floor


def strip_image(trace: Trace, view: LayerView) -> np.ndarray:
    """The margin strip as an RGBA image [n, MARGIN_BINS, 4]: each token's bar up to log10 of its margin (red for
    a close call), over [LOG_FLOOR, Tops.margin] (memoised per layer)."""
    def compute() -> np.ndarray:
        top = max(axis_tops(trace).margin, LOG_FLOOR + 1)
        finite = np.isfinite(view.margin)
        logs = np.where(finite, np.log10(np.maximum(np.where(finite, view.margin, 1.0), 10.0 ** LOG_FLOOR)), top)
        centers = LOG_FLOOR + (np.arange(MARGIN_BINS) + 0.5) * (top - LOG_FLOOR) / MARGIN_BINS
        filled = centers[None, :] <= logs[:, None]
        rgba = np.zeros((view.margin.size, MARGIN_BINS, 4), np.uint8)
        rgba[filled & view.close[:, None]] = (214, 39, 40, 255)
        rgba[filled & ~view.close[:, None]] = (140, 140, 140, 255)
        return rgba

    return trace.memo(("experts.strip", view.layer), compute)


@dataclass(frozen=True)
class ExpertsView(PanelView):
    """The snapshot's MoE layer (None: the model has none) and the selected position."""

    layer: LayerView | None = None
    position: int = 0


def experts_view(trace: Trace, snapshot: ExpertsSnapshot) -> ExpertsView:
    """On the worker: the snapshot's layer (every MoE layer's view is small: all of them, so a layer switch only
    draws)."""
    layer = moe_layer_of(trace, snapshot.layer)
    if layer is None:
        return ExpertsView(trace)
    for other in trace.config.moe_layers:
        strip_image(trace, layer_view(trace, other))
    return ExpertsView(trace, layer_view(trace, layer), clamp_token(snapshot.token, trace.n_tokens))


@dataclass(frozen=True)
class Lanes:
    """The token at ``position`` through every MoE layer: rows are ``layers``, columns the experts."""

    position: int
    layers: tuple[int, ...]
    weights: np.ndarray      # [M, E] each chosen expert's weight, 0 elsewhere
    chosen: np.ndarray       # [M, E] bool
    experts: np.ndarray      # [M, k] the chosen experts, best first
    slot_weights: np.ndarray  # [M, k] their weights


def lanes_of(trace: Trace, position: int) -> Lanes:
    layers = tuple(trace.config.moe_layers)
    E = trace.config.n_experts
    experts = np.stack([np.asarray(trace[f"blocks.{m}.moe.experts"][position]) for m in layers]).astype(np.int64)
    slot_w = np.stack([np.asarray(trace[f"blocks.{m}.moe.weights"][position], np.float32) for m in layers])
    weights = np.zeros((len(layers), E), np.float32)
    np.put_along_axis(weights, experts, slot_w, axis=1)
    chosen = np.zeros((len(layers), E), bool)
    np.put_along_axis(chosen, experts, True, axis=1)
    return Lanes(position, layers, weights, chosen, experts, slot_w)


@dataclass(frozen=True)
class Effects:
    """Each chosen expert's direct effect on ``target``'s logit at ``position`` (``analysis.experts``)."""

    position: int
    target: int
    follows: bool            # the target is the token that follows ``position`` in the prompt (else the top prediction)
    matrix: np.ndarray       # [M, E] the effect of each chosen expert, 0 elsewhere
    rows: tuple              # (layer, expert or None for the shared one, weight or nan, effect), in the table's order
    totals: tuple            # per MoE layer: (layer, the layer's FFN term, shared expert's effect)


def effects_of(trace: Trace, position: int) -> Effects | str:
    """The effects at ``position`` on the DLA panel's default target there (the next prompt token, or the top
    prediction after the last), or why there are none (memoised with the trace)."""
    p = clamp_token(position, trace.n_tokens)

    def compute() -> Effects | str:
        if not trace.has_model:
            return "An expert's direct effect needs the model's un-embedding: this trace was opened without the model."
        target = dla_target(trace, p)
        try:
            found = expert_logit_effects(trace, target, p)
        except DLAError as exc:
            return str(exc)
        lanes = lanes_of(trace, p)
        matrix = np.zeros(lanes.weights.shape, np.float64)
        rows, totals = [], []
        for i, e in enumerate(found):
            for slot, (expert, effect) in enumerate(zip(e.experts, e.effects)):
                matrix[i, expert] = effect
                rows.append((e.layer, expert, float(lanes.slot_weights[i, slot]), float(effect)))
            if trace.config.d_shared:
                rows.append((e.layer, None, float("nan"), float(e.shared)))
            totals.append((e.layer, float(e.total), float(e.shared)))
        return Effects(p, target, p < trace.n_tokens - 1, matrix, tuple(rows), tuple(totals))

    return trace.memo(("experts.effects", p), compute)


def effects_are_cheap(trace: Trace) -> bool:
    """Whether the effects can be computed on the GUI thread: each MoE block runs again (attention and the chosen
    experts, for every token) unless its experts' outputs are kept already."""
    cfg = trace.config
    per_token = cfg.experts_per_token * 3 * cfg.d_model * cfg.d_expert + 4 * cfg.d_model * cfg.d_model
    return trace.n_tokens * len(cfg.moe_layers) * per_token <= EFFECTS_NOW


def margin_text(view: LayerView, p: int, token: str, dtype: str) -> str:
    """The margin strip's tooltip for token ``p``."""
    m = float(view.margin[p])
    if not np.isfinite(m):
        return f"token {p} {token}: every expert is chosen, so nothing can flip"
    verdict = (f"within {dtype} rounding ({view.tolerance[p]:.2e}): a change this small flips the routing here"
               if view.close[p] else f"{m / max(float(view.tolerance[p]), 1e-30):.3g}\u00d7 the {dtype} rounding "
               f"({view.tolerance[p]:.2e})")
    return (f"token {p} {token}: margin {m:.6g} (expert {int(view.kth[p])}, the last one in, over expert "
            f"{int(view.next[p])}, the best one left out): {verdict}")


def routing_note(view: LayerView, tokens: list[str], dtype: str, k: int) -> tuple[str, bool]:
    """The line above the map: the close calls at this layer, said in words (and whether it is a warning)."""
    n = view.margin.size
    close = np.flatnonzero(view.close)
    if close.size:
        named = ", ".join(f"{p} {quoted(tokens[p], 12)}" for p in close[:4].tolist())
        named += ", \u2026" if close.size > 4 else ""
        return (f"\u26a0 A small change flips the routing here: at L{view.layer}, for {close.size} of {n} tokens the "
                f"{ordinal_k(k)} expert in beat the best one left out by less than {dtype} rounding can move a score "
                f"(red in the margin strip: {named}). In another precision, or after a "
                "tiny edit upstream, they may go to other experts.", True)
    finite = np.isfinite(view.margin)
    if not finite.any():
        return f"At L{view.layer} every token goes to every expert: the routing cannot flip.", False
    p = int(np.argmin(np.where(finite, view.margin, np.inf)))
    ratio = float(view.margin[p]) / max(float(view.tolerance[p]), 1e-30)
    bf16 = ("" if dtype == "bfloat16" else
            f" In bfloat16, {view.close_bf16} of the {n} would be." if view.close_bf16 else
            " None would be in bfloat16 either.")
    return (f"No close calls at L{view.layer} in {dtype}: the narrowest top-{k} margin is {view.margin[p]:.3g} (token "
            f"{p} {quoted(tokens[p], 12)}), {ratio:.3g}\u00d7 what rounding can move.{bf16}", False)


def ordinal_k(k: int) -> str:
    """'8th' for k = 8: the last expert a token takes."""
    return f"{k}{'th' if 10 <= k % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(k % 10, 'th')}"


def margin_table(view: LayerView | None, trace: Trace | None) -> tuple[np.ndarray, list[str], list[str]]:
    """The margin strip's export: per token, its margin, the rounding tolerance, the last expert in, the best out."""
    if view is None or trace is None:
        return np.zeros((0, 4)), [], []
    values = np.stack([view.margin, view.tolerance, view.kth, view.next], axis=1).astype(np.float64)
    return values, token_labels(trace.tokens), ["margin", "rounding tolerance", "last expert in", "best expert out"]


def load_table(view: LayerView | None, columns: np.ndarray) -> tuple[np.ndarray, list[str], list[str]]:
    """The load bars' export, in the map's column order: tokens, their summed weight, the share of the slots."""
    if view is None:
        return np.zeros((0, 3)), [], []
    values = np.stack([view.load[columns], view.load_weight[columns], view.load_share[columns]], axis=1)
    return values.astype(np.float64), [f"#{e}" for e in columns.tolist()], ["tokens", "weight", "share of slots"]
