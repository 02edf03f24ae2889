"""The FFN neurons panel (see ``panel.py``): ``views`` computes what it draws from a trace (Qt-free,
memoised), ``widgets`` holds its heatmap and tables, ``detail`` draws the selected token and neuron."""

from explorer.ui.panels.neurons.panel import NeuronsPanel
from explorer.ui.panels.neurons.snapshot import NeuronsSnapshot, NeuronsView
from explorer.ui.panels.neurons.views import (
    DEFAULT_TOP_K,
    ORDERS,
    TOP_TOKEN_NEURONS,
    VOCAB_K,
    LayerView,
)

__all__ = ["DEFAULT_TOP_K", "ORDERS", "TOP_TOKEN_NEURONS", "VOCAB_K", "LayerView", "NeuronsPanel", "NeuronsSnapshot", "NeuronsView"]
