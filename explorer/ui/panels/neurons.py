"""FFN neurons: which of a layer's d_ff neurons fire on which token, and what one neuron writes.

* Heatmap: the selected layer's activations ``blocks.{l}.mlp.post`` [tokens x d_ff], one column
  per neuron. "show top K" keeps the K neurons with the largest activation on any token
  (``top_columns``; 0 = all d_ff), arranged in the chosen order (``neuron_order``: index, most
  active, variance). Wheel and drag zoom and pan; the neuron-id ticks follow the visible range.
  Clicking a cell selects its token (shared) and its neuron (this panel's ``selected_neuron``).
* Selected token: its most active neurons as a ranked table (``top_neurons``); a row selects
  that neuron.
* Selected neuron: its activation at every token (bars), the histogram of those activations, and
  the vocabulary tokens its output direction promotes and suppresses most through the direct path
  (``neuron_vocab_effect``).

Everything that scans the whole layer (the float32 activations, the three orderings, the colour
levels, the top-K subset, the default neuron's vocabulary effect) is computed in ``prepare`` on the
worker thread and kept with ``trace.memo``; drawing only indexes into it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF, Qt
from PySide6.QtWidgets import (QComboBox, QHBoxLayout, QHeaderView, QLabel, QSpinBox,
                               QSplitter, QTableWidget, QTableWidgetItem, QToolButton, QVBoxLayout, QWidget)

from explorer.core.export import token_labels
from explorer.core.display.levels import abbreviate, finite_levels, label_step, thinned_ticks
from explorer.core.analysis.neurons import (activation_histogram, neuron_order, neuron_vocab_effect, top_columns,
                                   top_neurons)
from explorer.core.trace import Trace
from explorer.ui.panels.base import Panel
from explorer.ui.selection import Selection
from explorer.ui.widgets.heatmap import Heatmap, format_value
from explorer.ui.widgets.plots import fixed_plot, outline

ORDERS = {"index": "index", "max": "most active", "variance": "variance"}  # neuron_order mode -> combo text
DEFAULT_TOP_K = 64
TOP_TOKEN_NEURONS = 20  # rows of the selected token's ranked list
VOCAB_K = 10  # promoted and suppressed tokens listed
NO_FFN_NOTE = ("This model has no FFN: it is attention-only, so its blocks have no neurons to show. "
               "Each block's attention output goes straight into the residual stream.")
NOT_CAPTURED_NOTE = ("Layer {layer}'s FFN activations were not captured in this trace, and without the model "
                     "they cannot be recomputed.")
VOCAB_CAPTION = ("Direct path only: the neuron's output direction W_out[:, k], scaled by the final norm's "
                 "\u03b3 and read through the un-embedding W_U, gives one logit change per unit of activation. "
                 "Later layers and the norm's centring and scaling are ignored, so this is a strong hint, "
                 "not a proof. For a negative activation the roles swap.")
BAR_POSITIVE, BAR_NEGATIVE = pg.mkBrush("#c0392b"), pg.mkBrush("#3b6fb6")
BAR_HIST = pg.mkBrush("#2a788e")
SELECTED_PEN = pg.mkPen("#111111", width=2)
COLUMN_OUTLINE = pg.mkPen("#ff2d55", width=2, cosmetic=True)
ROW_OUTLINE = pg.mkPen("#ff2d55", width=1.5, cosmetic=True, style=Qt.PenStyle.DashLine)


def quoted(token: str) -> str:
    return "'" + abbreviate(token, 24) + "'"


@dataclass(frozen=True)
class LayerView:
    """One layer's activations and everything derived from them that drawing needs."""

    post: np.ndarray                   # float32 [n, d_ff], read-only
    orders: dict[str, np.ndarray]      # mode -> permutation of the d_ff neurons (neuron_order)
    ranks: dict[str, np.ndarray]       # mode -> each neuron's position in that order
    levels: tuple[float, float]        # colour levels over the whole layer (the same for every K)


