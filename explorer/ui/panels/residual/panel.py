"""Residual stream & logit lens: how large the stream is at every layer boundary, how much each
sublayer wrote into it, how far each block turned it, and what it would predict if the model
stopped there.

Boundaries (rows "embed", "after 0", …, see ``explorer.core.analysis.residual``): boundary 0 is what enters
block 0, boundary l + 1 what leaves block l; the last one is the model's real output.

* Norms: ‖x‖ at every boundary and token, a heatmap; beside it the selected token's norm over depth
  as a line (the other tokens faint grey behind it).
* Sublayers: ‖attention output‖ and ‖FFN output‖ of the selected token, grouped bars per block
  (no FFN bars for attention-only models).
* Turning: cosine of the stream entering and leaving each block, per token (1: barely turned).
* Logit lens (``lens.py``): every boundary read through the final norm and un-embedding. Each cell's
  colour is the top prediction's probability and, while the grid is small enough to read, its text is
  the top predicted token (spaces shown as "·"); cells whose top prediction is the real next token are
  outlined in orange and written in bold. The tooltip lists the top five and the real next token's
  probability and rank. The lens costs one vocabulary-wide matmul per boundary, so it is computed on
  the worker thread (``prepare``) and kept with the trace (``Trace.memo``).

The selected token (the last one when none is selected) is outlined in every heatmap; clicking a
cell of any heatmap selects its token.
"""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, QObject, QRectF, Qt, QTimer
from PySide6.QtGui import QColor, QPen
from PySide6.QtWidgets import (
    QCheckBox,
    QGraphicsPathItem,
    QHBoxLayout,
    QLabel,
    QMenu,
    QToolButton,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from explorer.core.analysis import residual as core
from explorer.core.display.levels import finite_extent, thinned_ticks
from explorer.core.display.tokens import quoted, vocab_text
from explorer.core.trace import Trace
from explorer.ui.export.menu import export_actions
from explorer.ui.interventions.menu import install_targets
from explorer.ui.interventions.targets import Target, resid_cells
from explorer.ui.panels.base import Panel, PanelSnapshot
from explorer.ui.panels.residual.cells import CellTexts, DescribedHeatmap, depths
from explorer.ui.panels.residual.data import ResidualData
from explorer.ui.panels.residual.headroom import LegendHeadroom
from explorer.ui.panels.residual.lens import LENS_KEY, NEXT_TOKEN, LogitLensView, lens_header
from explorer.ui.panels.residual.token_layers import TokenLayersView
from explorer.ui.panels.residual.view import ResidualView, mixer_name, residual_view
from explorer.ui.session.selection import Selection
from explorer.ui.widgets.plots import fixed_plot, outline, set_x_range
from explorer.ui.widgets.role_bands import trace_bands
from explorer.ui.widgets.steady_label import SteadyLabel

SELECTED = pg.mkPen("#ff2d55", width=1.5, cosmetic=True, style=Qt.PenStyle.DashLine)  # as the attention panel
ATTN_BRUSH, FFN_BRUSH = pg.mkBrush("#3b6fb6"), pg.mkBrush("#e08e0b")
SELECTED_LINE = pg.mkPen("#ff2d55", width=2.5)
OTHER_LINES = pg.mkPen((150, 150, 150, 90), width=1)


class ResidualPanel(ResidualData, Panel):
    def __init__(self, selection: Selection, parent: QWidget | None = None) -> None:
        super().__init__(selection, parent)
        self.norms = np.zeros((0, 0), dtype=np.float32)
        self.contributions: dict[str, np.ndarray] | None = None
        self.cosine = np.zeros((0, 0), dtype=np.float32)
        self._labels: list[str] = []  # boundary labels
        self._texts: dict[int, str] = {}  # vocabulary id -> display text, for the current trace
        self._view: ResidualView | None = None  # what draw() drew last

        row = QHBoxLayout()
        self.info = SteadyLabel()  # wraps instead of widening the panel past its dock; keeps its height
        self.info.setStyleSheet("color: palette(placeholder-text)")
        row.addWidget(self.info, 1)
        self.log_norms = QCheckBox("log scale")
        self.log_norms.setToolTip("Colour the norms heatmap by log10 \u2016x\u2016: one huge norm (often the first "
                                  "token's) no longer makes every other cell the same colour; tooltips keep the values")
        self.log_norms.toggled.connect(lambda _on: self._draw_norms() if self.trace is not None else None)
        row.addWidget(self.log_norms)
        self.body.addLayout(row)

        self.norm_map = DescribedHeatmap(colormap="viridis", title="\u2016residual\u2016 at each boundary")
        self.norm_map.describe = self._norm_text
        self.cosine_map = DescribedHeatmap(colormap="viridis",
                                           title="cosine(in, out) of each block")
        self.cosine_map.describe = self._cosine_text
        self.norm_plot = fixed_plot(grid="xy")
        self.norm_plot.setLabel("left", "\u2016x\u2016")
        self.other_lines = pg.PlotDataItem(pen=OTHER_LINES, connect="finite")
        # the selected token's line and dots: two items (a PlotDataItem restyled its symbols on every switch)
        self.norm_line = pg.PlotCurveItem(pen=pg.mkPen(SELECTED_LINE))
        self.norm_dots = pg.ScatterPlotItem(symbol="o", size=6, brush=pg.mkBrush("#ff2d55"), pen=pg.mkPen(None))
        self.norm_plot.addItem(self.other_lines)
        self.norm_plot.addItem(self.norm_line)
        self.norm_plot.addItem(self.norm_dots)

        self.bars_plot = fixed_plot()
        self.bars_plot.setLabel("left", "\u2016output\u2016")
        self.bars_plot.setLabel("bottom", "block")
        self.attn_bars = pg.BarGraphItem(x=[], height=[], width=0.4, brush=ATTN_BRUSH, pen=None)
        self.ffn_bars = pg.BarGraphItem(x=[], height=[], width=0.4, brush=FFN_BRUSH, pen=None)
        self.bars_plot.addItem(self.attn_bars)
        self.bars_plot.addItem(self.ffn_bars)
        self.bars_legend = self.bars_plot.addLegend(offset=(-10, 5), colCount=2)
        self._bars_top: float | None = None
        self.bars_headroom = LegendHeadroom(self.bars_plot, self.bars_legend, lambda: self._bars_top)

        self.lens_map = DescribedHeatmap(colormap="viridis", title="logit lens")
        self.lens_cells = CellTexts()
        self.lens_cells.setZValue(20)
        self.lens_map.plot.addItem(self.lens_cells)
        self.lens_marks = QGraphicsPathItem()
        marks_pen = QPen(QColor(NEXT_TOKEN), 2)
        marks_pen.setCosmetic(True)
        self.lens_marks.setPen(marks_pen)
        self.lens_marks.setZValue(25)
        self.lens_map.plot.addItem(self.lens_marks)

        self._outlines = {id(m): outline(m.plot, SELECTED, z=30, visible=False)
                          for m in (self.norm_map, self.cosine_map, self.lens_map)}
        for heatmap in (self.norm_map, self.cosine_map):
            heatmap.cell_clicked.connect(lambda _row, col: self.selection.set_token(col))
        self.lens_map.cell_clicked.connect(self._on_lens_clicked)
        self.lens_whole = QCheckBox("whole prompt")
        self.lens_whole.setToolTip("Logit lens at every position of the prompt, filled in the background "
                                   "(one vocabulary-wide matmul per boundary and position); off: a window of "
                                   "positions around the selected token")
        self.lens_whole.toggled.connect(self._on_lens_whole)
        self.lens_whole.setVisible(False)
        self.lens_view = LogitLensView(  # the lens: an object of its own, handed what it uses
            self.lens_map, self.lens_cells, self.lens_marks, self.lens_whole, later=self.later,
            pending_keys=lambda: [job.key for job in self._lane().pending(self)],
            selected_token=lambda: self.selected_token, token_text=self.token_text,
            tokenizer=lambda: self.tokenizer, where=self._where)
        self.lens_map.describe = self.lens_view.lens_cell_text
        self.lens_view.drawn = self._draw_token
        self.token_layers = TokenLayersView(later=self.later, selected_token=lambda: self.selected_token,
                                            tokenizer=lambda: self.tokenizer)
        self.lens_big = QToolButton()
        self.lens_big.setText("Enlarge lens")
        self.lens_big.setCheckable(True)
        self.lens_big.setToolTip("Give the logit lens and the token chart the whole panel (the norms, cosines and "
                                 "sublayer charts hidden), rows tall enough for every cell's text; the panel scrolls")
        self.lens_big.toggled.connect(self._on_lens_big)
        self._lens_resize = QTimer(self)  # the grid's width settles: show as many positions as fit
        self._lens_resize.setSingleShot(True)
        self._lens_resize.setInterval(80)
        self._lens_resize.timeout.connect(self._lens_resized)
        self.lens_map.installEventFilter(self)

        left = QSplitter(Qt.Orientation.Vertical)
        left.addWidget(self.norm_map)
        left.addWidget(self.cosine_map)
        left.setStretchFactor(0, 3)
        left.setStretchFactor(1, 2)
        right = QSplitter(Qt.Orientation.Vertical)
        right.addWidget(self.norm_plot)
        right.addWidget(self.bars_plot)
        self.top = top = QSplitter(Qt.Orientation.Horizontal)
        top.addWidget(left)
        top.addWidget(right)
        top.setStretchFactor(0, 3)
        top.setStretchFactor(1, 2)
        lens_box = QWidget()
        lens_layout = QVBoxLayout(lens_box)
        lens_layout.setContentsMargins(0, 0, 0, 0)
        lens_layout.setSpacing(0)
        self.lens_key = QLabel(LENS_KEY)
        lens_layout.addLayout(lens_header(self.lens_big, self.lens_key, self.lens_whole))
        beside = QSplitter(Qt.Orientation.Horizontal)  # the token across layers beside the lens
        beside.addWidget(self.lens_map)
        beside.addWidget(self.token_layers)
        beside.setStretchFactor(0, 7)  # the lens keeps most of the width: more positions fit (lens_window)
        beside.setStretchFactor(1, 3)
        beside.setChildrenCollapsible(False)
        lens_layout.addWidget(beside, 1)
        outer = QSplitter(Qt.Orientation.Vertical)
        outer.addWidget(top)
        outer.addWidget(lens_box)
        outer.setStretchFactor(0, 1)
        outer.setStretchFactor(1, 1)
        self.body.addWidget(outer, 1)
        self._register_exports()

    def _register_exports(self) -> None:
        self.add_exportable("residual norms", self.norm_map, self._norms_data)
        install_targets(self)  # right-click a norm cell: switch that cell of the stream off (intervention_targets)
        self.add_exportable("residual norm of the selected token", self.norm_plot, self._norm_line_data)
        self.add_exportable("sublayer contributions", self.bars_plot, self._contributions_data)
        self.add_exportable("consecutive cosine", self.cosine_map, self._cosine_data)
        self.add_exportable("token across layers", self.token_layers.chart, self.token_layers.chart.data)
        # two exports of one plot: the menu hosts one set of actions per plot, so the token ids
        # (registered first, then displaced) come back as a submenu below the probabilities'
        ids = self.add_exportable("logit lens top token ids", self.lens_map, self.lens_view.ids_data)
        self.add_exportable("logit lens top-1 probability", self.lens_map, self.lens_view.probs_data)
        menu = self.lens_map.plot.getViewBox().menu
        submenu = QMenu("Top token ids", menu)
        submenu.addActions(export_actions(ids, self))
        shown = getattr(menu, "_explorer_export_actions", [])
        after = menu.actions()[len(shown)] if len(menu.actions()) > len(shown) else None
        menu.insertMenu(after, submenu) if after is not None else menu.addMenu(submenu)
        self.lens_ids_menu = submenu

    # --- what a right-click can switch off (explorer.ui.interventions.targets) ---------------------
    def intervention_targets(self) -> list[Target]:
        """A cell of the norms heatmap: the stream entering block ``row`` at one position (the last
        row is the stream after the last block)."""
        return [resid_cells(self.norm_map)]

    # --- the panel contract ----------------------------------------------------------------------
    def prepare(self, trace: Trace, snapshot: PanelSnapshot) -> ResidualView:
        """On the worker thread: norms, sublayer sizes, cosines and the logit lens with its texts
        (for the snapshot's tokenizer; ``view.py``)."""
        super().prepare(trace, snapshot)
        return residual_view(trace, snapshot)

    def draw(self, view: ResidualView) -> None:
        self._view = view
        self._labels = list(view.labels)
        self.norms = view.norms
        self.contributions = view.contributions
        self.cosine = view.cosine
        self._draw_norms()
        self._draw_cosine()
        self.lens_view.show(view.trace, view.lens, [list(row) for row in view.lens_texts])
        self._draw_token()
        self.lens_view.schedule()
        self.token_layers.show_trace(view.trace)

    # --- the lens (lens.py), as the panel's own names ----------------------------------------------
    @property
    def lens(self) -> core.LogitLens | None:
        """The shown trace's logit lens (filled progressively when it is large)."""
        return self.lens_view.lens

    @property
    def lens_texts(self) -> list[list[str]]:
        return self.lens_view.lens_texts

    @property
    def next_token_hits(self) -> np.ndarray:
        return self.lens_view.next_token_hits

    @property
    def _lens_shown(self) -> tuple[int, int]:
        return self.lens_view.shown

    def lens_window(self) -> int:
        return self.lens_view.lens_window()

    def lens_span(self) -> tuple[int, int]:
        return self.lens_view.lens_span()

    def lens_position(self, col: int) -> int:
        return self.lens_view.lens_position(col)

    def lens_cell_text(self, row: int, col: int) -> str:
        return self.lens_view.lens_cell_text(row, col)

    def _lens_probs_data(self) -> tuple[np.ndarray, list[str], list[str]]:
        return self.lens_view.probs_data()

    def _lens_resized(self) -> None:
        """The grid's width changed: show as many positions as now fit (computing the new ones)."""
        if self.lens_view.moved():
            self.lens_view.draw()
            self._draw_token()
            self.lens_view.schedule()

    def selection_changed(self, what: str) -> None:
        if what == "token":
            if self.lens_view.moved():
                self.lens_view.draw()  # the selection left the lens window: it moves
            self._draw_token()
            self.lens_view.schedule()  # the newly shown (or selected) positions first
            self.token_layers.update_path()

    def _on_lens_clicked(self, row: int, col: int) -> None:
        """A lens cell: its position selected, and its top prediction drawn across layers beside the lens."""
        lens, position = self.lens, self.lens_position(col)
        if lens is not None and lens.filled[position]:
            self.token_layers.choose(int(lens.ids[row, position, 0]), draw=False)
        if self.selected_token == position:
            self.token_layers.update_path()
        self.selection.set_token(position)  # (another position: the chart follows in selection_changed)

    def _on_lens_big(self, big: bool) -> None:
        self.top.setVisible(not big)
        self.lens_view.tall = big
        if self.trace is not None:
            self.lens_view.draw()
            self._draw_token()

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt override)
        if watched is self.lens_map and event.type() == QEvent.Type.Resize:
            self._lens_resize.start()
        return super().eventFilter(watched, event)

    def _on_lens_whole(self, _checked: bool) -> None:
        if self.trace is not None:
            self.lens_view.draw()
            self._draw_token()
            self.lens_view.schedule()

    def tokenizer_changed(self) -> None:
        self._texts = {}

    # --- helpers ---------------------------------------------------------------------------------
    def token_text(self, token_id: int) -> str:
        """A vocabulary id as text: the tokenizer's display string, else "#id" (cached; GUI thread)."""
        text = self._texts.get(token_id)
        if text is None:
            text = self._texts[token_id] = vocab_text(self.tokenizer, token_id)
        return text

    def _token_axis(self) -> list[str]:
        return list(self.trace.tokens)

    # --- drawing ---------------------------------------------------------------------------------
    def _draw_norms(self) -> None:
        trace = self.trace
        if self.log_norms.isChecked():  # the colours by log10 ||x|| (the tooltips say the norm itself)
            shown = np.log10(np.maximum(self.norms.astype(np.float64), 1e-12)).astype(np.float32)
            self.norm_map.set_data(shown, self._labels, self._token_axis(), levels=finite_extent(shown, include_zero=False)
                                   if np.isfinite(shown).any() else None, value_name="log10 \u2016x\u2016")
            self.norm_map.plot.setTitle("log10 \u2016residual\u2016 at each boundary")
        else:
            self.norm_map.set_data(self.norms, self._labels, self._token_axis(),
                                   levels=(0.0, finite_extent(self.norms)[1] or 1.0), value_name="\u2016x\u2016")
            self.norm_map.plot.setTitle("\u2016residual\u2016 at each boundary")
        self.norm_map.set_token_bands(cols=trace_bands(trace))  # a conversation's roles along the tokens
        cfg = trace.config
        self.info.setText(f"{cfg.n_layers} layers \u00b7 {trace.n_tokens} tokens \u00b7 "
                          f"{len(self._labels)} layer boundaries (embed = entering block 0)")
        B, n = self.norms.shape
        x = np.append(np.arange(B, dtype=np.float64), np.nan)
        self.other_lines.setData(np.tile(x, n), np.concatenate(
            [np.append(self.norms[:, i].astype(np.float64), np.nan) for i in range(n)]))
        self.norm_plot.getAxis("bottom").setTicks([[(t - 0.5, s) for t, s in
                                                    thinned_ticks(self._labels, max_labels=10, max_chars=9)]])
        self.norm_plot.setXRange(-0.3, max(B - 1, 1) + 0.3, padding=0)
        self.norm_plot.setYRange(0, finite_extent(self.norms)[1] or 1.0, padding=0.05)

    def _draw_cosine(self) -> None:
        rows = [f"block {layer}" for layer in range(self.cosine.shape[0])]
        low = min(0.0, float(self.cosine.min(initial=0.0)))
        self.cosine_map.set_data(self.cosine, rows, self._token_axis(), levels=(low, 1.0), value_name="cosine")
        self.cosine_map.set_token_bands(cols=trace_bands(self.trace))

    def _draw_token(self) -> None:
        if self.trace is None or self.norms.size == 0:
            return
        i = self.selected_token
        tokens = self.trace.tokens
        for heatmap in (self.norm_map, self.cosine_map, self.lens_map):
            outline = self._outlines[id(heatmap)]
            rows = heatmap.matrix.shape[0] if heatmap.matrix.ndim == 2 else 0
            col = i - self._lens_shown[0] if heatmap is self.lens_map else i
            outline.setVisible(rows > 0)
            outline.setRect(QRectF(col, 0, 1, rows))
        x = depths(self.norms.shape[0])
        y = self.norms[:, i].astype(np.float64)
        self.norm_line.setData(x, y)
        self.norm_dots.setData(x, y)
        self.norm_plot.setTitle(f"\u2016x\u2016 of {quoted(tokens[i])} ({i}); grey: the others")
        self._draw_bars(i)

    def _draw_bars(self, i: int) -> None:
        cfg = self.trace.config
        L = cfg.n_layers
        x = depths(L)
        legend = (self.contributions is not None, cfg.has_ffn)
        if legend != getattr(self, "_legend_for", None):  # rebuilt only when what it names changes
            self._legend_for = legend
            self.bars_legend.clear()
            if legend[0]:
                self.bars_legend.addItem(self.attn_bars, mixer_name(cfg))  # a hybrid's: "token mixer"
                if legend[1]:
                    self.bars_legend.addItem(self.ffn_bars, "FFN")
        if self.contributions is None:
            self._bars_top = None
            self.attn_bars.setOpts(x=[], height=[])
            self.ffn_bars.setOpts(x=[], height=[])
            self.bars_plot.setTitle("sublayer outputs: not captured (and no model)")
            return
        attn = self.contributions["attn"][:, i]
        name = f"{quoted(self.trace.tokens[i])} ({i})"
        if cfg.has_ffn:
            mlp = self.contributions["mlp"][:, i]
            self.attn_bars.setOpts(x=x - 0.2, height=attn, width=0.4)
            self.ffn_bars.setOpts(x=x + 0.2, height=mlp, width=0.4)
            self.ffn_bars.setVisible(True)
            self.bars_plot.setTitle(f"sublayer outputs at {name}")
            top = max(finite_extent(attn)[1], finite_extent(mlp)[1])
        else:
            self.attn_bars.setOpts(x=x, height=attn, width=0.6)
            self.ffn_bars.setOpts(x=[], height=[])
            self.ffn_bars.setVisible(False)
            self.bars_plot.setTitle(f"attention output at {name} (no FFN)")
            top = finite_extent(attn)[1]
        step = max(1, math.ceil(L / 16))
        self.bars_plot.getAxis("bottom").setTicks([[(layer, str(layer)) for layer in range(0, L, step)]])
        set_x_range(self.bars_plot, -0.6, L - 0.4)  # (a token switch: the same blocks, kept)
        self._bars_top = top  # headroom so that the legend (top right) sits above the tallest bar, at any size
        self.bars_headroom.fit()
