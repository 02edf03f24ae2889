"""FFN neurons: which of a layer's d_ff neurons fire on which token, and what one neuron writes.

* Heatmap: the selected layer's activations ``blocks.{l}.mlp.post`` [tokens x d_ff], one column
  per neuron. "show top K" keeps the K neurons with the largest activation on any token
  (``top_columns``; 0 = all d_ff), arranged in the chosen order (``neuron_order``: index, most
  active, variance). Wheel and drag zoom and pan; the neuron-id ticks follow the visible range.
  Clicking a cell selects its token (shared) and its neuron (this panel's ``selected_neuron``).
* Selected token: its most active neurons as a ranked table (``top_neurons``); a row selects
  that neuron (``detail.py``).
* Selected neuron: its activation at every token (bars), the histogram of those activations, and
  the vocabulary tokens its output direction promotes and suppresses most through the direct path
  (``neuron_vocab_effect``; ``detail.py``).

Everything that scans the whole layer is computed in ``prepare`` on the worker thread, for the layer,
K and neuron of a ``NeuronsSnapshot`` taken on the GUI thread, and kept with ``trace.memo``
(``views.py``); drawing only indexes into it.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QSpinBox, QSplitter, QToolButton, QWidget

from explorer.core.display.labels import token_labels
from explorer.core.trace import Trace
from explorer.core.interventions.spec import Intervention
from explorer.ui.interventions.menu import install_targets
from explorer.ui.interventions.targets import Component, Point, Target
from explorer.ui.panels.base import Panel, PanelSnapshot
from explorer.ui.panels.neurons.snapshot import NeuronsSnapshot, NeuronsView, neurons_view
from explorer.ui.panels.neurons.detail import NeuronDetail, NeuronFocus
from explorer.ui.panels.neurons.views import (
    DEFAULT_TOP_K,
    ORDERS,
    LayerView,
    arranged,
    column_marks,
    layer_of,
    layer_view,
    neuron_for,
    neurons_note,
    switched_off,
    top_ids,
)
from explorer.ui.panels.neurons.widgets import (
    BAR_POSITIVE,
    COLUMN_OUTLINE,
    ROW_OUTLINE,
    NeuronHeatmap,
)
from explorer.ui.session.selection import Selection
from explorer.ui.widgets.plots import fixed_plot, outline
from explorer.ui.widgets.role_bands import trace_bands
from explorer.ui.widgets.steady_label import SteadyLabel

LAYER_NOW_ELEMENTS = 1 << 20  # n × d_ff up to this: a layer switch scans the new layer at once, else in the background
NOT_CAPTURED_NOTE = ("Layer {layer}'s FFN activations were not captured in this trace, and without the model "
                     "they cannot be recomputed.")


class NeuronsPanel(Panel):
    def __init__(self, selection: Selection, parent: QWidget | None = None) -> None:
        super().__init__(selection, parent)
        self.order = "index"
        self.top_k = DEFAULT_TOP_K
        self.selected_neuron: int | None = None
        self._neuron_layer: int | None = None  # the layer selected_neuron belongs to
        self._view: LayerView | None = None
        self._layer = 0
        self._columns = np.zeros(0, dtype=np.int64)
        self._colormap = "viridis"
        self._limits: dict | None = None  # the heatmap view's limits last set
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
        self.info = SteadyLabel()  # wraps instead of widening the panel past its dock; keeps its height
        self.info.setStyleSheet("color: palette(placeholder-text)")
        self.info.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        row.addWidget(self.info, 1)
        self.controls = QWidget()
        self.controls.setLayout(row)
        row.setContentsMargins(0, 0, 0, 0)
        self.body.addWidget(self.controls)

        self.note = QLabel()
        self.note.setWordWrap(True)
        self.note.setStyleSheet("font-size: 14px; padding: 16px")
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

        left = QSplitter(Qt.Orientation.Vertical)
        left.addWidget(self.heatmap)
        left.addWidget(self.bars_plot)
        left.setStretchFactor(0, 3)
        left.setStretchFactor(1, 2)

        self.detail = NeuronDetail(self.bars_plot, self.bars, focus=self._focus, later=self.later,
                                   tokenizer=lambda: self.tokenizer, select_neuron=self.select_neuron)
        d = self.detail  # its widgets, under the panel's names too (tests, exports)
        self.ranked_title, self.ranked, self.hist_plot, self.hist_bars = d.ranked_title, d.ranked, d.hist_plot, d.hist_bars
        self.hist_marker, self.vocab_title, self.vocab, self.vocab_caption = (d.hist_marker, d.vocab_title, d.vocab,
                                                                              d.vocab_caption)
        right = d.column

        self.content = QSplitter(Qt.Orientation.Horizontal)
        self.content.addWidget(left)
        self.content.addWidget(right)
        self.content.setStretchFactor(0, 3)
        self.content.setStretchFactor(1, 2)
        self.body.addWidget(self.content, 1)

    def _register_exports(self) -> None:
        self.add_exportable("neuron activations", self.heatmap, self._heatmap_data)
        self.add_exportable("selected token's top neurons", self.ranked, self.detail.ranked_data)
        self.add_exportable("selected neuron across tokens", self.bars_plot, self.detail.bars_data)
        self.add_exportable("selected neuron histogram", self.hist_plot, self.detail.hist_data)
        self.add_exportable("selected neuron vocabulary effect", self.vocab, self.detail.vocab_data)
        self.detail.evidence.register_exports(self)  # its top examples and histogram over a corpus run
        install_targets(self)  # right-click a column: switch that neuron off (intervention_targets)

    # --- the panel contract ----------------------------------------------------------------------
    def snapshot(self) -> NeuronsSnapshot:
        """The selection, K and the neuron chosen by hand (with its layer), on the GUI thread."""
        return self._snapshot(NeuronsSnapshot, top_k=self.top_k, order=self.order, neuron=self.selected_neuron,
                              neuron_layer=self._neuron_layer)

    def attach(self, session) -> None:  # noqa: ANN001 - the window's Session
        super().attach(session)
        self.detail.attach(session)  # the selected neuron over the session's corpus run

    def needed_keys(self, trace: Trace, snapshot: PanelSnapshot) -> list[str]:
        if neurons_note(trace, snapshot.layer):  # no FFN here (or anywhere)
            return []
        return [f"blocks.{layer_of(trace, snapshot.layer)}.mlp.post"]

    def prepare(self, trace: Trace, snapshot: NeuronsSnapshot) -> NeuronsView:
        """On the worker thread: the snapshot's layer's activations, orderings, levels and top-K
        subset, and the vocabulary effect of the neuron that ``draw`` will select (``neurons_view``)."""
        return neurons_view(trace, snapshot)

    def draw(self, view: NeuronsView) -> None:
        self._draw_layer(view)

    def selection_changed(self, what: str) -> None:
        if what == "layer":
            self._switch_layer()
        elif what == "token" and self._view is not None:
            self._place_outlines()
            self.detail.draw_ranked()
            self.detail.draw_bars()
            self.detail.place_hist_marker()

    def tokenizer_changed(self) -> None:
        if self.trace is not None and self._view is not None:
            self.detail.draw_vocab()

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
        self.detail.mark_ranked_row()
        self.detail.draw_neuron()

    def layer(self) -> int:
        return self._layer

    # --- what a right-click can switch off (explorer.ui.interventions.targets) ---------------------
    def intervention_targets(self) -> list[Target]:
        """A neuron's column of the heatmap (the neuron at every position)."""
        return [Target(self.heatmap.plot, self._column_component, self._column_marks)]

    def _column_component(self, scene_pos: QPointF) -> Component | None:
        cell = self.heatmap.cell_at(scene_pos) if self._view is not None else None
        if cell is None or not 0 <= cell[1] < self._columns.size:
            return None
        return Component.neuron(self._layer, int(self._columns[cell[1]]))

    def _column_marks(self, iv: Intervention) -> list[Point]:
        rows = 0 if self._view is None else self._view.post.shape[0]
        return column_marks(iv, self._layer, self._columns, rows)

    def column_marks(self) -> list[Point]:
        """Where the heatmap draws its red crosses now (down each switched-off neuron's column)."""
        return list(self._intervention_marks[0].points)

    def columns(self) -> np.ndarray:
        """The neuron ids of the heatmap's columns, left to right."""
        return self._columns

    def ranked_neurons(self) -> tuple[np.ndarray, np.ndarray]:
        """The selected token's ranked list as shown: (neuron ids, activations)."""
        return self.detail.ranked_ids

    def vocab_effect(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
        """What the selected neuron's vocabulary table shows (see ``neuron_vocab_effect``)."""
        return self.detail.vocab_result

    @property
    def bar_values(self) -> np.ndarray:
        """The selected neuron's activation at every token, as the bars show it."""
        return self.detail.bar_values

    def _focus(self) -> NeuronFocus | None:
        """What the detail views show now (None: nothing, no FFN or no activations)."""
        if self.trace is None or self._view is None:
            return None
        return NeuronFocus(self.trace, self._view, self._layer, self.selected_token, self.selected_neuron)

    # --- computing (views.py; these read the GUI-thread state) ------------------------------------
    def _layer_of(self, trace: Trace) -> int:
        return layer_of(trace, self.selection.layer)

    def _vocab_size(self) -> int | None:
        return getattr(self.tokenizer, "vocab_size", None) if self.tokenizer is not None else None

    # --- drawing ---------------------------------------------------------------------------------
    def _show_note(self, text: str | None) -> None:
        self.note.setText(text or "")
        self.note.setVisible(text is not None)
        self.content.setVisible(text is None)
        self.controls.setVisible(text is None)

    def _switch_layer(self) -> None:
        """The selected layer: drawn at once when its view is ready or small, else computed in the background
        (levels, order, top K: scans of n × d_ff) while the heatmap says "computing…"."""
        trace = self.trace
        layer = self._layer_of(trace) if trace is not None else 0
        if (trace is None or neurons_note(trace, layer) or trace.memo_get(("neurons.layer", layer)) is not None
                or trace.n_tokens * trace.config.d_ff <= LAYER_NOW_ELEMENTS):
            self._draw_layer()
            return
        snapshot = self.snapshot()
        self._layer, self._view = layer, None  # nothing of the old layer is read until the new one is drawn
        for item in (self.heatmap.image, self.column_outline, self.row_outline):
            item.setVisible(False)
        self.heatmap.plot.setTitle(f"L{layer} neuron activations: computing\u2026")
        self.info.setText(f"L{layer} \u00b7 computing\u2026")
        self.later("layer", lambda _check: neurons_view(trace, snapshot), self._draw_layer)

    def _draw_layer(self, ready: NeuronsView | None = None) -> None:
        trace = self.trace
        if trace is None:
            return
        self._layer = self._layer_of(trace)
        if ready is not None and (ready.trace is not trace or ready.layer != self._layer):
            ready = None  # prepared for another trace or layer
        note = neurons_note(trace, self._layer)
        if note:  # a model without FFNs, a block without one
            self._view = None
            self._clear()
            self._show_note(note)
            self.info.setText("")
            return
        self._view = ready.layer_view if ready is not None else layer_view(trace, self._layer)
        if self._view is None:
            self._clear()
            self._show_note(NOT_CAPTURED_NOTE.format(layer=self._layer))
            return
        self._show_note(None)
        d_ff = self._view.post.shape[1]
        if self.top_k_spin.maximum() != d_ff or self.top_k_spin.value() != min(self.top_k, d_ff):
            self.top_k_spin.blockSignals(True)  # only on a change: setMaximum re-lays out the panel (a repaint of it all)
            self.top_k_spin.setMaximum(d_ff)
            self.top_k_spin.setValue(min(self.top_k, d_ff))
            self.top_k_spin.blockSignals(False)
        neuron = neuron_for(self._view, self._layer, self.selection.token, self.selected_neuron, self._neuron_layer)
        self.selected_neuron, self._neuron_layer = neuron, self._layer
        self.redraw_heatmap()
        self.detail.draw_ranked()
        self.detail.draw_neuron()

    def _clear(self) -> None:
        self._columns = np.zeros(0, dtype=np.int64)
        self.selected_neuron = None
        self.detail.clear()
        self.heatmap.set_data(np.zeros((0, 0), np.float32))
        self.column_outline.setVisible(False)
        self.row_outline.setVisible(False)

    def shown_columns(self) -> np.ndarray:
        """The columns for the current order and K (ids, left to right), switched-off neurons kept."""
        view = self._view
        active = self.interventions.active() if self.interventions is not None else ()
        return arranged(view, top_ids(self.trace, self._layer, view, self.top_k), self.order,
                        switched_off(active, self._layer, view.post.shape[1]))

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
        limits = dict(xMin=0, xMax=max(cols, 1), yMin=0, yMax=max(rows, 1),
                      minXRange=min(4, max(cols, 1)), minYRange=min(2, max(rows, 1)))
        if limits != self._limits:  # the same shape again (a layer switch): pyqtgraph's update of the view skipped
            self._limits = limits
            self.heatmap.plot.vb.setLimits(**limits)
        self.heatmap.set_data(matrix, list(self.trace.tokens), labels, levels=view.levels, value_name="activation")
        self.heatmap.set_token_bands(rows=trace_bands(self.trace))  # a conversation's roles along the tokens
        self.heatmap.image.setVisible(True)
        d_ff = view.post.shape[1]
        shown = "all" if cols == d_ff else f"the {cols} most active of"
        act = f"{'gated ' if cfg.gated_ffn else ''}{cfg.activation}"
        self.heatmap.plot.setTitle(f"L{self._layer} neuron activations after {act}: {shown} {d_ff}, "
                                   f"ordered by {ORDERS[self.order]}")
        self.info.setText(f"L{self._layer} \u00b7 d_ff = {d_ff} \u00b7 {self.trace.n_tokens} tokens")
        self._place_outlines()
        self.refresh_marks()  # the columns moved: the crosses follow

    def _reset_zoom(self) -> None:
        rows, cols = self.heatmap.matrix.shape
        self.heatmap.plot.setRange(xRange=(0, max(cols, 1)), yRange=(0, max(rows, 1)), padding=0)

    def _place_outlines(self) -> None:
        if self._view is None:
            return
        rows, cols = self.heatmap.matrix.shape
        i = self.selected_token
        self.row_outline.setRect(QRectF(0, i, cols, 1))
        self.row_outline.setVisible(cols > 0)
        where = np.flatnonzero(self._columns == self.selected_neuron) if self.selected_neuron is not None else []
        self.column_outline.setVisible(len(where) > 0)
        if len(where):
            self.column_outline.setRect(QRectF(int(where[0]), 0, 1, rows))

    # --- interaction -----------------------------------------------------------------------------
    def _on_cell_clicked(self, row: int, col: int) -> None:
        if 0 <= col < self._columns.size:
            self.selection.set_token(row)
            self.select_neuron(int(self._columns[col]))

    def _heatmap_data(self) -> tuple[np.ndarray, list[str], list[str]]:
        """The shown [n, K] activations; rows "i:token", columns "#neuron" left to right."""
        if self._view is None:
            return np.zeros((0, 0), np.float32), [], []
        return (np.asarray(self.heatmap.matrix), token_labels(self.trace.tokens),
                [f"#{j}" for j in self._columns.tolist()])