def _layer_view(trace: Trace, layer: int) -> LayerView | None:
    """The layer's view, computed once per trace (on the worker thread when ``prepare`` ran)."""
    key = f"blocks.{layer}.mlp.post"
    if not trace.config.has_ffn or key not in trace:
        return None

    def compute() -> LayerView:
        post = np.ascontiguousarray(trace[key], dtype=np.float32)
        post.flags.writeable = False
        orders, ranks = {}, {}
        for mode in ORDERS:
            order = neuron_order(post, mode)
            rank = np.empty_like(order)
            rank[order] = np.arange(order.size)
            orders[mode], ranks[mode] = order, rank
        levels = finite_levels(post, symmetric=trace.config.gated_ffn)
        return LayerView(post, orders, ranks, levels)

    return trace.memo(("neurons.layer", layer), compute)


class NeuronHeatmap(Heatmap):
    """The [tokens x neurons] heatmap: neuron-id ticks for the visible columns, neuron tooltips."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.plot.vb.sigXRangeChanged.connect(lambda *_: self._update_ticks())

    def cell_text(self, row: int, col: int) -> str:
        return (f"token {quoted(self.row_labels[row])} ({row}), neuron {self.col_labels[col]}: "
                f"{format_value(self.matrix[row, col])}")

    def _update_ticks(self) -> None:
        super()._update_ticks()
        matrix = getattr(self, "_matrix", None)
        if matrix is None or matrix.size == 0 or self._col_labels is None:
            return
        cols = matrix.shape[1]
        x0, x1 = self.plot.vb.viewRange()[0]
        lo, hi = max(0, int(np.floor(x0))), min(cols, int(np.ceil(x1)))
        if hi <= lo:
            self.plot.getAxis("bottom").setTicks([[]])
            return
        longest = max(len(self._col_labels[lo]), len(self._col_labels[hi - 1]))
        room = max(2, int(max(self.plot.vb.width(), 100.0) / (7.0 * longest + 12.0)))
        step = label_step(hi - lo, room)
        first = -(-lo // step) * step  # multiples of the step, so that labels stay put while panning
        self.plot.getAxis("bottom").setTicks(
            [[(i + 0.5, self._col_labels[i]) for i in range(first, hi, step)]])


def _table(headers: list[str], stretch: tuple[int, ...]) -> QTableWidget:
    """A read-only, compact table whose ``stretch`` columns share the width and the others fit."""
    table = QTableWidget(0, len(headers))
    table.setHorizontalHeaderLabels(headers)
    table.verticalHeader().setVisible(False)
    table.verticalHeader().setDefaultSectionSize(table.fontMetrics().height() + 8)
    table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
    table.setSelectionBehavior(QTableWidget.SelectionBehavior.SelectRows)
    table.setSelectionMode(QTableWidget.SelectionMode.SingleSelection)
    header = table.horizontalHeader()
    for c in range(len(headers)):
        header.setSectionResizeMode(c, QHeaderView.ResizeMode.Stretch if c in stretch
                                    else QHeaderView.ResizeMode.ResizeToContents)
    return table


def _cell(text: str, number: bool = False) -> QTableWidgetItem:
    item = QTableWidgetItem(text)
    if number:
        item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
    return item


class NeuronsPanel(Panel):
    title = "FFN neurons"
    explanation = "ffn"

    def __init__(self, selection: Selection, parent: QWidget | None = None) -> None:
        super().__init__(selection, parent)
        self.order = "index"
        self.top_k = DEFAULT_TOP_K
        self.selected_neuron: int | None = None
        self._neuron_layer: int | None = None  # the layer selected_neuron belongs to
        self._view: LayerView | None = None
        self._layer = 0
        self._columns = np.zeros(0, dtype=np.int64)
        self._ranked: tuple[np.ndarray, np.ndarray] = (np.zeros(0, np.int64), np.zeros(0, np.float32))
        self._vocab: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None
        self._hist: tuple[np.ndarray, np.ndarray] = (np.zeros(0, np.int64), np.zeros(1))
        self._colormap = "viridis"
        self._filling = False  # tables being refilled: their selection signals are ours, not the user's
        self._build_controls()
        self._build_content()
        self._register_exports()

    # --- building --------------------------------------------------------------------------------
    def _build_controls(self) -> None:
        row = QHBoxLayout()
        row.addWidget(QLabel("column order:"))
        self.order_combo = QComboBox()
        for mode, text in ORDERS.items():
            self.order_combo.addItem(text, mode)
        self.order_combo.setToolTip("index: neuron 0, 1, 2 \u2026; most active: by the largest activation on any "
                                    "token; variance: by how much the activation changes across the tokens")
        self.order_combo.currentIndexChanged.connect(lambda _i: self.set_order(self.order_combo.currentData()))
        row.addWidget(self.order_combo)
        row.addSpacing(12)
        row.addWidget(QLabel("show top K:"))
        self.top_k_spin = QSpinBox()
        self.top_k_spin.setRange(0, 1_000_000)
        self.top_k_spin.setSpecialValueText("all")
        self.top_k_spin.setKeyboardTracking(False)
        self.top_k_spin.setValue(self.top_k)
        self.top_k_spin.setToolTip("Keep only the K neurons with the largest activation on any token, "
                                   "arranged in the chosen order (0 = all d_ff neurons)")
        self.top_k_spin.valueChanged.connect(self.set_top_k)
        row.addWidget(self.top_k_spin)
        self.reset_zoom = QToolButton()
        self.reset_zoom.setText("reset zoom")
        self.reset_zoom.setToolTip("Show every column again (wheel zooms, drag pans)")
        self.reset_zoom.clicked.connect(self._reset_zoom)
        row.addWidget(self.reset_zoom)
        row.addStretch(1)
        self.info = QLabel()
        self.info.setStyleSheet("color: #555")
        row.addWidget(self.info)
        self.controls = QWidget()
        self.controls.setLayout(row)
        row.setContentsMargins(0, 0, 0, 0)
        self.body.addWidget(self.controls)

        self.note = QLabel()
        self.note.setWordWrap(True)
        self.note.setStyleSheet("font-size: 14px; padding: 16px; color: #333")
        self.note.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        self.note.setVisible(False)
        self.body.addWidget(self.note, 1)  # takes the room of the hidden plots, text at the top

    def _build_content(self) -> None:
        self.heatmap = NeuronHeatmap(colormap="viridis")
        self.heatmap.cell_clicked.connect(self._on_cell_clicked)
        self.heatmap.plot.setLabel("left", "token")
        self.heatmap.plot.setLabel("bottom", "neuron")
        self.column_outline = outline(self.heatmap.plot, COLUMN_OUTLINE)
        self.row_outline = outline(self.heatmap.plot, ROW_OUTLINE, z=19)

        self.bars_plot = fixed_plot()
        self.bars = pg.BarGraphItem(x=[], height=[], width=0.8, brush=BAR_POSITIVE, pen=None)
        self.bars_plot.addItem(self.bars)
        self.bars_plot.addItem(pg.InfiniteLine(pos=0, angle=0, pen=pg.mkPen("#888", width=1)))
        self.bar_values = np.zeros(0, dtype=np.float32)
        self.bars_plot.getViewBox().sigResized.connect(lambda *_: self._bar_ticks())

        left = QSplitter(Qt.Orientation.Vertical)
        left.addWidget(self.heatmap)
        left.addWidget(self.bars_plot)
        left.setStretchFactor(0, 3)
        left.setStretchFactor(1, 2)

        self.ranked_title = QLabel()
        self.ranked_title.setWordWrap(True)
        self.ranked = _table(["rank", "neuron", "activation"], stretch=(1, 2))
        self.ranked.currentCellChanged.connect(self._on_ranked_row)
        token_box = QWidget()
        column = QVBoxLayout(token_box)
        column.setContentsMargins(0, 0, 0, 0)
        column.addWidget(self.ranked_title)
        column.addWidget(self.ranked, 1)

        self.hist_plot = fixed_plot(grid="")
        self.hist_plot.setLabel("left", "tokens")
        self.hist_plot.setLabel("bottom", "activation")
        self.hist_bars = pg.BarGraphItem(x0=[], width=[], height=[], brush=BAR_HIST, pen=pg.mkPen("w", width=0.5))
        self.hist_plot.addItem(self.hist_bars)
        self.hist_marker = pg.InfiniteLine(angle=90, pen=pg.mkPen("#ff2d55", width=2, style=Qt.PenStyle.DashLine))
        self.hist_plot.addItem(self.hist_marker)

        self.vocab_title = QLabel()
        self.vocab_title.setWordWrap(True)
        self.vocab = _table(["promotes", "logit / unit", "suppresses", "logit / unit"], stretch=(0, 2))
        self.vocab.setSelectionMode(QTableWidget.SelectionMode.NoSelection)
        self.vocab_caption = QLabel(VOCAB_CAPTION)
        self.vocab_caption.setWordWrap(True)
        self.vocab_caption.setStyleSheet("color: #555; font-size: 11px")
        vocab_box = QWidget()
        column = QVBoxLayout(vocab_box)
        column.setContentsMargins(0, 0, 0, 0)
        column.addWidget(self.vocab_title)
        column.addWidget(self.vocab, 1)
        column.addWidget(self.vocab_caption)

        right = QSplitter(Qt.Orientation.Vertical)
        right.addWidget(token_box)
        right.addWidget(self.hist_plot)
        right.addWidget(vocab_box)
        right.setStretchFactor(0, 3)
        right.setStretchFactor(1, 2)
        right.setStretchFactor(2, 3)

        self.content = QSplitter(Qt.Orientation.Horizontal)
        self.content.addWidget(left)
        self.content.addWidget(right)
        self.content.setStretchFactor(0, 3)
        self.content.setStretchFactor(1, 2)
        self.body.addWidget(self.content, 1)

    def _register_exports(self) -> None:
        self.add_exportable("neuron activations", self.heatmap, self._heatmap_data)
        self.add_exportable("selected token's top neurons", self.ranked, self._ranked_data)
        self.add_exportable("selected neuron across tokens", self.bars_plot, self._bars_data)
        self.add_exportable("selected neuron histogram", self.hist_plot, self._hist_data)
        self.add_exportable("selected neuron vocabulary effect", self.vocab, self._vocab_data)

    # --- the panel contract ----------------------------------------------------------------------
    def needed_keys(self, trace: Trace) -> list[str]:
        if not trace.config.has_ffn:
            return []
        return [f"blocks.{self._layer_of(trace)}.mlp.post"]

    def prepare(self, trace: Trace) -> None:
        """On the worker thread: the selected layer's activations, orderings, levels and top-K
        subset, and the vocabulary effect of the neuron that ``show_trace`` will select."""
        if not trace.config.has_ffn:
            return
        layer = self._layer_of(trace)
        view = _layer_view(trace, layer)
        if view is None:
            return
        self._top_ids(trace, layer, view, self.top_k)
        neuron = self._neuron_for(trace, layer, view)
        if neuron is not None:
            self._vocab_effect(trace, layer, neuron)

    def show_trace(self, trace: Trace) -> None:
        self._draw_layer()

    def selection_changed(self, what: str) -> None:
        if what == "layer":
            self._draw_layer()
        elif what == "token" and self._view is not None:
            self._place_outlines()
            self._draw_ranked()
            self._draw_bars()
            self._place_hist_marker()

    def tokenizer_changed(self) -> None:
        if self.trace is not None and self._view is not None:
            self._draw_vocab()

    # --- public controls -------------------------------------------------------------------------
    def set_order(self, mode: str) -> None:
        """Arrange the heatmap's columns by "index", "max" (most active) or "variance"."""
        if mode not in ORDERS:
            raise ValueError(f"order must be one of {', '.join(ORDERS)}")
        index = self.order_combo.findData(mode)
        if self.order_combo.currentIndex() != index:
            self.order_combo.setCurrentIndex(index)  # re-enters through currentIndexChanged
            return
        if mode != self.order:
            self.order = mode
            self.redraw_heatmap()

    def set_top_k(self, k: int) -> None:
        """Show only the K most active neurons (0: all of them)."""
        k = max(0, int(k))
        if self.top_k_spin.value() != k:
            self.top_k_spin.setValue(k)  # re-enters through valueChanged (clamped to d_ff)
            return
        if k != self.top_k:
            self.top_k = k
            self.redraw_heatmap()

    def select_neuron(self, neuron: int) -> None:
        """Make neuron ``neuron`` of the selected layer the one shown in detail."""
        if self._view is None:
            return
        neuron = int(neuron)
        d_ff = self._view.post.shape[1]
        if not 0 <= neuron < d_ff:
            raise IndexError(f"neuron {neuron} is out of range for d_ff = {d_ff}")
        if neuron == self.selected_neuron and self._neuron_layer == self._layer:
            return
        self.selected_neuron, self._neuron_layer = neuron, self._layer
        self._place_outlines()
        self._mark_ranked_row()
        self._draw_neuron()

    def layer(self) -> int:
        return self._layer

    def columns(self) -> np.ndarray:
        """The neuron ids of the heatmap's columns, left to right."""
        return self._columns

    def token_index(self) -> int:
        """The selected token, or the last one when none is selected."""
        n = self.trace.n_tokens
        token = self.selection.token
        return n - 1 if token is None else min(max(token, 0), n - 1)

    def ranked_neurons(self) -> tuple[np.ndarray, np.ndarray]:
        """The selected token's ranked list as shown: (neuron ids, activations)."""
        return self._ranked

    def vocab_effect(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
        """What the selected neuron's vocabulary table shows (see ``neuron_vocab_effect``)."""
        return self._vocab

    # --- computing -------------------------------------------------------------------------------
    def _layer_of(self, trace: Trace) -> int:
        return min(max(self.selection.layer, 0), trace.config.n_layers - 1)

    @staticmethod
    def _top_ids(trace: Trace, layer: int, view: LayerView, k: int) -> np.ndarray | None:
        """The ids of the K most active neurons (``top_columns``), or None for all of them."""
        if k <= 0 or k >= view.post.shape[1]:
            return None
        return trace.memo(("neurons.top", layer, k), lambda: top_columns(view.post, k)[0])

    def _neuron_for(self, trace: Trace, layer: int, view: LayerView) -> int | None:
        """The neuron to show in detail: the one chosen on this layer, else the selected token's
        most active neuron."""
        d_ff = view.post.shape[1]
        if self.selected_neuron is not None and self._neuron_layer == layer and self.selected_neuron < d_ff:
            return self.selected_neuron
        if d_ff == 0 or view.post.shape[0] == 0:
            return None
        n = view.post.shape[0]
        token = self.selection.token
        token = n - 1 if token is None else min(max(token, 0), n - 1)
        return int(top_neurons(view.post, token, 1)[0][0])

    def _vocab_size(self) -> int | None:
        return getattr(self.tokenizer, "vocab_size", None) if self.tokenizer is not None else None

    def _vocab_effect(self, trace: Trace, layer: int, neuron: int):
        vocab_size = self._vocab_size()
        return trace.memo(("neurons.vocab", layer, neuron, VOCAB_K, vocab_size),
                          lambda: neuron_vocab_effect(trace, layer, neuron, VOCAB_K, vocab_size=vocab_size))

    def _token_text(self, token_id: int) -> str:
        if self.tokenizer is None:
            return f"#{token_id}"
        try:
            return repr(self.tokenizer.display(int(token_id)))  # quotes make edge spaces visible
        except Exception:  # noqa: BLE001 - an id the tokenizer cannot show (padded vocabulary rows)
            return f"#{token_id}"

    # --- drawing ---------------------------------------------------------------------------------
    def _show_note(self, text: str | None) -> None:
        self.note.setText(text or "")
        self.note.setVisible(text is not None)
        self.content.setVisible(text is None)
        self.controls.setVisible(text is None)

    def _draw_layer(self) -> None:
        trace = self.trace
        if trace is None:
            return
        self._layer = self._layer_of(trace)
        if not trace.config.has_ffn:
            self._view = None
            self._clear()
            self._show_note(NO_FFN_NOTE)
            self.info.setText("")
            return
        self._view = _layer_view(trace, self._layer)
        if self._view is None:
            self._clear()
            self._show_note(NOT_CAPTURED_NOTE.format(layer=self._layer))
            return
        self._show_note(None)
        d_ff = self._view.post.shape[1]
        self.top_k_spin.blockSignals(True)
        self.top_k_spin.setMaximum(d_ff)
        self.top_k_spin.setValue(min(self.top_k, d_ff))
        self.top_k_spin.blockSignals(False)
        neuron = self._neuron_for(trace, self._layer, self._view)
        self.selected_neuron, self._neuron_layer = neuron, self._layer
        self.redraw_heatmap()
        self._draw_ranked()
        self._draw_neuron()

    def _clear(self) -> None:
        self._columns = np.zeros(0, dtype=np.int64)
        self.selected_neuron = None
        self._ranked = (np.zeros(0, np.int64), np.zeros(0, np.float32))
        self._vocab = None
        self._hist = (np.zeros(0, np.int64), np.zeros(1))
        self.bar_values = np.zeros(0, dtype=np.float32)
        self.heatmap.set_data(np.zeros((0, 0), np.float32))
        self.column_outline.setVisible(False)
        self.row_outline.setVisible(False)
        self.bars.setOpts(x=[], height=[], brushes=None, pens=None)
        self.hist_bars.setOpts(x0=[], width=[], height=[])
        self.ranked.setRowCount(0)
        self.vocab.setRowCount(0)

    def shown_columns(self) -> np.ndarray:
        """The columns for the current order and K (ids, left to right)."""
        view = self._view
        top = self._top_ids(self.trace, self._layer, view, self.top_k)
        if top is None:
            return view.orders[self.order]
        if self.order == "max":
            return top  # top_columns is already in the "max" order
        return top[np.argsort(view.ranks[self.order][top], kind="stable")]

    def redraw_heatmap(self) -> None:
        """Draw the heatmap for the current layer, order and K (what the controls call)."""
        if self.trace is None or self._view is None:
            return
        view, cfg = self._view, self.trace.config
        self._columns = self.shown_columns()
        matrix = view.post[:, self._columns]
        labels = [f"#{j}" for j in self._columns.tolist()]
        colormap = "CET-D1" if cfg.gated_ffn else "viridis"  # gated products are signed: a diverging map
        if colormap != self._colormap:
            self._colormap = colormap
            self.heatmap.colormap = pg.colormap.get(colormap)
            self.heatmap.colorbar.setColorMap(self.heatmap.colormap)
        rows, cols = matrix.shape
        # the new limits first: the old ones (a narrower K, say) would clamp set_data's full range
        self.heatmap.plot.vb.setLimits(xMin=0, xMax=max(cols, 1), yMin=0, yMax=max(rows, 1),
                                       minXRange=min(4, max(cols, 1)), minYRange=min(2, max(rows, 1)))
        self.heatmap.set_data(matrix, list(self.trace.tokens), labels, levels=view.levels, value_name="activation")
        d_ff = view.post.shape[1]
        shown = "all" if cols == d_ff else f"the {cols} most active of"
        act = f"{'gated ' if cfg.gated_ffn else ''}{cfg.activation}"
        self.heatmap.plot.setTitle(f"L{self._layer} neuron activations after {act}: {shown} {d_ff}, "
                                   f"ordered by {ORDERS[self.order]}")
        self.info.setText(f"L{self._layer} \u00b7 d_ff = {d_ff} \u00b7 {self.trace.n_tokens} tokens")
        self._place_outlines()

    def _reset_zoom(self) -> None:
        rows, cols = self.heatmap.matrix.shape
        self.heatmap.plot.setRange(xRange=(0, max(cols, 1)), yRange=(0, max(rows, 1)), padding=0)

    def _place_outlines(self) -> None:
        if self._view is None:
            return
        rows, cols = self.heatmap.matrix.shape
        i = self.token_index()
        self.row_outline.setRect(QRectF(0, i, cols, 1))
        self.row_outline.setVisible(cols > 0)
        where = np.flatnonzero(self._columns == self.selected_neuron) if self.selected_neuron is not None else []
        self.column_outline.setVisible(len(where) > 0)
        if len(where):
            self.column_outline.setRect(QRectF(int(where[0]), 0, 1, rows))

    def _draw_ranked(self) -> None:
        view = self._view
        i = self.token_index()
        ids, values = top_neurons(view.post, i, min(TOP_TOKEN_NEURONS, view.post.shape[1]))
        self._ranked = (ids, values)
        self.ranked_title.setText(f"<b>Most active neurons at token {quoted(self.trace.tokens[i])} ({i})</b>, "
                                  f"L{self._layer}")
        self._filling = True
        try:
            self.ranked.setRowCount(len(ids))
            for r, (j, v) in enumerate(zip(ids.tolist(), values.tolist())):
                self.ranked.setItem(r, 0, _cell(str(r + 1), True))
                self.ranked.setItem(r, 1, _cell(f"#{j}", True))
                self.ranked.setItem(r, 2, _cell(f"{v:.4f}", True))
            self._mark_ranked_row()
        finally:
            self._filling = False

    def _mark_ranked_row(self) -> None:
        ids = self._ranked[0]
        where = np.flatnonzero(ids == self.selected_neuron) if self.selected_neuron is not None else []
        filling, self._filling = self._filling, True
        try:
            if len(where):
                self.ranked.setCurrentCell(int(where[0]), 0)
            else:
                self.ranked.clearSelection()
                self.ranked.setCurrentCell(-1, -1)
        finally:
            self._filling = filling

    def _draw_neuron(self) -> None:
        if self.selected_neuron is None:
            return
        self._draw_bars()
        self._draw_histogram()
        self._draw_vocab()

    def _draw_bars(self) -> None:
        j = self.selected_neuron
        if j is None:
            return
        values = self._view.post[:, j]
        self.bar_values = values
        n = values.size
        i = self.token_index()
        brushes = [BAR_NEGATIVE if v < 0 else BAR_POSITIVE for v in values.tolist()]
        pens = [pg.mkPen(None)] * n
        pens[i] = SELECTED_PEN
        self.bars.setOpts(x=np.arange(n) + 0.5, height=values, width=0.8, brushes=brushes, pens=pens)
        tokens = self.trace.tokens
        self.bars_plot.setTitle(f"L{self._layer} neuron #{j}: activation at each token "
                                f"(selected: {quoted(tokens[i])} ({i}) = {values[i]:.4f})")
        self._bar_ticks()
        lo, hi = float(min(0.0, values.min(initial=0.0))), float(max(0.0, values.max(initial=0.0)))
        self.bars_plot.setXRange(0, max(n, 1), padding=0.01)
        self.bars_plot.setYRange(lo, hi if hi > lo else lo + 1, padding=0.05)

    def _bar_ticks(self) -> None:
        """Token labels under the bars, as many as fit the plot's width."""
        if self.trace is None:
            return
        tokens = self.trace.tokens
        longest = min(8, max((len(t) for t in tokens), default=1))
        room = int(max(self.bars_plot.getViewBox().width(), 100.0) / (7.0 * longest + 12.0))
        self.bars_plot.getAxis("bottom").setTicks([thinned_ticks(tokens, max_labels=max(2, min(40, room)),
                                                                 max_chars=8)])

    def _draw_histogram(self) -> None:
        values = self._view.post[:, self.selected_neuron]
        bins = int(np.clip(values.size, 10, 40))
        counts, edges = activation_histogram(values, bins=bins)
        self._hist = (counts, edges)
        self.hist_bars.setOpts(x0=edges[:-1], width=np.diff(edges), height=counts)
        self.hist_plot.setTitle(f"neuron #{self.selected_neuron}: its {values.size} activations over the prompt")
        self.hist_plot.setXRange(float(edges[0]), float(edges[-1]), padding=0.03)
        top = max(1, int(counts.max(initial=0)))
        self.hist_plot.setYRange(0, top, padding=0.05)
        step = max(1, int(np.ceil(top / 6)))
        self.hist_plot.getAxis("left").setTickSpacing(step, step)  # whole tokens only
        self._place_hist_marker()

    def _place_hist_marker(self) -> None:
        if self.selected_neuron is None:
            return
        self.hist_marker.setValue(float(self._view.post[self.token_index(), self.selected_neuron]))

    def _draw_vocab(self) -> None:
        j = self.selected_neuron
        if j is None:
            return
        result = self._vocab_effect(self.trace, self._layer, j)
        self._vocab = result
        self.vocab.setRowCount(0)
        if result is None:
            self.vocab_title.setText(f"What neuron #{j} writes needs the loaded model's weights "
                                     f"(this trace has none).")
            return
        self.vocab_title.setText(f"<b>L{self._layer} neuron #{j}: vocabulary it promotes and suppresses</b>")
        up_ids, up, down_ids, down = result
        self.vocab.setRowCount(max(len(up_ids), len(down_ids)))
        for r, (a, va) in enumerate(zip(up_ids.tolist(), up.tolist())):
            self.vocab.setItem(r, 0, _cell(self._token_text(a)))
            self.vocab.setItem(r, 1, _cell(f"{va:+.4f}", True))
        for r, (b, vb) in enumerate(zip(down_ids.tolist(), down.tolist())):
            self.vocab.setItem(r, 2, _cell(self._token_text(b)))
            self.vocab.setItem(r, 3, _cell(f"{vb:+.4f}", True))

    # --- interaction -----------------------------------------------------------------------------
    def _on_cell_clicked(self, row: int, col: int) -> None:
        if 0 <= col < self._columns.size:
            self.selection.set_token(row)
            self.select_neuron(int(self._columns[col]))

    def _on_ranked_row(self, row: int, _col: int, _prev_row: int, _prev_col: int) -> None:
        if self._filling or not 0 <= row < self._ranked[0].size:
            return
        self.select_neuron(int(self._ranked[0][row]))

    # --- exported data ---------------------------------------------------------------------------
    def _token_labels(self) -> list[str]:
        return token_labels(self.trace.tokens) if self.trace is not None else []

    def _heatmap_data(self) -> tuple[np.ndarray, list[str], list[str]]:
        """The shown [n, K] activations; rows "i:token", columns "#neuron" left to right."""
        if self._view is None:
            return np.zeros((0, 0), np.float32), [], []
        return (np.asarray(self.heatmap.matrix), self._token_labels(),
                [f"#{j}" for j in self._columns.tolist()])

    def _ranked_data(self) -> tuple[np.ndarray, list[str], list[str]]:
        """The selected token's most active neurons [k]: rows "#neuron", one column naming the token."""
        ids, values = self._ranked
        if self._view is None:
            return np.zeros(0, np.float32), [], []
        label = self._token_labels()[self.token_index()]
        return values, [f"#{j}" for j in ids.tolist()], [f"L{self._layer} activation at {label}"]

    def _bars_data(self) -> tuple[np.ndarray, list[str], list[str]]:
        """The selected neuron's activation at every token [n]."""
        if self._view is None or self.selected_neuron is None:
            return np.zeros(0, np.float32), [], []
        return self.bar_values, self._token_labels(), [f"L{self._layer} neuron #{self.selected_neuron}"]

    def _hist_data(self) -> tuple[np.ndarray, list[str], list[str]]:
        """Token counts per activation bin [bins]: rows "[lo, hi)", the last bin closed."""
        counts, edges = self._hist
        if self._view is None or counts.size == 0:
            return np.zeros(0, np.int64), [], []
        rows = [f"[{edges[b]:.6g}, {edges[b + 1]:.6g}{']' if b == counts.size - 1 else ')'}"
                for b in range(counts.size)]
        return counts, rows, [f"tokens, L{self._layer} neuron #{self.selected_neuron}"]

    def _vocab_data(self) -> tuple[np.ndarray, list[str], list[str]]:
        """Promoted then suppressed tokens [2k]: the direct-path logit change per unit of activation."""
        if self._vocab is None:
            return np.zeros(0, np.float32), [], []
        up_ids, up, down_ids, down = self._vocab
        rows = [f"promoted {r + 1}: {i}:{self._token_text(i)}" for r, i in enumerate(up_ids.tolist())]
        rows += [f"suppressed {r + 1}: {i}:{self._token_text(i)}" for r, i in enumerate(down_ids.tolist())]
        return (np.concatenate([up, down]).astype(np.float32), rows,
                [f"direct logit effect per unit activation, L{self._layer} neuron #{self.selected_neuron}"])
