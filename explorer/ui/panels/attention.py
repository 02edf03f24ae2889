"""The attention panel: every head at a glance, one head in detail, one query row as bars.

* Overview: the patterns of all layers x heads tiled into ONE ImageItem (rows = layers, columns =
  heads, see ``explorer.core.display.mosaic``; long prompts are block-averaged there). The selected head
  is outlined; clicking a tile selects that head. "Statistics" adds an L x H heatmap of one head
  statistic (``explorer.core.analysis.attention``) below it.
* Detail: the selected head's exact pattern (softmax, sequential colours) or scaled scores
  (q.k/sqrt(d_head), diverging colours, symmetric levels), queries as rows and keys as columns;
  masked future positions are hatched grey, not a colour. Clicking a row selects that query token.
* Row: the selected query token's row as bars over the key tokens (the last token when no token
  is selected).
"""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, QRectF, Qt, QTimer
from PySide6.QtGui import QCursor
from PySide6.QtWidgets import (QButtonGroup, QCheckBox, QComboBox, QHBoxLayout, QLabel,
                               QSplitter, QToolButton, QToolTip, QVBoxLayout, QWidget)

from explorer.core.analysis import attention as analysis
from explorer.core.export import token_labels
from explorer.core.display.levels import abbreviate, finite_levels, thinned_ticks
from explorer.core.display.mosaic import MosaicGeometry, tile_heads
from explorer.core.trace import Trace
from explorer.ui.panels.base import Panel
from explorer.ui.selection import Selection
from explorer.ui.widgets.heatmap import Heatmap, format_value
from explorer.ui.widgets.plots import fixed_plot, outline

KINDS = {"pattern": ("pattern", "viridis", False), "scores": ("scaled score", "CET-D1", True)}
MAX_TILE = 64  # overview tile side in pixels; longer prompts are block-averaged (exact in the detail)
LAYER_PATTERN_BUDGET = 64 * 2**20  # bytes of all layers' [H, n, n] patterns worth precomputing in the worker
OUTLINE = pg.mkPen("#ff2d55", width=2.5, cosmetic=True)
QUERY_OUTLINE = pg.mkPen("#ff2d55", width=1.5, cosmetic=True, style=Qt.PenStyle.DashLine)
BAR_PATTERN = pg.mkBrush("#2a788e")  # viridis' middle
BAR_POSITIVE, BAR_NEGATIVE = pg.mkBrush("#c0392b"), pg.mkBrush("#3b6fb6")  # the red and blue ends of CET-D1
STAT_LABELS_MAX = 16  # write each head's value into its cell while there are at most this many layers and heads


def quoted(token: str) -> str:
    return "'" + abbreviate(token, 24) + "'"


def statistic_levels(name: str, values: np.ndarray, n_tokens: int) -> tuple[float, float]:
    """Fixed, meaningful colour levels for a head statistic, so that a random model's tiny
    differences do not look like structure: weights in [0, 1]; entropy in [0, ln n] (its maximum)."""
    if name == "entropy":
        top = max(math.log(max(n_tokens, 2)), float(np.nanmax(values)) if np.isfinite(values).any() else 0.0)
        return 0.0, top
    return 0.0, 1.0


def layer_patterns_fit(trace: Trace) -> bool:
    """Whether every layer's [H, n, n] pattern together is small enough to precompute and cache."""
    cfg, n = trace.config, trace.n_tokens
    return cfg.n_layers * cfg.n_heads * n * n * 4 <= LAYER_PATTERN_BUDGET


class AttentionHeatmap(Heatmap):
    """The detail heatmap, with tooltips in terms of query and key tokens."""

    def cell_text(self, row: int, col: int) -> str:
        rows, cols = self.row_labels, self.col_labels
        where = f"query {quoted(rows[row])} ({row}) \u2192 key {quoted(cols[col])} ({col})"
        if self.masked[row, col]:
            return f"{where}: masked (future token)"
        return f"{where}: {self.value_name} {format_value(self.matrix[row, col])}"

    def set_colormap(self, name: str, symmetric: bool) -> None:
        self.colormap = pg.colormap.get(name)
        self.symmetric = symmetric
        self.colorbar.setColorMap(self.colormap)


