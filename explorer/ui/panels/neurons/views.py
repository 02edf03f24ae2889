"""What the neurons panel draws, computed from a trace and kept with it (``trace.memo``); Qt-free.

Everything that scans a whole layer (the float32 activations, the three orderings, the colour levels,
the top-K subset, a neuron's vocabulary effect) is computed here, on the worker thread when the
panel's ``prepare`` ran, so drawing only indexes into it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np

from explorer.core.analysis.neurons import (
    neuron_order,
    neuron_vocab_effect,
    top_columns,
    top_neurons,
)
from explorer.core.display.levels import finite_levels
from explorer.core.interventions.spec import Intervention
from explorer.core.trace import Trace

ORDERS = {"index": "index", "max": "most active", "variance": "variance"}  # neuron_order mode -> combo text
DEFAULT_TOP_K = 64
TOP_TOKEN_NEURONS = 20  # rows of the selected token's ranked list
VOCAB_K = 10  # promoted and suppressed tokens listed
VOCAB_NOW_MACS = 2**22  # d_model x V under this: a neuron's vocabulary effect with the trace; else in the background


@dataclass(frozen=True, eq=False)
class LayerView:
    """One layer's activations and everything derived from them that drawing needs. The orders are
    computed on first use (a layer switch needs only the current one) and kept."""

    post: np.ndarray                   # float32 [n, d_ff], read-only
    levels: tuple[float, float]        # colour levels over the whole layer (the same for every K)
    _orders: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def order(self, mode: str) -> np.ndarray:
        """A permutation of the d_ff neurons (``neuron_order``)."""
        return self._order_and_rank(mode)[0]

    def rank(self, mode: str) -> np.ndarray:
        """Each neuron's position in ``order(mode)``."""
        return self._order_and_rank(mode)[1]

    def _order_and_rank(self, mode: str) -> tuple[np.ndarray, np.ndarray]:
        with self._lock:  # the worker's prepare and the GUI thread may ask at once
            if mode not in self._orders:
                order = neuron_order(self.post, mode)
                rank = np.empty_like(order)
                rank[order] = np.arange(order.size)
                self._orders[mode] = (order, rank)
            return self._orders[mode]


def layer_view(trace: Trace, layer: int) -> LayerView | None:
    """The layer's view, computed once per trace (on the worker thread when ``prepare`` ran)."""
    key = f"blocks.{layer}.mlp.post"
    if not trace.config.has_ffn or key not in trace:
        return None

    def compute() -> LayerView:
        post = np.ascontiguousarray(trace[key], dtype=np.float32)
        if post.flags.writeable:
            post.flags.writeable = False
        return LayerView(post, finite_levels(post, symmetric=trace.config.gated_ffn))

    return trace.memo(("neurons.layer", layer), compute)


NO_FFN_NOTE = ("This model has no FFN: it is attention-only, so its blocks have no neurons to show. "
               "Each block's attention output goes straight into the residual stream.")
NO_BLOCK_FFN_NOTE = ("Layer {layer} has no FFN: this block is only its token mixer ({mixer}), so it has no neurons "
                     "to show. The layers with an FFN have them (the Layer box).")


def neurons_note(trace: Trace, layer: int) -> str | None:
    """Why ``layer`` has no neurons to show (None where it has): a model without FFNs, a block without one
    (Nemotron-H's mixer blocks)."""
    from explorer.core.analysis.layer_maps import describe_mixer

    cfg = trace.config
    if not cfg.has_ffn:
        return NO_FFN_NOTE
    layer = layer_of(trace, layer)
    if cfg.layer(layer).ffn == "none":
        return NO_BLOCK_FFN_NOTE.format(layer=layer, mixer=describe_mixer(cfg, layer))
    return None


def layer_of(trace: Trace, layer: int) -> int:
    """``layer`` kept inside the trace's layers."""
    return min(max(layer, 0), trace.config.n_layers - 1)


def top_ids(trace: Trace, layer: int, view: LayerView, k: int) -> np.ndarray | None:
    """The ids of the K most active neurons (``top_columns``), or None for all of them."""
    if k <= 0 or k >= view.post.shape[1]:
        return None
    return trace.memo(("neurons.top", layer, k), lambda: top_columns(view.post, k)[0])


def neuron_for(view: LayerView, layer: int, token: int | None, chosen: int | None,
               chosen_layer: int | None) -> int | None:
    """The neuron to show in detail: ``chosen`` if it was chosen on this layer, else the token's
    (the last one when ``token`` is None) most active neuron."""
    d_ff = view.post.shape[1]
    if chosen is not None and chosen_layer == layer and chosen < d_ff:
        return chosen
    if d_ff == 0 or view.post.shape[0] == 0:
        return None
    n = view.post.shape[0]
    token = n - 1 if token is None else min(max(token, 0), n - 1)
    return int(top_neurons(view.post, token, 1)[0][0])


def vocab_effect_of(trace: Trace, layer: int, neuron: int, vocab_size: int | None):
    """What ``neuron`` writes into the vocabulary through the direct path (``neuron_vocab_effect``)."""
    return trace.memo(("neurons.vocab", layer, neuron, VOCAB_K, vocab_size),
                      lambda: neuron_vocab_effect(trace, layer, neuron, VOCAB_K, vocab_size=vocab_size))


def switched_off(active: tuple[Intervention, ...], layer: int, d_ff: int) -> np.ndarray:
    """The neurons of ``layer`` that an active intervention changes: the heatmap keeps their columns
    (marked) though, switched off, they no longer fire and so leave the top K."""
    ids = {iv.index for iv in active if iv.target == "neuron" and iv.layer == layer and 0 <= iv.index < d_ff}
    return np.array(sorted(ids), dtype=np.int64)


def arranged(view: LayerView, top: np.ndarray | None, order: str, kept: np.ndarray) -> np.ndarray:
    """The heatmap's columns: the top K (``top``; None: all) in ``order``, with the ``kept`` neurons (switched
    off: they no longer fire, so they leave the top K, but stay to be seen and cleared)."""
    if top is None:
        return view.order(order)
    extra = np.setdiff1d(kept, top)
    if order == "max" and extra.size == 0:
        return top  # top_columns is already in the "max" order
    shown = np.concatenate([top, extra])
    return shown[np.argsort(view.rank(order)[shown], kind="stable")]


def column_marks(iv: Intervention, layer: int, columns: np.ndarray, rows: int) -> list[tuple[float, float]]:
    """Where a neuron intervention is marked on the heatmap: down its column (none if not shown)."""
    if iv.target != "neuron" or iv.layer != layer:
        return []
    where = np.flatnonzero(columns == iv.index)
    return [(float(where[0]) + 0.5, r + 0.5) for r in range(rows)] if where.size else []
