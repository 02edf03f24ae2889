"""The attention panel: every head at a glance, one head in detail, one query row as bars.

* Overview (``overview.py``): the patterns of all layers x heads tiled into ONE ImageItem (rows =
  layers, columns = heads, see ``explorer.core.display.mosaic``; long prompts are block-averaged
  there). The selected head is outlined; clicking a tile selects that head. "Statistics" adds an
  L x H heatmap of one head statistic (``explorer.core.analysis.attention``) below it.
* Detail: the selected head's exact pattern (softmax, sequential colours) or scaled scores
  (q.k/sqrt(d_head), diverging colours, symmetric levels), queries as rows and keys as columns;
  masked future positions are hatched grey, not a colour. Clicking a row selects that query token.
* Row: the selected query token's row as bars over the key tokens (the last token when no token
  is selected).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, Qt, QTimer
from PySide6.QtWidgets import (
    QButtonGroup,
    QCheckBox,
    QComboBox,
    QHBoxLayout,
    QLabel,
    QSplitter,
    QStackedWidget,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from explorer.core.analysis import attention as analysis
from explorer.core.analysis import attention_tiles as tiles
from explorer.core.display.labels import scores_formula, token_labels
from explorer.core.display.levels import finite_levels
from explorer.core.display.mosaic import MosaicGeometry
from explorer.core.trace import Trace
from explorer.ui.interventions.menu import component_actions, install_targets
from explorer.ui.interventions.targets import Component, Point, Target, head_cells
from explorer.ui.panels.attention.long_detail import (LongHeadView, is_long, long_detail_data, pooled_head,
                                                      show_long_head)
from explorer.ui.panels.attention.corpus_scores import CorpusScores
from explorer.ui.panels.attention.layer_kinds import (KIND_TIPS, draw_query_row, follow_layer_kind, long_recurrent_row,
                                                      recurrent_map_ready, show_no_mixer)
from explorer.ui.panels.attention import effective
from explorer.ui.panels.attention.overview import AttentionOverview
from explorer.ui.panels.attention.questions import attention_questions
from explorer.ui.panels.attention.views import (
    BAR_PATTERN,
    KINDS,
    QUERY_OUTLINE,
    AttentionHeatmap,
    all_heads_cheap,
    layer_patterns_fit,
    mosaic_of,
    statistic_of,
)
from explorer.ui.panels.base import Panel, PanelSnapshot, PanelView
from explorer.ui.session.selection import Selection
from explorer.ui.widgets.plots import fixed_plot, outline
from explorer.ui.widgets.role_bands import set_plot_bands, trace_bands
from explorer.ui.widgets.steady_label import SteadyLabel


@dataclass(frozen=True)
class AttentionSnapshot(PanelSnapshot):
    """The attention panel's options for ``prepare``: whether the statistics are shown, and which."""

    statistics_on: bool = False
    statistic: str = "induction"


@dataclass(frozen=True)
class AttentionView(PanelView):
    """The all-heads mosaic and its geometry (None: a long prompt's, computed progressively) and,
    when the snapshot shows statistics, the chosen statistic's [L, H] values."""

    mosaic: tuple[np.ndarray, MosaicGeometry] | None = None
    statistic: str = "induction"
    statistic_values: np.ndarray | None = None
    detail: tuple[int, int, np.ndarray] | None = None  # a recurrent head's map (layer, head, [n, n]) for the detail


