"""The attention panel's overview: every head's pattern as one tiled image, the L x H heatmap of a
head statistic under it, their outlines of the selected head, hover texts, clicks and exported data.

``AttentionOverview`` is an object ``AttentionPanel`` owns: the panel hands it what it needs (the
selection, its info label and statistics checkbox, and callbacks for background work, intervention
marks, the selected head and the chosen statistic), and it reads nothing else of the panel.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QCursor
from PySide6.QtWidgets import QCheckBox, QLabel, QSplitter, QToolTip

from explorer.core.analysis import attention as analysis
from explorer.core.analysis.chance import chance_level
from explorer.core.display.levels import finite_levels
from explorer.core.display.mosaic import MosaicGeometry
from explorer.core.display.labels import token_labels
from explorer.core.display.tokens import quoted
from explorer.core.interventions.spec import Intervention
from explorer.core.trace import Trace
from explorer.ui.interventions.targets import Component, Point
from explorer.ui.panels.attention.views import (
    OUTLINE,
    MAX_TILE,
    StatisticHeatmap,
    all_heads_cheap,
    head_source,
    layer_patterns_fit,
    mosaic_of,
    statistic_levels,
    statistic_of,
)
from explorer.ui.panels.attention.statistics_table import HeadStatisticsTable
from explorer.ui.panels.attention import effective
from explorer.ui.panels.residual.cells import CellTexts
from explorer.ui.session.selection import Selection
from explorer.ui.widgets.heatmap import cached_image, dark_cells, format_value
from explorer.ui.widgets.axis import readable, thin_axes
from explorer.ui.widgets.plots import outline


Later = Callable[..., Any]  # Panel.later(key, compute, apply, priority)


class AttentionOverview:
    """Building, drawing and reading the all-heads overview and the head statistics, for ``AttentionPanel``.

    ``later``: the panel's ``later`` (background views owned by the panel); ``refresh_marks``: redraw
    its intervention marks; ``layer_head()``: the selected head within the trace; ``statistic()``: the
    chosen statistic's name. ``stats_toggle`` says whether the statistics are shown; ``info`` is the
    panel's one-line description of the grid."""

    def __init__(self, selection: Selection, info: QLabel, stats_toggle: QCheckBox, later: Later,
                 refresh_marks: Callable[[], None], layer_head: Callable[[], tuple[int, int]],
                 statistic: Callable[[], str], corpus: Callable[[str], Any] = lambda name: None) -> None:
        self.selection = selection
        self.info = info
        self.stats_toggle = stats_toggle
        self.later = later
        self.refresh_marks = refresh_marks
        self.layer_head = layer_head
        self._statistic = statistic
        self.corpus = corpus  # a statistic's scores over the open corpus run, while shown (corpus_scores.py)
        self.trace: Trace | None = None
        self.geometry: MosaicGeometry | None = None
        self.mosaic = np.zeros((0, 0), dtype=np.float32)
        self._statistics: dict[str, np.ndarray] = {}  # the current trace's, by name
        self._build_overview()

    @property
    def statistic(self) -> str:
        return self._statistic()

    def show(self, trace: Trace, mosaic: tuple[np.ndarray, MosaicGeometry] | None,
             statistics: dict[str, np.ndarray]) -> None:
        """A new trace, with its mosaic and statistics when they were prepared (else computed here or later)."""
        self.trace = trace
        self._statistics = dict(statistics)
        self.draw_overview(mosaic)
        self.draw_statistics()

    def _build_overview(self) -> None:
        self.overview = pg.GraphicsLayoutWidget()
        self.overview_plot: pg.PlotItem = readable(self.overview.addPlot(row=0, col=0, title="all heads", axisItems=thin_axes("left", "top")))
        plot = self.overview_plot
        plot.invertY(True)
        plot.setAspectLocked(True)
        # grows with its space (aspect kept); the wheel zooms, dragging pans, "A" (bottom left) resets
        plot.setMouseEnabled(x=True, y=True)
        self._home: tuple | None = None  # the ranges the mosaic was fitted to (None once the user zooms or pans)
        plot.vb.sigResized.connect(self._fit_home)
        plot.vb.sigRangeChangedManually.connect(self._left_home)
        plot.showAxis("top")
        plot.hideAxis("bottom")
        self.overview_image = cached_image(axisOrder="row-major")
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
        self.statistic_cells = CellTexts()  # values written in the cells while they have room
        self.statistic_cells.setZValue(15)
        self.statistics.plot.addItem(self.statistic_cells)
        self.statistics_table = HeadStatisticsTable()
        self.statistics_table.head_clicked.connect(self.selection.set_layer_head)
        self.statistics_area = QSplitter(Qt.Orientation.Horizontal)
        self.statistics_area.addWidget(self.statistics)
        self.statistics_area.addWidget(self.statistics_table)
        self.statistics_area.setChildrenCollapsible(False)
        self.statistics_area.setStretchFactor(0, 3)
        self.statistics_area.setStretchFactor(1, 2)
        self.statistics_area.setVisible(False)

        self.column = QSplitter(Qt.Orientation.Vertical)
        self.column.addWidget(self.overview)
        self.column.addWidget(self.statistics_area)
        self.column.setChildrenCollapsible(False)
        self.column.setStretchFactor(0, 3)
        self.column.setStretchFactor(1, 2)
        self.overview.setMinimumSize(200, 200)

    def give_statistics_room(self) -> None:
        """The statistics get about 45% of the column when turned on (never the zero height a
        hidden splitter child comes back with)."""
        total = sum(self.column.sizes()) or self.column.height()
        if total > 0:
            self.column.setSizes([int(total * 0.55), total - int(total * 0.55)])


    def statistic_values(self, name: str | None = None) -> np.ndarray:
        """The [L, H] values of a head statistic for the current trace (computed once per trace)."""
        name = name or self.statistic
        over_corpus = self.corpus(name)
        if over_corpus is not None:
            return over_corpus.values
        if name not in self._statistics:
            self._statistics[name] = statistic_of(self.trace, name)
        return self._statistics[name]


    def head_at_scene(self, scene_pos: QPointF) -> tuple[int, int] | None:
        """(layer, head) of the overview tile under a scene position (what a click selects)."""
        if self.geometry is None:
            return None
        p = self.overview_image.mapFromScene(scene_pos)
        return self.geometry.head_at(p.x(), p.y())

    # --- what a right-click can switch off (explorer.ui.interventions.targets) ---------------------
    def tile_component(self, scene_pos: QPointF) -> Component | None:
        """The head whose tile is under ``scene_pos`` (the panel's intervention target)."""
        picked = self.head_at_scene(scene_pos) if self.trace is not None else None
        if picked is None or not effective.attention_head(self.trace.config, *picked):
            return None  # a recurrent layer's map, or no map: nothing to switch off here
        return Component.head(*picked)

    def tile_mark_points(self, iv: Intervention) -> list[Point]:
        """Where a switched-off head's cross goes: its tile's centre."""
        if iv.target != "head" or self.geometry is None or self.trace is None:
            return []
        cfg = self.trace.config
        if not (0 <= iv.layer < cfg.n_layers and 0 <= iv.index < self.geometry.n_heads):
            return []
        return [self.geometry.tile_center(iv.layer, iv.index)]

    def draw_overview(self, ready: tuple[np.ndarray, MosaicGeometry] | None = None) -> None:
        trace, cfg = self.trace, self.trace.config
        if ready is None and trace.memo_get(("attention.mosaic", MAX_TILE)) is None and not all_heads_cheap(trace):
            # every head of a long prompt: in the background, drawn when ready (explorer.ui.session.progressive)
            self.geometry = None
            self.overview_image.clear()
            self.overview_plot.setTitle("all heads: computing\u2026")
            self.info.setText(self._shape_text())
            self.later(("mosaic",), lambda check: mosaic_of(trace, check), lambda _: self.draw_overview(),
                       priority=2)
            return
        self.overview_plot.setTitle("all heads")
        self.mosaic, self.geometry = ready if ready is not None else mosaic_of(trace)
        geo = self.geometry
        levels = (0.0, finite_levels(self.mosaic)[1])
        self.overview_image.setImage(self.mosaic, levels=levels, autoLevels=False)
        self.overview_colorbar.setLevels(levels)
        rows, cols = geo.shape
        self._home = ((-1, cols + 1), (-1, rows + 1))  # room for the outline
        self._fit_home()
        step_l = max(1, math.ceil(cfg.n_layers / 24))
        step_h = max(1, math.ceil(geo.n_heads / 24))
        mixed = not effective.uniform(cfg)  # a hybrid's rows say which kind of layer they are
        self.overview_plot.getAxis("left").setTicks(
            [[(geo.tile_center(layer, 0)[1], f"L{layer}" + (f" {effective.short_kind(trace, layer)}" if mixed else ""))
              for layer in range(0, cfg.n_layers, step_l)]])
        self.overview_plot.getAxis("top").setTicks(
            [[(geo.tile_center(0, head)[0], f"H{head}") for head in range(0, geo.n_heads, step_h)]])
        shape = self._shape_text()
        if geo.downsampled:
            shape += f" \u00b7 overview averaged over {geo.factor}\u00d7{geo.factor}-token blocks"
        self.info.setText(shape)
        self.place_outlines()
        self.refresh_marks()  # the crosses follow the tiles (drawn later than the trace on long prompts)

    def _shape_text(self) -> str:
        """The grid in words: "4 layers x 4 heads · 14 tokens"; a hybrid's kinds of layer and what its tiles show."""
        trace, cfg = self.trace, self.trace.config
        if effective.uniform(cfg):
            return f"{cfg.n_layers} layers \u00d7 {cfg.n_heads} heads \u00b7 {trace.n_tokens} tokens"
        kinds: dict[str, int] = {}
        for layer in range(cfg.n_layers):
            kind = effective.kind_of(trace, layer) or ("attention" if cfg.layer(layer).is_attention else "no mixer")
            kinds[kind] = kinds.get(kind, 0) + 1
        parts = ", ".join(f"{count} {kind}" for kind, count in kinds.items())
        return (f"{cfg.n_layers} layers ({parts}) \u00b7 {trace.n_tokens} tokens \u00b7 recurrent layers' tiles: "
                "each row's shares of |weights|")

    def _fit_home(self, *_) -> None:
        """Fit the mosaic to the view (the aspect is locked): the room left over goes below it, not
        above, so the tiles start under their column labels (pyqtgraph would centre them, leaving a gap
        between the labels and the tiles in a tall view); centred across. Not after a zoom or pan."""
        if self._home is None:
            return
        (x0, x1), (y0, y1) = self._home
        vb = self.overview_plot.vb
        width, height = vb.width(), vb.height()
        if width <= 1 or height <= 1:  # not laid out yet
            self.overview_plot.setRange(xRange=(x0, x1), yRange=(y0, y1), padding=0)
            return
        per = max((x1 - x0) / width, (y1 - y0) / height)  # data units per pixel, the same both ways
        middle = (x0 + x1) / 2
        self.overview_plot.setRange(xRange=(middle - per * width / 2, middle + per * width / 2),
                                    yRange=(y0, y0 + per * height), padding=0)

    def _left_home(self, *_) -> None:
        self._home = None

    def place_outlines(self) -> None:
        if self.geometry is None:
            return
        layer, head = self.layer_head()
        x, y = self.geometry.tile_origin(layer, head)
        t = self.geometry.tile
        self.selected_outline.setRect(QRectF(x - 0.5, y - 0.5, t + 1, t + 1))
        self.statistics_outline.setRect(QRectF(head, layer, 1, 1))
        if self.statistics_area.isVisible():
            self.statistics_table.select_head(layer, head)

    def draw_statistics(self) -> None:
        if self.trace is None or not self.stats_toggle.isChecked():
            return
        cfg, trace, name = self.trace.config, self.trace, self.statistic
        over_corpus = self.corpus(name)
        if over_corpus is None and name not in self._statistics and not all_heads_cheap(trace) \
                and trace.memo_get(("attention.statistic", name)) is None:
            self.statistics.plot.setTitle(f"{analysis.STATISTIC_LABELS[name]}: computing\u2026")
            self.statistics.set_data(np.full((cfg.n_layers, self.columns()), np.nan, np.float32))
            self.later(("statistic",), lambda check: statistic_of(trace, name),
                       lambda _: self.draw_statistics() if self.statistic == name else None, priority=3)
            return
        values = self.statistic_values()
        label = analysis.STATISTIC_LABELS[self.statistic]
        levels = statistic_levels(self.statistic, values, over_corpus.window if over_corpus else self.trace.n_tokens)
        chance = over_corpus.chance if over_corpus else chance_level(self.statistic, trace.token_ids, cfg.causal)
        label += f" {over_corpus.source}" if over_corpus else ""  # else this prompt's; chance: uniform attention's
        self.statistics.plot.setTitle(label + (f" (chance {chance:.3f})" if math.isfinite(chance) else ""))
        self.statistics.absent = self.absent_text
        self.statistics.set_data(values, [f"L{layer}" for layer in range(cfg.n_layers)],
                                 [f"H{head}" for head in range(values.shape[1])], levels=levels, value_name=label)
        self.statistics_table.set_values(values, label, chance, self.present())
        self.statistics_table.select_head(*self.layer_head())
        # each value in its cell, in black or white by the cell's luminance; CellTexts leaves out text
        # that has no room on screen (the table and the tooltips have every value)
        texts = [[f"{v:.2f}" if math.isfinite(v) else "\u2013" for v in row] for row in values]
        self.statistic_cells.set_cells(texts, np.zeros(values.shape, bool),
                                       dark_cells(self.statistics.colormap, values, levels) & np.isfinite(values))


    # --- hover and click on the overview ---------------------------------------------------------
    def overview_text(self, layer: int, head: int, query: int, key: int) -> str:
        tokens, geo = self.trace.tokens, self.geometry
        missing = self.absent_text(layer, head)
        if missing:
            return missing
        x, y = geo.tile_origin(layer, head)
        value = self.mosaic[y + query // geo.factor, x + key // geo.factor]
        kind = effective.kind_of(self.trace, layer)
        what = "weight" if kind is None else "share of |effective weights|"
        where = f"L{layer} H{head}" + (f" ({kind})" if kind is not None else "")
        if geo.downsampled:
            qs, ks = geo.tokens_of_pixel(query // geo.factor), geo.tokens_of_pixel(key // geo.factor)
            text = (f"{where}: queries {qs.start}\u2013{qs.stop - 1} \u2192 "
                    f"keys {ks.start}\u2013{ks.stop - 1}: mean {what} {format_value(value)}")
        else:
            text = (f"{where}: query {quoted(tokens[query])} ({query}) \u2192 "
                    f"key {quoted(tokens[key])} ({key}): {what} {format_value(value)}")
        name = self.statistic
        ready = name in self._statistics or self.trace.memo_get(("attention.statistic", name)) is not None
        if self.stats_toggle.isChecked() and ready:
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


    # --- a model whose layers differ --------------------------------------------------------------
    def columns(self) -> int:
        """The grid's columns: the heads, or (layers that differ) the most maps a layer shows."""
        cfg = self.trace.config
        return cfg.n_heads if effective.uniform(cfg) else effective.grid_columns(cfg)

    def present(self) -> np.ndarray | None:
        """[L, columns] bool: which cells of the grid are a map (None: all of them)."""
        cfg = self.trace.config
        if effective.uniform(cfg):
            return None
        shown = [effective.grid_maps(cfg, layer) for layer in range(cfg.n_layers)]
        return np.arange(self.columns())[None, :] < np.array(shown)[:, None]

    def absent_text(self, layer: int, head: int) -> str:
        """Why the grid has no map at (layer, head) ("" where it has one)."""
        cfg = self.trace.config
        if effective.uniform(cfg) or head < effective.grid_maps(cfg, layer):
            return ""
        count = effective.maps_of(cfg, layer)
        if count == 0:
            return f"L{layer}: a block without a token mixer (only its FFN): no weights over tokens"
        if count > head:  # a convolution's channels beyond the grid's columns
            return f"L{layer}: channel {head} of {count}: choose it with the Head box to see it in the detail view"
        return f"L{layer} has {count} {'heads' if count != 1 else 'head'}"

    # --- exported data ---------------------------------------------------------------------------
    def overview_data(self) -> tuple[np.ndarray, list[str], list[str]]:
        """Every head's exact pattern stacked: [L*H*n, n], rows "L{l} H{h} {i}:{token}", columns keys (a hybrid:
        each map on the grid, a recurrent layer's exact effective attention); when they do not fit the budget,
        the all-heads image as drawn (pooled tiles)."""
        trace, cfg = self.trace, self.trace.config
        if not effective.uniform(cfg) and effective.maps_fit(trace):
            return effective.stacked_maps(trace)
        if not layer_patterns_fit(trace):
            rows, cols = self.mosaic.shape
            return self.mosaic, [f"pixel row {r}" for r in range(rows)], [f"pixel column {c}" for c in range(cols)]
        labels = token_labels(trace.tokens)
        source = head_source(trace)
        stack = np.concatenate([source(layer, head) for layer in range(cfg.n_layers)
                                for head in range(cfg.n_heads)]).astype(np.float32, copy=False)
        rows = [f"L{layer} H{head} {label}" for layer in range(cfg.n_layers)
                for head in range(cfg.n_heads) for label in labels]
        return stack, rows, labels


    def statistics_table_data(self) -> tuple[np.ndarray, list[str], list[str]]:
        """The table as shown (its current order): one row per head, "L{l} H{h}", the statistic's value."""
        table = self.statistics_table
        values = self.statistic_values()
        heads = [table.head_at(r) for r in range(table.model().rowCount())]
        column = np.array([values[layer, head] for layer, head in heads], dtype=np.float64)
        return column, [f"L{layer} H{head}" for layer, head in heads], [analysis.STATISTIC_LABELS[self.statistic]]

    def statistics_data(self) -> tuple[np.ndarray, list[str], list[str]]:
        """The chosen head statistic [L, H] with "L{l}" / "H{h}" labels."""
        cfg = self.trace.config
        values = self.statistic_values()
        return (values, [f"L{layer}" for layer in range(cfg.n_layers)], [f"H{head}" for head in range(values.shape[1])])
