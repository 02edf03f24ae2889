"""Embeddings & positions: the token rows, the position rows, their sum entering block 0, how
similar the prompt's vectors are to each other, and which vocabulary entries lie nearest."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QPen
from PySide6.QtWidgets import (QComboBox, QGraphicsRectItem, QHBoxLayout, QLabel, QLineEdit, QSplitter,
                               QHeaderView, QTableWidget, QVBoxLayout, QWidget)

from explorer.core.display.labels import token_labels
from explorer.core.display.levels import finite_levels
from explorer.core.display.tokens import quoted
from explorer.core.trace import Trace
from explorer.core.analysis.vectors import (cosine_similarity_matrix, nearest_vocab_neighbours, parse_dimensions,
                                            pooled_cosine_similarity,
                                   sinusoid_curves)
from explorer.ui.panels.base import Panel, PanelSnapshot, PanelView
from explorer.ui.session.selection import Selection
from explorer.ui.widgets.axis import readable, thin_axes
from explorer.ui.widgets.heatmap import Heatmap
from explorer.ui.widgets.role_bands import trace_bands
from explorer.ui.widgets.steady_label import SteadyLabel
from explorer.ui.widgets.table_cells import fix_widths, set_rows

N_NEIGHBOURS = 10
COSINE_WHOLE = 1024  # longer prompts: the [n, n] cosine map mean-pooled to COSINE_PIXELS a side
COSINE_PIXELS = 512
NEIGHBOURS_NOW_MACS = 2**22  # V x d under this: neighbours at once; else progressively (explorer.ui.session.progressive)
NO_POSITIONS_NOTE = {
    "rotary": "Rotary positions rotate Q and K inside attention; nothing is added here.",
    "none": "This model has no positional information: nothing is added here, "
            "so the order of the tokens is invisible except through the causal mask.",
    "alibi": "ALiBi: nothing is added here; each attention head penalises its scores by its slope "
             "times the distance between query and key (see the attention panel's scores).",
}
SPACES = ("token embeddings", "positions", "sum (enters block 0)")
CURVE_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf")


def _title(text: str) -> QLabel:
    label = QLabel(f"<b>{text}</b>")
    label.setTextFormat(Qt.TextFormat.RichText)
    return label


@dataclass(frozen=True)
class EmbeddingsSnapshot(PanelSnapshot):
    space: str = "sum"  # the vectors the cosine map compares: "embed", "pos" or "sum"


@dataclass(frozen=True)
class EmbeddingsView(PanelView):
    """What the panel draws of one trace: labels, vectors, one colour range, the chosen cosine map."""

    labels: tuple[str, ...] = ()
    vectors: Mapping[str, np.ndarray] = field(default_factory=dict)  # "embed", "sum" and (if any) "pos"
    levels: tuple[float, float] = (-1.0, 1.0)
    space: str = "sum"  # the cosine map's vectors
    cosine: np.ndarray | None = None


def _vectors_of(trace: Trace) -> dict[str, np.ndarray]:
    """The token, position and summed vectors [n, d] (float32) as the panel draws them."""
    embed = np.asarray(trace["embed"], dtype=np.float32)
    has_pos = "pos_embed" in trace
    total = np.asarray(trace["blocks.0.resid_pre"], dtype=np.float32) if "blocks.0.resid_pre" in trace \
        else embed + (trace["pos_embed"] if has_pos else 0)
    vectors = {"embed": embed, "sum": total}
    if has_pos:
        vectors["pos"] = np.asarray(trace["pos_embed"], dtype=np.float32)
    return vectors


def _levels_of(trace: Trace, vectors: dict[str, np.ndarray]) -> tuple[float, float]:
    """One symmetric colour range for the three maps (kept with the trace)."""
    def compute() -> tuple[float, float]:
        m = max(max(abs(lo), abs(hi)) for lo, hi in (finite_levels(v, symmetric=True) for v in vectors.values()))
        return -m, m
    return trace.memo(("embeddings.levels",), compute)


def _cosine_of(trace: Trace, vectors: dict[str, np.ndarray], key: str) -> np.ndarray:
    """The [n, n] cosine map; above ``COSINE_WHOLE`` tokens mean-pooled to ``COSINE_PIXELS`` a side,
    computed a block of rows at a time (``pooled_cosine_similarity``)."""
    if trace.n_tokens > COSINE_WHOLE:
        return trace.memo(("embeddings.cosine", key, COSINE_PIXELS),
                          lambda: pooled_cosine_similarity(vectors[key], COSINE_PIXELS)[0])
    return trace.memo(("embeddings.cosine", key), lambda: cosine_similarity_matrix(vectors[key]))


def pooled_labels(labels: list[str], rows: int) -> tuple[list[str], int]:
    """Labels of a map pooled to ``rows`` rows (token ranges) and its tokens per row."""
    f = max(1, -(-len(labels) // max(rows, 1)))
    if f == 1:
        return labels, 1
    n = len(labels)
    return [f"tokens {i}\u2013{min(n, i + f) - 1}" for i in range(0, n, f)], f


class EmbeddingsPanel(Panel):
    def __init__(self, selection: Selection, parent: QWidget | None = None) -> None:
        super().__init__(selection, parent)
        self._display: Callable[[int], str] | None = None
        self._vectors: dict[str, np.ndarray] = {}
        self._view: EmbeddingsView | None = None  # what draw() drew last
        self._labels: list[str] = []
        self._markers: dict[int, QGraphicsRectItem] = {}

        self.embed_map = Heatmap(colormap="CET-D1", symmetric=True, title="token embeddings W_E[token]")
        self.pos_map = Heatmap(colormap="CET-D1", symmetric=True, title="positional vectors")
        self.sum_map = Heatmap(colormap="CET-D1", symmetric=True, title="sum: what enters block 0")
        self.pos_note = QLabel()
        self.pos_note.setWordWrap(True)
        self.pos_note.setVisible(False)
        left = QWidget()
        column = QVBoxLayout(left)
        column.setContentsMargins(0, 0, 0, 0)
        column.addWidget(self.embed_map, 1)
        column.addWidget(self.pos_map, 1)
        column.addWidget(self.pos_note)
        column.addWidget(self.sum_map, 1)

        self.space_combo = QComboBox()
        self.space_combo.addItems(SPACES)
        self.space_combo.setCurrentIndex(0)
        self.cosine_map = Heatmap(colormap="CET-D1", symmetric=True, title="cosine similarity between tokens")
        self.cosine_map.plot.setAspectLocked(True)
        self.neighbours_title = SteadyLabel()  # its text follows the token: it wraps, never resizes the map
        self.neighbours = QTableWidget(0, 3)
        self.neighbours.setHorizontalHeaderLabels(["token", "id", "cosine"])
        self.neighbours.verticalHeader().setVisible(True)
        self.neighbours.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.neighbours.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        fix_widths(self.neighbours, (1, 2), "-0.00000")  # a token switch re-measures nothing (cells set in place)

        self.curves_box = QWidget()
        curves = QVBoxLayout(self.curves_box)
        curves.setContentsMargins(0, 0, 0, 0)
        dims_row = QHBoxLayout()
        dims_row.addWidget(QLabel("sinusoid dimensions:"))
        self.dims_edit = QLineEdit()
        self.dims_edit.setPlaceholderText("e.g. 0, 1, 8, 9")
        self.dims_edit.setToolTip("Dimensions to plot over positions 0 … n_ctx−1, separated by commas "
                                  "(ranges like 4-7 work); at most 8")
        dims_row.addWidget(self.dims_edit, 1)
        curves.addLayout(dims_row)
        self.curves_plot = pg.PlotWidget(title="sinusoidal positions: value of a dimension by position",
                                        axisItems=thin_axes())
        readable(self.curves_plot)
        self.curves_plot.setLabel("bottom", "position")
        self.curves_plot.addLegend(offset=(-10, 10))
        curves.addWidget(self.curves_plot, 1)
        self.curves_box.setVisible(False)

        right = QWidget()
        side = QVBoxLayout(right)
        side.setContentsMargins(0, 0, 0, 0)
        combo_row = QHBoxLayout()
        combo_row.addWidget(QLabel("similarity of:"))
        combo_row.addWidget(self.space_combo, 1)
        side.addLayout(combo_row)
        side.addWidget(self.cosine_map, 3)
        side.addWidget(self.neighbours_title)
        side.addWidget(self.neighbours, 2)
        side.addWidget(self.curves_box, 2)

        splitter = QSplitter(Qt.Orientation.Horizontal)
        splitter.addWidget(left)
        splitter.addWidget(right)
        splitter.setStretchFactor(0, 3)
        splitter.setStretchFactor(1, 2)
        self.body.addWidget(splitter)

        self.add_exportable("token_embeddings", self.embed_map, lambda: self._matrix_data("embed"))
        self.add_exportable("positions", self.pos_map, lambda: self._matrix_data("pos"))
        self.add_exportable("embedding_sum", self.sum_map, lambda: self._matrix_data("sum"))
        self.add_exportable("cosine_similarity", self.cosine_map,
                            lambda: (self.cosine_map.matrix, self._labels, self._labels))
        self.add_exportable("nearest_neighbours", self.neighbours, self._neighbour_data)
        self.add_exportable("position_curves", self.curves_plot, self._curve_data)

        for heatmap in (self.embed_map, self.pos_map, self.sum_map, self.cosine_map):
            heatmap.cell_clicked.connect(lambda row, _col, h=heatmap: self.selection.set_token(
                row * (pooled_labels(self._labels, h.matrix.shape[0])[1] if h is self.cosine_map else 1)))
        self.space_combo.currentIndexChanged.connect(lambda _i: self._draw_cosine())
        self.dims_edit.editingFinished.connect(self._draw_curves)
        self._neighbour_rows: tuple[np.ndarray, np.ndarray, list[str]] = (np.zeros(0), np.zeros(0), [])

    # --- wiring ----------------------------------------------------------------------------------
    def set_vocabulary_display(self, fn: Callable[[int], str] | None) -> None:
        """How to show a vocabulary id (the tokenizer's display string); "#id" without one."""
        self._display = fn
        if self.trace is not None:
            self._draw_neighbours()

    def tokenizer_changed(self) -> None:
        if self.trace is not None:
            self._draw_neighbours()

    def _token_text(self, token_id: int) -> str:
        display = self._display
        if display is None and getattr(self, "tokenizer", None) is not None:
            display = self.tokenizer.display
        if display is None:
            return f"#{token_id}"
        try:
            return display(int(token_id))
        except Exception:  # an id the tokenizer cannot show (e.g. padded vocabulary rows)
            return f"#{token_id}"

    # --- drawing ---------------------------------------------------------------------------------
    def snapshot(self) -> EmbeddingsSnapshot:
        return self._snapshot(EmbeddingsSnapshot, space=self._space_key())

    def prepare(self, trace: Trace, snapshot: PanelSnapshot) -> EmbeddingsView:
        """On the worker: the vectors, the colour range and the cosine map of the chosen vectors."""
        super().prepare(trace, snapshot)
        vectors = _vectors_of(trace)
        key = getattr(snapshot, "space", "sum")
        return EmbeddingsView(trace, tuple(token_labels(trace.tokens)), vectors, _levels_of(trace, vectors), key,
                              _cosine_of(trace, vectors, key) if key in vectors else None)

    def draw(self, view: EmbeddingsView) -> None:
        trace = view.trace
        cfg = trace.config
        self._labels = list(view.labels)
        self._vectors = dict(view.vectors)
        self._view = view
        embed, total = self._vectors["embed"], self._vectors["sum"]
        has_pos = "pos" in self._vectors
        levels = view.levels
        dims = [f"d{j}" for j in range(embed.shape[1])]
        self.embed_map.set_data(embed, self._labels, dims, levels=levels, value_name="value")
        self.sum_map.set_data(total, self._labels, dims, levels=levels, value_name="value")
        for heatmap in (self.embed_map, self.sum_map, self.pos_map):  # a conversation's roles along the tokens
            heatmap.set_token_bands(rows=trace_bands(trace))
        if has_pos:
            self.pos_map.set_data(self._vectors["pos"], self._labels, dims, levels=levels, value_name="value")
            self.pos_map.plot.setTitle(f"{cfg.positions} positional vectors")
            self.sum_map.plot.setTitle("sum = token + position: what enters block 0")
        else:
            self.pos_map.set_data(np.zeros((0, 0), np.float32))
            scaled = f" \u00d7 {cfg.embed_scale:.4g}" if cfg.embed_scale != 1.0 else ""  # Gemma: sqrt(d)
            if cfg.embed_norm:  # BLOOM
                self.sum_map.plot.setTitle("what enters block 0 (the token embeddings after a LayerNorm)")
            else:
                self.sum_map.plot.setTitle(f"what enters block 0 (= the token embeddings{scaled})" if scaled
                                           else "what enters block 0 (= the token embeddings: no positions added)")
        self.pos_map.setVisible(has_pos)
        self.pos_note.setText(NO_POSITIONS_NOTE.get("alibi" if cfg.alibi else cfg.positions, ""))
        self.pos_note.setVisible(not has_pos)

        self.space_combo.blockSignals(True)
        current = self.space_combo.currentText()
        self.space_combo.clear()
        self.space_combo.addItems([s for s in SPACES if has_pos or s != "positions"])
        self.space_combo.setCurrentIndex(max(0, self.space_combo.findText(current)))
        self.space_combo.blockSignals(False)
        self._draw_cosine()

        sinusoidal = cfg.positions == "sinusoidal"
        self.curves_box.setVisible(sinusoidal)
        if sinusoidal:
            if not parse_dimensions(self.dims_edit.text(), cfg.d_model):
                d = cfg.d_model
                self.dims_edit.setText(", ".join(str(x) for x in sorted({0, 1, 2 * (d // 8), 2 * (d // 4)})))
            self._draw_curves()
        self.selection_changed("token")

    def _space_key(self) -> str:
        return {"token embeddings": "embed", "positions": "pos"}.get(self.space_combo.currentText(), "sum")

    def _draw_cosine(self) -> None:
        if not self._vectors:
            return
        key = self._space_key()
        view = self._view
        ready = view.cosine if view is not None and view.trace is self.trace and view.space == key else None
        matrix = ready if ready is not None else _cosine_of(self.trace, self._vectors, key)
        labels, f = pooled_labels(self._labels, matrix.shape[0])
        self.cosine_map.plot.setTitle(f"cosine similarity between tokens: {self.space_combo.currentText()}"
                                      + (f" (mean over {f}\u00d7{f}-token blocks)" if f > 1 else ""))
        self.cosine_map.set_data(matrix, labels, labels, levels=(-1.0, 1.0),
                                 value_name="mean cosine" if f > 1 else "cosine")
        bands = trace_bands(self.trace) if f == 1 else ()  # (pooled blocks: no token axis)
        self.cosine_map.set_token_bands(bands, bands)
        self._mark_selected()

    def _draw_curves(self) -> None:
        if self.trace is None or self.trace.config.positions != "sinusoidal":
            return
        cfg = self.trace.config
        dims = parse_dimensions(self.dims_edit.text(), cfg.d_model)
        self.curves_plot.clear()
        positions = np.arange(cfg.n_ctx)
        values = sinusoid_curves(positions, dims, cfg.d_model)
        for k, dim in enumerate(dims):
            pen = pg.mkPen(CURVE_COLOURS[k % len(CURVE_COLOURS)], width=2)
            self.curves_plot.plot(positions, values[:, k], pen=pen,
                                  name=f"dim {dim} ({'sin' if dim % 2 == 0 else 'cos'})")
        prompt = pg.LinearRegionItem((0, self.trace.n_tokens - 1), movable=False, brush=(120, 120, 120, 40))
        self.curves_plot.addItem(prompt)
        self._curves = (values, [str(p) for p in positions], [f"dim {d}" for d in dims])

    def selection_changed(self, what: str) -> None:
        if what == "token":
            self._mark_selected()
            self._draw_neighbours()

    def _mark_selected(self) -> None:
        """A thin outline around the selected token's row in each heatmap."""
        row = self.selected_token
        for heatmap in (self.embed_map, self.pos_map, self.sum_map, self.cosine_map):
            marker = self._markers.get(id(heatmap))
            if marker is None:
                marker = QGraphicsRectItem()
                pen = QPen(Qt.GlobalColor.black, 2)
                pen.setCosmetic(True)
                marker.setPen(pen)
                marker.setZValue(20)
                heatmap.plot.addItem(marker)
                self._markers[id(heatmap)] = marker
            cols = heatmap.matrix.shape[1] if heatmap.matrix.ndim == 2 else 0
            f = pooled_labels(self._labels, heatmap.matrix.shape[0])[1] if heatmap is self.cosine_map else 1
            marker.setVisible(cols > 0 and row // f < heatmap.matrix.shape[0])
            marker.setRect(0, row // f, cols, 1)

    def _draw_neighbours(self) -> None:
        if self.trace is None:
            return
        index = self.selected_token
        label = self._labels[index]
        cfg, trace = self.trace.config, self.trace
        if cfg.vocab_size * cfg.d_model > NEIGHBOURS_NOW_MACS:  # a real vocabulary: in the background
            set_rows(self.neighbours, [("", "", "")] * self.neighbours.rowCount())  # blank, never another token's
            self.neighbours_title.setText(f"<b>Nearest vocabulary neighbours of {quoted(label)}</b>: computing\u2026")
            self.later(("neighbours",), lambda check: nearest_vocab_neighbours(trace, index, N_NEIGHBOURS),
                       lambda result: self._show_neighbours(index, result) if self.selected_token == index else None)
            return
        self._show_neighbours(index, nearest_vocab_neighbours(trace, index, N_NEIGHBOURS))

    def _show_neighbours(self, index: int, result: tuple[np.ndarray, np.ndarray] | None) -> None:
        label = self._labels[index]
        if result is None:
            self.neighbours.setRowCount(0)
            self.neighbours_title.setText("Nearest vocabulary neighbours need the loaded model's W_E.")
            self._neighbour_rows = (np.zeros(0, np.int64), np.zeros(0, np.float32), [])
            return
        ids, cosines = result
        texts = [self._token_text(i) for i in ids]
        self._neighbour_rows = (ids, cosines, texts)
        self.neighbours_title.setText(f"<b>Nearest vocabulary neighbours of {quoted(label)}</b> "
                                      f"(cosine between rows of W_E)")
        rows = [(text if text == f"#{token_id}" else quoted(text, 40),  # the glyphs every panel uses
                 str(int(token_id)), f"{cosine:.4f}") for token_id, cosine, text in zip(ids, cosines, texts)]
        set_rows(self.neighbours, rows, numbers=(1, 2))  # the same rows and items: texts set, no re-layout

    # --- data behind the exports -----------------------------------------------------------------
    def neighbour_rows(self) -> list[tuple[int, str, float]]:
        """The neighbours shown: (vocabulary id, display text, cosine), best first."""
        ids, cosines, texts = self._neighbour_rows
        return [(int(i), t, float(c)) for i, t, c in zip(ids, texts, cosines)]

    def _matrix_data(self, key: str) -> tuple[np.ndarray, list[str], list[str]]:
        matrix = self._vectors.get(key, np.zeros((0, 0), np.float32))
        return matrix, self._labels, [f"d{j}" for j in range(matrix.shape[1] if matrix.ndim == 2 else 0)]

    def _neighbour_data(self) -> tuple[np.ndarray, list[str], list[str]]:
        ids, cosines, texts = self._neighbour_rows
        return np.asarray(cosines, np.float32), [f"{i}:{t}" for i, t in zip(ids, texts)], ["cosine"]

    def _curve_data(self) -> tuple[np.ndarray, list[str], list[str]]:
        return getattr(self, "_curves", (np.zeros((0, 0), np.float32), [], []))