class AttentionPanel(Panel):
    def __init__(self, selection: Selection, parent: QWidget | None = None) -> None:
        super().__init__(selection, parent)
        self.kind = "pattern"
        self.statistic = "induction"
        self._head_cache: dict[tuple[int, int], tuple[np.ndarray, np.ndarray | None]] = {}  # current trace only
        self._rows: dict[tuple[int, int, int], np.ndarray] = {}  # a long recurrent head's rows, current trace only
        self._detail_shown: tuple | None = None  # (trace, layer, head, kind) the detail heatmap holds
        self._detail_timer = QTimer(self)  # coalesces "layer" + "head" into one redraw
        self._detail_timer.setSingleShot(True)
        self._detail_timer.setInterval(0)
        self._detail_timer.timeout.connect(self._draw_detail)
        self._build_controls()
        self._build_overview()
        self._build_detail()
        splitter = QSplitter(Qt.Orientation.Horizontal)
        splitter.addWidget(self.all_heads.column)
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
        for kind, text in (("pattern", "pattern"), ("scores", "scores")):
            tip = KIND_TIPS[kind]
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
        row.addWidget(self.stats_toggle)
        self.stat_box = QComboBox()
        for name, label in analysis.STATISTIC_LABELS.items():
            self.stat_box.addItem(label, name)
        self.stat_box.setCurrentIndex(self.stat_box.findData(self.statistic))
        self.stat_box.setEnabled(False)
        self.stat_box.currentIndexChanged.connect(lambda _: self.set_statistic(self.stat_box.currentData()))
        row.addWidget(self.stat_box)
        self.corpus_scores = CorpusScores(lambda: self.show_statistics(True) if not self.stats_toggle.isChecked()
                                          else self.all_heads.draw_statistics())  # a corpus run's scores instead
        row.addWidget(self.corpus_scores.toggle)
        self.info = SteadyLabel()  # its height kept across head switches: the plots below do not move
        self.info.setStyleSheet("color: palette(placeholder-text)")
        self.info.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        # a long "… overview averaged over 8x8-token blocks" wraps, never widens the panel
        row.addWidget(self.info, 1)
        self.body.addLayout(row)

    def _build_overview(self) -> None:
        """The all-heads grid and the head statistics: an object of their own, handed what they use."""
        self.all_heads = heads = AttentionOverview(self.selection, self.info, self.stats_toggle, self.later,
                                                   self.refresh_marks, self.layer_head, lambda: self.statistic,
                                                   self.corpus_scores.of)
        # the widgets, under the panel's names too (tests, exports, the layout)
        self.overview, self.overview_plot, self.overview_image = heads.overview, heads.overview_plot, heads.overview_image
        self.overview_colorbar, self.selected_outline = heads.overview_colorbar, heads.selected_outline
        self.statistics, self.statistics_outline = heads.statistics, heads.statistics_outline
        self.statistic_cells, self.statistics_table = heads.statistic_cells, heads.statistics_table
        self.statistics_area = heads.statistics_area

    @property
    def geometry(self) -> MosaicGeometry | None:
        """How the all-heads image is tiled (None until it is drawn)."""
        return self.all_heads.geometry

    @property
    def mosaic(self) -> np.ndarray:
        """The all-heads image as drawn."""
        return self.all_heads.mosaic

    def statistic_values(self, name: str | None = None) -> np.ndarray:
        """The [L, H] values of a head statistic for the current trace (computed once per trace)."""
        return self.all_heads.statistic_values(name)

    def head_at_scene(self, scene_pos: QPointF) -> tuple[int, int] | None:
        """(layer, head) of the overview tile under a scene position (what a click selects)."""
        return self.all_heads.head_at_scene(scene_pos)

    def overview_text(self, layer: int, head: int, query: int, key: int) -> str:
        return self.all_heads.overview_text(layer, head, query, key)

    # --- what a right-click can switch off (explorer.ui.interventions.targets) ---------------------
    def intervention_targets(self) -> list[Target]:
        """A head's tile in the all-heads grid, its cell in the head-statistics heatmap; questions (questions.py)."""
        heads = self.all_heads
        return [Target(self.overview_plot, heads.tile_component, heads.tile_mark_points),
                head_cells(self.statistics, is_head=self._is_head), *attention_questions(self)]

    def _is_head(self, layer: int, head: int) -> bool:
        return self.trace is not None and effective.attention_head(self.trace.config, layer, head)

    def tile_marks(self) -> list[Point]:
        """Where the all-heads grid draws its red crosses now (one per switched-off head)."""
        return list(self._intervention_marks[0].points)

    def _build_detail(self) -> None:
        self.detail = AttentionHeatmap(colormap="viridis")
        self.detail.cell_clicked.connect(lambda row, _col: self.selection.set_token(row))
        self.query_outline = outline(self.detail.plot, QUERY_OUTLINE)
        self.long_detail = LongHeadView()  # a long prompt's head: pooled overview + exact tiles
        self.long_detail.cell_clicked.connect(lambda row, _col: self.selection.set_token(row))
        self.long_query_outline = outline(self.long_detail.plot, QUERY_OUTLINE)
        self.detail_stack = QStackedWidget()
        self.detail_stack.addWidget(self.detail)
        self.detail_stack.addWidget(self.long_detail)

        self.row_plot = fixed_plot()
        self.row_bars = pg.BarGraphItem(x=[], height=[], width=0.8, brush=BAR_PATTERN, pen=None)
        self.row_plot.addItem(self.row_bars)
        self.row_values = np.zeros(0, dtype=np.float32)

        column = QWidget()
        layout = QVBoxLayout(column)
        layout.setContentsMargins(0, 0, 0, 0)
        splitter = QSplitter(Qt.Orientation.Vertical)
        splitter.addWidget(self.detail_stack)
        splitter.addWidget(self.row_plot)
        splitter.setStretchFactor(0, 3)
        splitter.setStretchFactor(1, 1)
        layout.addWidget(splitter)
        self._detail_column = column

    def _register_exports(self) -> None:
        self.add_exportable("attention, all heads", self.overview, self.all_heads.overview_data)
        self.add_exportable("attention, selected head", self.detail, self._detail_data)
        self.add_exportable("attention, selected query row", self.row_plot, self._row_data)
        self.add_exportable("head statistics", self.statistics, self.all_heads.statistics_data)
        install_targets(self)  # right-click a tile or a cell: switch a head off (intervention_targets)
        self.add_exportable("head statistics table", self.statistics_table, self.all_heads.statistics_table_data)
        # right-click a row of the table: switch that head off too (above the export entries)
        self.statistics_table.head_actions = lambda layer, head, parent: component_actions(
            self, Component.head(layer, head), parent)

    def attach(self, session) -> None:  # noqa: ANN001 - the window's Session
        super().attach(session)
        self.corpus_scores.attach(session.corpus)  # "over the corpus" while a run is open

    # --- the panel contract ----------------------------------------------------------------------
    def snapshot(self) -> AttentionSnapshot:
        """The selection and the statistics options (shown? which one?), on the GUI thread."""
        return self._snapshot(AttentionSnapshot, statistics_on=self.stats_toggle.isChecked(),
                              statistic=self.statistic)

    def needed_keys(self, trace: Trace, snapshot: PanelSnapshot) -> list[str]:
        """Every layer's [H, n, n] pattern when they fit ``LAYER_PATTERN_BUDGET`` (one batched
        computation per layer, done by the worker); otherwise nothing: long prompts are drawn head
        by head from the stored q and k, and each tile is downsampled at once."""
        if not layer_patterns_fit(trace) or not all_heads_cheap(trace):
            return []
        return [f"blocks.{layer}.attn.pattern" for layer in range(trace.config.n_layers)]

    def prepare(self, trace: Trace, snapshot: AttentionSnapshot) -> AttentionView:
        """On the worker thread: the patterns (when they fit), the mosaic and, if the snapshot shows
        them, the statistic."""
        super().prepare(trace, snapshot)
        layer = min(snapshot.layer, trace.config.n_layers - 1)
        head = min(snapshot.head, effective.layer_heads(trace, layer) - 1)
        recurrent = effective.kind_of(trace, layer) is not None
        detail = None
        if recurrent and not is_long(trace):  # the selected recurrent head's map, off the GUI thread
            detail = (layer, head, effective.head_map(trace, layer, head))
        if not all_heads_cheap(trace):  # the mosaic and statistics come progressively (draw)
            if is_long(trace):  # the selected head's pooled overview, never its [n, n] matrix
                pooled_head(trace, layer, head, "effective" if recurrent else "pattern")
            elif effective.maps_of(trace.config, layer) and not recurrent:
                trace.head(layer, head)
            return AttentionView(trace, statistic=snapshot.statistic, detail=detail)
        values = statistic_of(trace, snapshot.statistic) if snapshot.statistics_on else None
        return AttentionView(trace, mosaic_of(trace), snapshot.statistic, values, detail)

    def draw(self, view: AttentionView) -> None:
        self._head_cache, self._rows = {}, {}
        if view.detail is not None:
            self._head_cache[view.detail[:2]] = (view.detail[2], None)
        prepared = {view.statistic: view.statistic_values} if view.statistic_values is not None else {}
        self.all_heads.show(view.trace, view.mosaic, prepared)
        self._draw_detail()

    def selection_changed(self, what: str) -> None:
        if what in ("layer", "head"):
            self.all_heads.place_outlines()
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
        self.stat_box.setEnabled(on)
        self.statistics_area.setVisible(on)
        if on:
            self.all_heads.give_statistics_room()
        self.all_heads.draw_statistics()

    def set_statistic(self, name: str) -> None:
        """Choose the head statistic (a key of ``analysis.STATISTICS``)."""
        if name not in analysis.STATISTICS:
            raise ValueError(f"unknown head statistic {name!r}")
        self.statistic = name
        index = self.stat_box.findData(name)
        if self.stat_box.currentIndex() != index:
            self.stat_box.setCurrentIndex(index)  # re-enters through currentIndexChanged
            return
        self.all_heads.draw_statistics()

    def query_row(self) -> int:
        """The query token whose row is drawn as bars: the selected token, else the last one."""
        n = self.trace.n_tokens
        token = self.selection.token
        return n - 1 if token is None else min(max(token, 0), n - 1)

    def layer_head(self) -> tuple[int, int]:
        """The selected (layer, head), kept inside the current trace's ranges (the layer's own heads)."""
        layer = min(self.selection.layer, self.trace.config.n_layers - 1)
        return layer, min(self.selection.head, effective.layer_heads(self.trace, layer) - 1)


    # --- drawing ---------------------------------------------------------------------------------
    def head_matrices(self, layer: int, head: int) -> tuple[np.ndarray, np.ndarray | None]:
        """(pattern, scores) [n, n] of one head, exact, from the trace (the last few kept); a recurrent layer's
        (effective attention, None)."""
        key = (layer, head)
        if key not in self._head_cache:
            while len(self._head_cache) >= 4:
                self._head_cache.pop(next(iter(self._head_cache)))
            if effective.kind_of(self.trace, layer) is not None:
                self._head_cache[key] = (effective.head_map(self.trace, layer, head), None)
            else:
                self._head_cache[key] = (self.trace.head(layer, head, "pattern"), self.trace.head(layer, head, "scores"))
        return self._head_cache[key]

    def _detail_matrix(self) -> tuple[np.ndarray, np.ndarray]:
        layer, head = self.layer_head()
        pattern, scores = self.head_matrices(layer, head)
        if scores is None:  # a recurrent layer: its effective attention, later keys hatched
            return pattern, effective.future_keys(self.trace.n_tokens, self.trace.config.causal)
        return (scores if self.kind == "scores" else pattern), np.isneginf(scores)

    def _draw_detail(self) -> None:
        self._detail_timer.stop()
        if self.trace is None:
            return
        layer, head = self.layer_head()
        kind = effective.kind_of(self.trace, layer)
        follow_layer_kind(self, kind)
        if not effective.maps_of(self.trace.config, layer):
            show_no_mixer(self, layer)
            return
        if is_long(self.trace):
            self._draw_long_detail()
            return
        self.detail_stack.setCurrentWidget(self.detail)
        if kind is not None and not recurrent_map_ready(self, layer, head):
            return
        matrix, masked = self._detail_matrix()
        name, colormap, symmetric = effective.EFFECTIVE if kind is not None else KINDS[self.kind]
        self.detail.set_colormap(colormap, symmetric)
        if kind is not None:
            levels = effective.levels_of(matrix, ~masked)
        elif self.kind == "pattern":
            levels = (0.0, finite_levels(matrix)[1])
        else:
            levels = finite_levels(matrix, symmetric=True, masked=masked)
        tokens = list(self.trace.tokens)
        self.detail.set_data(matrix, tokens, tokens, levels=levels, masked=masked, value_name=name)
        self._detail_shown = (self.trace, layer, head, kind is not None or self.kind)
        self.detail.set_token_bands(*(trace_bands(self.trace),) * 2)  # a conversation's roles on both axes
        cfg = self.trace.config  # the family's own scale, bias, cap and window, as the forward pass applies them
        what = "attention pattern" if self.kind == "pattern" else scores_formula(cfg, layer)
        self.detail.plot.setTitle(effective.detail_title(self.trace, layer, head, what))  # the axes: query, key
        self.detail.plot.setLabel("left", "query")
        self.detail.plot.setLabel("bottom", "key")
        self._draw_query_row()

    def _draw_long_detail(self) -> None:
        """A long prompt's head: its pooled overview (computed on a worker the first time) and tiles."""
        self.detail_stack.setCurrentWidget(self.long_detail)
        set_plot_bands(self.long_detail.plot, *(trace_bands(self.trace),) * 2)
        layer, head = self.layer_head()
        kind = "effective" if effective.kind_of(self.trace, layer) is not None else self.kind
        if show_long_head(self.long_detail, self.trace, layer, head, kind, self.later, self._draw_detail):
            self._draw_query_row()

    def _query_values(self, i: int) -> tuple[np.ndarray, np.ndarray] | None:
        """The selected head's row for query ``i`` and its mask, exact (None: a long recurrent row being computed)."""
        layer, head = self.layer_head()
        recurrent = effective.kind_of(self.trace, layer) is not None
        if not is_long(self.trace):
            if recurrent and self._detail_shown != (self.trace, layer, head, True):
                return None  # its map is being computed: the bars follow it
            return np.asarray(self.detail.matrix[i], dtype=np.float32), self.detail.masked[i]
        if recurrent:  # one row of a long recurrent map is tens of ms: on a worker, kept for the next switch
            return long_recurrent_row(self, layer, head, i)
        if self.kind == "scores":
            scores = tiles.query_row(self.trace, layer, head, "scores", i)
            return scores, np.isneginf(scores)
        scores, pattern = tiles.query_rows(self.trace, layer, head, i)  # one product of q and k for both
        return pattern, np.isneginf(scores)

    def _draw_query_row(self) -> None:
        draw_query_row(self)

    # --- exported data ---------------------------------------------------------------------------
    def _detail_data(self) -> tuple[np.ndarray, list[str], list[str]]:
        """The selected head's [n, n] pattern or scores (as shown), queries x keys; for a long prompt
        what the view shows: its exact tile when zoomed in, else the pooled overview (blocks as labels)."""
        if is_long(self.trace):
            return long_detail_data(self.long_detail)
        labels = token_labels(self.trace.tokens)
        return self._detail_matrix()[0], labels, labels

    def _row_data(self) -> tuple[np.ndarray, list[str], list[str]]:
        """The selected query's row [n]: one entry per key (row labels); the one column label
        names the query and the quantity."""
        labels = token_labels(self.trace.tokens)
        i, layer = self.query_row(), self.layer_head()[0]
        got = self._query_values(i)
        values = got[0] if got is not None else np.full(len(labels), np.nan, np.float32)  # (still being computed)
        quantity = effective.row_title(self.trace, layer) if effective.kind_of(self.trace, layer) else KINDS[self.kind][0]
        return values, labels, [f"{quantity} from query {labels[i]}"]