class StatisticHeatmap(Heatmap):
    """The L x H table of one head statistic, with "L0 H1: name value" tooltips."""

    def cell_text(self, row: int, col: int) -> str:
        value = self.matrix[row, col]
        shown = format_value(value) if math.isfinite(value) else "undefined (no repeated tokens)"
        return f"{self.row_labels[row]} {self.col_labels[col]}: {self.value_name} {shown}"


class AttentionPanel(Panel):
    title = "Attention"
    explanation = "attention"

    def __init__(self, selection: Selection, parent: QWidget | None = None) -> None:
        super().__init__(selection, parent)
        self.kind = "pattern"
        self.statistic = "induction"
        self.geometry: MosaicGeometry | None = None
        self.mosaic = np.zeros((0, 0), dtype=np.float32)
        self._statistics: dict[str, np.ndarray] = {}
        self._head_cache: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}  # current trace only
        self._detail_timer = QTimer(self)  # coalesces "layer" + "head" into one redraw
        self._detail_timer.setSingleShot(True)
        self._detail_timer.setInterval(0)
        self._detail_timer.timeout.connect(self._draw_detail)
        self._build_controls()
        self._build_overview()
        self._build_detail()
        splitter = QSplitter(Qt.Orientation.Horizontal)
        splitter.addWidget(self._overview_column)
        splitter.addWidget(self._detail_column)
        splitter.setStretchFactor(0, 2)
        splitter.setStretchFactor(1, 3)
        self.body.addWidget(splitter, 1)
        self._register_exports()

    # --- building --------------------------------------------------------------------------------
    def _build_controls(self) -> None:
        row = QHBoxLayout()
        row.addWidget(QLabel("Detail:"))
        self._kind_group = QButtonGroup(self)
        self.kind_buttons: dict[str, QToolButton] = {}
        for kind, text, tip in (("pattern", "pattern", "softmax weights: each row sums to 1"),
                                ("scores", "scores",
                                 "q\u00b7k / \u221ad_head before the softmax; masked cells hatched")):
            button = QToolButton()
            button.setText(text)
            button.setToolTip(tip)
            button.setCheckable(True)
            self._kind_group.addButton(button)
            self.kind_buttons[kind] = button
            button.clicked.connect(lambda _=False, k=kind: self.set_kind(k))
            row.addWidget(button)
        self.kind_buttons["pattern"].setChecked(True)
        row.addSpacing(16)
        self.stats_toggle = QCheckBox("Statistics")
        self.stats_toggle.setToolTip("colour every head by one statistic of its pattern")
        self.stats_toggle.toggled.connect(self.show_statistics)
        self._statistics_on = False  # mirrors the toggle for prepare(), which runs off the GUI thread
        row.addWidget(self.stats_toggle)
        self.stat_box = QComboBox()
        for name, label in analysis.STATISTIC_LABELS.items():
            self.stat_box.addItem(label, name)
        self.stat_box.setCurrentIndex(self.stat_box.findData(self.statistic))
        self.stat_box.setEnabled(False)
        self.stat_box.currentIndexChanged.connect(lambda _: self.set_statistic(self.stat_box.currentData()))
        row.addWidget(self.stat_box)
        row.addStretch(1)
        self.info = QLabel()
        self.info.setStyleSheet("color: #555")
        row.addWidget(self.info)
        self.body.addLayout(row)

    def _build_overview(self) -> None:
        self.overview = pg.GraphicsLayoutWidget()
        self.overview_plot: pg.PlotItem = self.overview.addPlot(row=0, col=0, title="all heads")
        plot = self.overview_plot
        plot.invertY(True)
        plot.setAspectLocked(True)
        plot.hideButtons()
        plot.setMouseEnabled(x=False, y=False)
        plot.showAxis("top")
        plot.hideAxis("bottom")
        self.overview_image = pg.ImageItem(axisOrder="row-major")
        plot.addItem(self.overview_image)
        self.selected_outline = outline(plot, OUTLINE, z=10)
        self.overview_colorbar = pg.ColorBarItem(colorMap="viridis", width=12, interactive=False,
                                                 colorMapMenu=False)
        self.overview_colorbar.setImageItem(self.overview_image)
        self.overview.addItem(self.overview_colorbar, row=0, col=1)
        self._overview_hover = pg.SignalProxy(self.overview.scene().sigMouseMoved, rateLimit=30,
                                              slot=self._on_overview_hover)
        self.overview.scene().sigMouseClicked.connect(self._on_overview_clicked)

        self.statistics = StatisticHeatmap(colormap="viridis")
        self.statistics.cell_clicked.connect(self.selection.set_layer_head)
        self.statistics_outline = outline(self.statistics.plot, OUTLINE)
        self.statistics.setVisible(False)
        self.statistic_texts: list[pg.TextItem] = []

        self._overview_column = QSplitter(Qt.Orientation.Vertical)
        self._overview_column.addWidget(self.overview)
        self._overview_column.addWidget(self.statistics)
        self._overview_column.setStretchFactor(0, 3)
        self._overview_column.setStretchFactor(1, 2)

    def _build_detail(self) -> None:
        self.detail = AttentionHeatmap(colormap="viridis")
        self.detail.cell_clicked.connect(lambda row, _col: self.selection.set_token(row))
        self.query_outline = outline(self.detail.plot, QUERY_OUTLINE)

        self.row_plot = fixed_plot()
        self.row_bars = pg.BarGraphItem(x=[], height=[], width=0.8, brush=BAR_PATTERN, pen=None)
        self.row_plot.addItem(self.row_bars)
        self.row_values = np.zeros(0, dtype=np.float32)

        column = QWidget()
        layout = QVBoxLayout(column)
        layout.setContentsMargins(0, 0, 0, 0)
        splitter = QSplitter(Qt.Orientation.Vertical)
        splitter.addWidget(self.detail)
        splitter.addWidget(self.row_plot)
        splitter.setStretchFactor(0, 3)
        splitter.setStretchFactor(1, 1)
        layout.addWidget(splitter)
        self._detail_column = column

    def _register_exports(self) -> None:
        self.add_exportable("attention, all heads", self.overview, self._overview_data)
        self.add_exportable("attention, selected head", self.detail, self._detail_data)
        self.add_exportable("attention, selected query row", self.row_plot, self._row_data)
        self.add_exportable("head statistics", self.statistics, self._statistics_data)

    # --- the panel contract ----------------------------------------------------------------------
    def needed_keys(self, trace: Trace) -> list[str]:
        """Every layer's [H, n, n] pattern when they fit ``LAYER_PATTERN_BUDGET`` (one batched
        computation per layer, done by the worker); otherwise nothing: long prompts are drawn head
        by head from the stored q and k, and each tile is downsampled at once."""
        if not layer_patterns_fit(trace):
            return []
        return [f"blocks.{layer}.attn.pattern" for layer in range(trace.config.n_layers)]

    def prepare(self, trace: Trace) -> None:
        """On the worker thread: the patterns (when they fit), the mosaic and, if shown, the statistic."""
        super().prepare(trace)
        self._mosaic(trace)
        if self._statistics_on:
            self._statistic(trace, self.statistic)

    def _mosaic(self, trace: Trace) -> tuple[np.ndarray, MosaicGeometry]:
        cfg = trace.config
        return trace.memo(("attention.mosaic", MAX_TILE), lambda: tile_heads(
            self._head_source(trace), max_tile=MAX_TILE, n_layers=cfg.n_layers, n_heads=cfg.n_heads))

    @staticmethod
    def _statistic(trace: Trace, name: str) -> np.ndarray:
        return trace.memo(("attention.statistic", name), lambda: analysis.head_statistics(trace, name))

    def show_trace(self, trace: Trace) -> None:
        self._statistics = {}
        self._head_cache = {}
        self._draw_overview()
        self._draw_statistics()
        self._draw_detail()

    def selection_changed(self, what: str) -> None:
        if what in ("layer", "head"):
            self._place_outlines()
            # set_layer_head emits "layer" then "head": draw the new head once, when both are set
            self._detail_timer.start()
        elif what == "token" and not self._detail_timer.isActive():
            self._draw_query_row()

    @property
    def redraw_pending(self) -> bool:
        """Whether a new head's detail view is waiting for the event loop (see ``selection_changed``)."""
        return self._detail_timer.isActive()

    # --- public controls -------------------------------------------------------------------------
    def set_kind(self, kind: str) -> None:
        """Show the selected head's "pattern" or "scores" in the detail view."""
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}")
        self.kind_buttons[kind].setChecked(True)
        if kind != self.kind:
            self.kind = kind
            if self.trace is not None:
                self._draw_detail()

    def show_statistics(self, on: bool) -> None:
        """Show or hide the L x H heatmap of the chosen head statistic."""
        if self.stats_toggle.isChecked() != on:
            self.stats_toggle.setChecked(on)  # re-enters through the toggled signal
            return
        self._statistics_on = on
        self.stat_box.setEnabled(on)
        self.statistics.setVisible(on)
        self._draw_statistics()

    def set_statistic(self, name: str) -> None:
        """Choose the head statistic (a key of ``analysis.STATISTICS``)."""
        if name not in analysis.STATISTICS:
            raise ValueError(f"unknown head statistic {name!r}")
        self.statistic = name
        index = self.stat_box.findData(name)
        if self.stat_box.currentIndex() != index:
            self.stat_box.setCurrentIndex(index)  # re-enters through currentIndexChanged
            return
        self._draw_statistics()

    def statistic_values(self, name: str | None = None) -> np.ndarray:
        """The [L, H] values of a head statistic for the current trace (computed once per trace)."""
        name = name or self.statistic
        if name not in self._statistics:
            self._statistics[name] = self._statistic(self.trace, name)
        return self._statistics[name]

    def query_row(self) -> int:
        """The query token whose row is drawn as bars: the selected token, else the last one."""
        n = self.trace.n_tokens
        token = self.selection.token
        return n - 1 if token is None else min(max(token, 0), n - 1)

    def layer_head(self) -> tuple[int, int]:
        """The selected (layer, head), kept inside the current trace's ranges."""
        cfg = self.trace.config
        return min(self.selection.layer, cfg.n_layers - 1), min(self.selection.head, cfg.n_heads - 1)

    def head_at_scene(self, scene_pos: QPointF) -> tuple[int, int] | None:
        """(layer, head) of the overview tile under a scene position (what a click selects)."""
        if self.geometry is None:
            return None
        p = self.overview_image.mapFromScene(scene_pos)
        return self.geometry.head_at(p.x(), p.y())

    # --- drawing ---------------------------------------------------------------------------------
    def _head_source(self, trace: Trace):
        if layer_patterns_fit(trace):
            return lambda layer, head: trace[f"blocks.{layer}.attn.pattern"][head]
        return lambda layer, head: trace.head(layer, head, "pattern")

    def _draw_overview(self) -> None:
        trace, cfg = self.trace, self.trace.config
        self.mosaic, self.geometry = self._mosaic(trace)
        geo = self.geometry
        levels = (0.0, finite_levels(self.mosaic)[1])
        self.overview_image.setImage(self.mosaic, levels=levels, autoLevels=False)
        self.overview_colorbar.setLevels(levels)
        rows, cols = geo.shape
        self.overview_plot.setRange(xRange=(-1, cols + 1), yRange=(-1, rows + 1), padding=0)  # room for the outline
        step_l = max(1, math.ceil(cfg.n_layers / 24))
        step_h = max(1, math.ceil(cfg.n_heads / 24))
        self.overview_plot.getAxis("left").setTicks(
            [[(geo.tile_center(layer, 0)[1], f"L{layer}") for layer in range(0, cfg.n_layers, step_l)]])
        self.overview_plot.getAxis("top").setTicks(
            [[(geo.tile_center(0, head)[0], f"H{head}") for head in range(0, cfg.n_heads, step_h)]])
        shape = f"{cfg.n_layers} layers \u00d7 {cfg.n_heads} heads \u00b7 {trace.n_tokens} tokens"
        if geo.downsampled:
            shape += f" \u00b7 overview averaged over {geo.factor}\u00d7{geo.factor}-token blocks"
        self.info.setText(shape)
        self._place_outlines()

    def _place_outlines(self) -> None:
        if self.geometry is None:
            return
        layer, head = self.layer_head()
        x, y = self.geometry.tile_origin(layer, head)
        t = self.geometry.tile
        self.selected_outline.setRect(QRectF(x - 0.5, y - 0.5, t + 1, t + 1))
        self.statistics_outline.setRect(QRectF(head, layer, 1, 1))

    def _draw_statistics(self) -> None:
        if self.trace is None or not self.stats_toggle.isChecked():
            return
        cfg = self.trace.config
        values = self.statistic_values()
        label = analysis.STATISTIC_LABELS[self.statistic]
        levels = statistic_levels(self.statistic, values, self.trace.n_tokens)
        self.statistics.plot.setTitle(label)
        self.statistics.set_data(values, [f"L{layer}" for layer in range(cfg.n_layers)],
                                 [f"H{head}" for head in range(cfg.n_heads)], levels=levels, value_name=label)
        for text in self.statistic_texts:
            self.statistics.plot.removeItem(text)
        self.statistic_texts = []
        if cfg.n_layers > STAT_LABELS_MAX or cfg.n_heads > STAT_LABELS_MAX:
            return  # too many cells to write in: the tooltip gives each value
        for (layer, head), value in np.ndenumerate(values):
            dark = not math.isfinite(value) or (value - levels[0]) < 0.6 * (levels[1] - levels[0])
            text = pg.TextItem(f"{value:.2f}" if math.isfinite(value) else "–", anchor=(0.5, 0.5),
                               color="w" if dark and math.isfinite(value) else "k")
            text.setPos(head + 0.5, layer + 0.5)
            text.setZValue(15)
            self.statistics.plot.addItem(text)
            self.statistic_texts.append(text)

    def head_matrices(self, layer: int, head: int) -> tuple[np.ndarray, np.ndarray]:
        """(pattern, scores) [n, n] of one head, exact, from the trace (the last few kept)."""
        key = (layer, head)
        if key not in self._head_cache:
            while len(self._head_cache) >= 4:
                self._head_cache.pop(next(iter(self._head_cache)))
            self._head_cache[key] = (self.trace.head(layer, head, "pattern"), self.trace.head(layer, head, "scores"))
        return self._head_cache[key]

    def _detail_matrix(self) -> tuple[np.ndarray, np.ndarray]:
        pattern, scores = self.head_matrices(*self.layer_head())
        return (scores if self.kind == "scores" else pattern), np.isneginf(scores)

    def _draw_detail(self) -> None:
        self._detail_timer.stop()
        if self.trace is None:
            return
        matrix, masked = self._detail_matrix()
        name, colormap, symmetric = KINDS[self.kind]
        self.detail.set_colormap(colormap, symmetric)
        if self.kind == "pattern":
            levels = (0.0, finite_levels(matrix)[1])
        else:
            levels = finite_levels(matrix, symmetric=True, masked=masked)
        tokens = list(self.trace.tokens)
        self.detail.set_data(matrix, tokens, tokens, levels=levels, masked=masked, value_name=name)
        layer, head = self.layer_head()
        what = "attention pattern" if self.kind == "pattern" else "scaled scores q\u00b7k/\u221ad_head"
        self.detail.plot.setTitle(f"L{layer} H{head}: {what}  (rows: queries, columns: keys)")
        self.detail.plot.setLabel("left", "query")
        self.detail.plot.setLabel("bottom", "key")
        self._draw_query_row()

    def _draw_query_row(self) -> None:
        matrix, masked = self.detail.matrix, self.detail.masked
        n = matrix.shape[0]
        i = self.query_row()
        values = np.asarray(matrix[i], dtype=np.float32)
        self.row_values = values
        heights = np.where(masked[i], 0.0, values)
        if self.kind == "pattern":
            brushes = [BAR_PATTERN] * n
        else:
            brushes = [BAR_NEGATIVE if h < 0 else BAR_POSITIVE for h in heights]
        self.row_bars.setOpts(x=np.arange(n) + 0.5, height=heights, width=0.8, brushes=brushes)
        self.query_outline.setRect(QRectF(0, i, n, 1))
        tokens = self.trace.tokens
        name = KINDS[self.kind][0]
        later = " (later keys masked)" if masked[i].any() else ""
        self.row_plot.setTitle(f"query {quoted(tokens[i])} ({i}): {name} over the keys{later}")
        self.row_plot.getAxis("bottom").setTicks([thinned_ticks(tokens, max_labels=max(2, min(40, n)), max_chars=8)])
        lo, hi = float(min(0.0, heights.min(initial=0.0))), float(max(0.0, heights.max(initial=0.0)))
        self.row_plot.setXRange(0, max(n, 1), padding=0.01)
        self.row_plot.setYRange(lo, hi if hi > lo else lo + 1, padding=0.05)

    # --- hover and click on the overview ---------------------------------------------------------
    def overview_text(self, layer: int, head: int, query: int, key: int) -> str:
        tokens, geo = self.trace.tokens, self.geometry
        x, y = geo.tile_origin(layer, head)
        value = self.mosaic[y + query // geo.factor, x + key // geo.factor]
        if geo.downsampled:
            qs, ks = geo.tokens_of_pixel(query // geo.factor), geo.tokens_of_pixel(key // geo.factor)
            text = (f"L{layer} H{head}: queries {qs.start}\u2013{qs.stop - 1} \u2192 "
                    f"keys {ks.start}\u2013{ks.stop - 1}: mean weight {format_value(value)}")
        else:
            text = (f"L{layer} H{head}: query {quoted(tokens[query])} ({query}) \u2192 "
                    f"key {quoted(tokens[key])} ({key}): weight {format_value(value)}")
        if self.stats_toggle.isChecked():
            stat = self.statistic_values()[layer, head]
            shown = format_value(stat) if math.isfinite(stat) else "undefined"
            text += f"\n{analysis.STATISTIC_LABELS[self.statistic]}: {shown}"
        return text

    def _on_overview_hover(self, args: tuple) -> None:
        if self.geometry is None or not self.overview_plot.vb.sceneBoundingRect().contains(args[0]):
            QToolTip.hideText()
            return
        p = self.overview_image.mapFromScene(args[0])
        cell = self.geometry.cell_at(p.x(), p.y())
        if cell is None:
            QToolTip.hideText()
            return
        QToolTip.showText(QCursor.pos(), self.overview_text(*cell), self.overview)

    def _on_overview_clicked(self, event) -> None:
        if event.button() != Qt.MouseButton.LeftButton:
            return
        picked = self.head_at_scene(event.scenePos())
        if picked is not None:
            self.selection.set_layer_head(*picked)

    # --- exported data ---------------------------------------------------------------------------
    def _overview_data(self) -> tuple[np.ndarray, list[str], list[str]]:
        """Every head's exact pattern stacked: [L*H*n, n], rows "L{l} H{h} {i}:{token}", columns keys."""
        trace, cfg = self.trace, self.trace.config
        labels = token_labels(trace.tokens)
        source = self._head_source(trace)
        stack = np.concatenate([source(layer, head) for layer in range(cfg.n_layers)
                                for head in range(cfg.n_heads)]).astype(np.float32, copy=False)
        rows = [f"L{layer} H{head} {label}" for layer in range(cfg.n_layers)
                for head in range(cfg.n_heads) for label in labels]
        return stack, rows, labels

    def _detail_data(self) -> tuple[np.ndarray, list[str], list[str]]:
        """The selected head's [n, n] pattern or scores (as shown), queries x keys."""
        labels = token_labels(self.trace.tokens)
        return self._detail_matrix()[0], labels, labels

    def _row_data(self) -> tuple[np.ndarray, list[str], list[str]]:
        """The selected query's row [n]: one entry per key (row labels); the one column label
        names the query and the quantity."""
        labels = token_labels(self.trace.tokens)
        i = self.query_row()
        return self._detail_matrix()[0][i], labels, [f"{KINDS[self.kind][0]} from query {labels[i]}"]

    def _statistics_data(self) -> tuple[np.ndarray, list[str], list[str]]:
        """The chosen head statistic [L, H] with "L{l}" / "H{h}" labels."""
        cfg = self.trace.config
        return (self.statistic_values(), [f"L{layer}" for layer in range(cfg.n_layers)],
                [f"H{head}" for head in range(cfg.n_heads)])
