"""What the neurons panel's ``prepare`` reads (``NeuronsSnapshot``) and returns (``NeuronsView``), and
the worker-thread work between them (``neurons_view``): the layer's activations, orderings and top-K
subset, and the vocabulary effect of the neuron the panel will select (memoised with the trace)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from explorer.core.trace import Trace
from explorer.ui.panels.base import PanelSnapshot, PanelView
from explorer.ui.panels.neurons.views import (
    DEFAULT_TOP_K,
    VOCAB_NOW_MACS,
    LayerView,
    layer_of,
    layer_view,
    neuron_for,
    neurons_note,
    top_ids,
    vocab_effect_of,
)


@dataclass(frozen=True)
class NeuronsSnapshot(PanelSnapshot):
    """The neurons panel's options for ``prepare``: K, and the neuron chosen by hand on ``neuron_layer``."""

    top_k: int = DEFAULT_TOP_K
    neuron: int | None = None
    neuron_layer: int | None = None
    order: str = "index"


@dataclass(frozen=True)
class NeuronsView(PanelView):
    """The snapshot's layer of one trace: its activations (``layer_view``; None without an FFN or
    when they were not captured), the top-K neuron ids and the neuron shown in detail."""

    layer: int = 0
    layer_view: LayerView | None = None
    top: np.ndarray | None = None
    neuron: int | None = None


def neurons_view(trace: Trace, snapshot: NeuronsSnapshot) -> NeuronsView:
    """On the worker thread: everything that scans the snapshot's layer."""
    layer = layer_of(trace, snapshot.layer)
    if neurons_note(trace, layer):  # no FFN here (or anywhere)
        return NeuronsView(trace, layer)
    view = layer_view(trace, layer)
    if view is None:
        return NeuronsView(trace, layer)
    top = top_ids(trace, layer, view, snapshot.top_k)
    view.order(snapshot.order)
    neuron = neuron_for(view, layer, snapshot.token, snapshot.neuron, snapshot.neuron_layer)
    cfg = trace.config
    if neuron is not None and cfg.vocab_size * cfg.d_model <= VOCAB_NOW_MACS:  # else progressive (detail.py)
        vocab_size = getattr(snapshot.tokenizer, "vocab_size", None) if snapshot.tokenizer is not None else None
        vocab_effect_of(trace, layer, neuron, vocab_size)
    return NeuronsView(trace, layer, view, top, neuron)
