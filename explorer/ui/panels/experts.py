"""Experts: where a mixture of experts sends each token, how close that call was, and what the chosen experts do.

Shown only for a model with mixture-of-experts layers (``applies_to``). For the MoE layer of the shared
selection (the next MoE layer after a dense one):

* the routing map, tokens x experts: each chosen expert's weight (or every expert's router score), the
  experts a token did not choose dimmed; beside it each token's top-k margin (how far the k-th expert in was
  above the best one left out, log scale; red where rounding alone could flip it) and under it the load
  (tokens per expert, the same columns); the line above says the close calls in words;
* the selected token through every MoE layer ("lanes") and each chosen expert's direct effect on the DLA
  target's logit (``token_view.py``); expert-level attribution patching in its own tab (``patching.py``).

Right-click an expert (a column or cell of a map, a load bar): switch it off, force it into the top-k or scale
its router logit, for every token or the one under the mouse (``interventions/experts.py``); a red cross marks
it where it is drawn. The numbers are ``core/analysis/experts.py``'s (``views.py``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from PySide6.QtCore import QPointF, QRectF
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QInputDialog, QLabel, QTabWidget, QWidget

from explorer.core.display.labels import token_labels
from explorer.core.display.tokens import quoted
from explorer.core.interventions.spec import Intervention
from explorer.core.trace import Trace
from explorer.ui.interventions.experts import ExpertComponent, bar_marks, grid_marks, map_marks
from explorer.ui.interventions.menu import install_targets
from explorer.ui.interventions.targets import Point, Target
from explorer.ui.panels.base import Panel, PanelSnapshot
from explorer.ui.panels.experts_patching import ExpertPatching
from explorer.ui.panels.experts_token import SelectedToken, ordinal
from explorer.ui.panels.experts_views import (
    NO_MOE,
    ORDERS,
    VALUES,
    ExpertsSnapshot,
    ExpertsView,
    LayerView,
    axis_tops,
    effects_are_cheap,
    effects_of,
    experts_view,
    lanes_of,
    layer_view,
    load_table,
    margin_table,
    margin_text,
    moe_layer_of,
    routing_note,
    strip_image,
)
from explorer.ui.panels.experts_widgets import ROW_PEN, ChoiceMap, LoadBars, MarginStrip
from explorer.ui.session.selection import Selection
from explorer.ui.widgets.heatmap import format_value
from explorer.ui.widgets.plots import outline
from explorer.ui.widgets.steady_label import SteadyLabel

WARN_STYLE = "background: #fdecea; color: #8a1c12; padding: 3px; border-radius: 3px"
QUIET_STYLE = "color: palette(placeholder-text); padding: 3px"


class ExpertsPanel(Panel):
    def __init__(self, selection: Selection, parent: QWidget | None = None) -> None:
        super().__init__(selection, parent)
        self.order, self.values = "index", "weights"
        self._view: LayerView | None = None
        self._columns = np.zeros(0, np.int64)
        self._limits: dict | None = None
        self._strip_of: LayerView | None = None
        self._warned: bool | None = None
        self.factor_value: Any = None  # tests replace the "Scale by…" dialog (a callable giving the factor)
        self._build()
        self.add_exportable("routing map", self.map, self._map_data)
        self.add_exportable("top-k margin", self.strip.plot, self._margin_data)
        self.add_exportable("expert load", self.load.plot, self._load_data)
        self.add_exportable("selected token's lanes", self.token_side.lanes_map, self.token_side.lanes_data)
        self.add_exportable("chosen experts' direct effects", self.token_side.effects, self.token_side.effects_data)
        self.add_exportable("expert attribution patching", self.patching.map, self.patching.data)
        install_targets(self)

    def _build(self) -> None:
        row = QHBoxLayout()
        row.addWidget(QLabel("MoE layer"))
        self.layer_combo = QComboBox()
        self.layer_combo.setToolTip("The mixture-of-experts layer shown (it follows the layer selected anywhere)")
        self.layer_combo.activated.connect(lambda i: self.selection.set_layer(self.layer_combo.itemData(i)))
        row.addWidget(self.layer_combo)
        row.addSpacing(8)
        row.addWidget(QLabel("map"))
        self.values_combo = QComboBox()
        for key, text in VALUES.items():
            self.values_combo.addItem(text, key)
        self.values_combo.setToolTip("chosen weights: what multiplies each chosen expert's output (0 elsewhere); "
                                     "router score: every expert's score before the top-k, the chosen ones lit")
        self.values_combo.activated.connect(lambda _i: self.set_values(self.values_combo.currentData()))
        row.addWidget(self.values_combo)
        row.addWidget(QLabel("columns by"))
        self.order_combo = QComboBox()
        for key, text in ORDERS.items():
            self.order_combo.addItem(text, key)
        self.order_combo.activated.connect(lambda _i: self.set_order(self.order_combo.currentData()))
        row.addWidget(self.order_combo)
        self.info = SteadyLabel()
        self.info.setStyleSheet("color: palette(placeholder-text)")
        row.addWidget(self.info, 1)
        self.controls = QWidget()
        self.controls.setLayout(row)
        row.setContentsMargins(0, 0, 0, 0)
        self.body.addWidget(self.controls)
        self.warning = SteadyLabel()
        self.body.addWidget(self.warning)
        self.note = QLabel(NO_MOE)
        self.note.setWordWrap(True)
        self.note.setStyleSheet("font-size: 14px; padding: 16px")
        self.note.setVisible(False)
        self.body.addWidget(self.note)

        self.map = ChoiceMap(colormap="viridis", title="routing")
        self.map.plot.setLabel("left", "token")
        self.map.plot.setLabel("bottom", "expert")
        self.map.describe = self._describe_cell
        self.map.cell_clicked.connect(lambda r, _c: self.selection.set_token(r))
        self.map.ci.layout.setRowStretchFactor(0, 4)
        self.map.ci.layout.setRowStretchFactor(1, 1)
        self.strip = MarginStrip(self.map)
        self.strip.text = self._margin_text
        self.load = LoadBars(self.map)
        self.load.text = self._load_text
        self.row_outline = outline(self.map.plot, ROW_PEN, z=19, visible=False)
        self.token_side = SelectedToken()
        self.token_side.values_combo.activated.connect(lambda _i: self._draw_token())
        self.token_side.lanes_map.cell_clicked.connect(self._lane_clicked)
        self.patching = ExpertPatching(self._patch_context, self.selection.set_layer)
        self.content = QTabWidget()  # each view the panel's whole width: 64 or 128 columns stay readable at 1280 px
        self.content.addTab(self.map, "Routing map")
        self.content.addTab(self.token_side, "Selected token")
        self.content.addTab(self.patching, "Patching estimate")
        self.body.addWidget(self.content, 1)

    # --- the panel contract ----------------------------------------------------------------------
    @classmethod
    def applies_to(cls, config: Any) -> bool:
        return bool(getattr(config, "moe_layers", ()))

    def available(self) -> bool:
        """Hidden until there is a model or a trace to ask ``applies_to`` about (``window/applicable.py``)."""
        return self.session is not None and (self.session.loaded is not None or self.session.frame is not None)

    def snapshot(self) -> ExpertsSnapshot:
        return self._snapshot(ExpertsSnapshot, order=self.order, values=self.values)

    def prepare(self, trace: Trace, snapshot: PanelSnapshot) -> ExpertsView:
        return experts_view(trace, snapshot)

    def draw(self, view: ExpertsView) -> None:
        trace = view.trace
        moe = list(trace.config.moe_layers)
        self.note.setVisible(not moe)
        for widget in (self.controls, self.warning, self.content):
            widget.setVisible(bool(moe))
        if not moe:
            self._view = None
            return
        items = [self.layer_combo.itemData(i) for i in range(self.layer_combo.count())]
        if items != moe:
            self.layer_combo.clear()
            for m in moe:
                self.layer_combo.addItem(f"L{m}", m)
        self._draw_layer(view.layer)
        self._draw_token()

    def selection_changed(self, what: str) -> None:
        if self.trace is None or not self.trace.config.moe_layers:
            return
        if what == "layer":
            self._draw_layer()
        elif what == "token":
            self._place_row()
            self._draw_token()

    def tokenizer_changed(self) -> None:
        self.patching.clear("A new model: the previous estimates were cleared." if self.patching.result else "")

    # --- controls --------------------------------------------------------------------------------
    def set_order(self, order: str) -> None:
        """Columns by expert number ("index") or by load, busiest first ("load")."""
        self.order = order
        self.order_combo.setCurrentIndex(list(ORDERS).index(order))
        self._draw_layer(self._view)

    def set_values(self, values: str) -> None:
        """The map shows the chosen weights ("weights") or every expert's router score ("scores")."""
        self.values = values
        self.values_combo.setCurrentIndex(list(VALUES).index(values))
        self._draw_layer(self._view)

    def shown_layer(self) -> int | None:
        return None if self._view is None else self._view.layer

    def columns(self) -> np.ndarray:
        """The expert ids of the routing map's columns, left to right."""
        return self._columns

    def expert_load(self) -> np.ndarray:
        """Tokens routed to each expert (by expert id) in the layer shown."""
        return np.zeros(0, np.int64) if self._view is None else self._view.load

    def map_marks(self) -> list[Point]:
        """Where the routing map draws its red crosses now (down a switched-off expert's column)."""
        return list(self._intervention_marks[0].points)

    def load_marks(self) -> list[Point]:
        """Where the load bars draw theirs (one under each expert switched off for every token)."""
        return list(self._intervention_marks[1].points)

    # --- drawing ---------------------------------------------------------------------------------
    def _draw_layer(self, ready: LayerView | None = None) -> None:
        trace = self.trace
        if trace is None:
            return
        layer = moe_layer_of(trace, self.selection.layer)
        view = ready if ready is not None and ready.layer == layer else layer_view(trace, layer)
        self._view = view
        cfg, n = trace.config, trace.n_tokens
        self._columns = view.columns(self.order)
        cols = self._columns
        matrix = (view.weights if self.values == "weights" else view.scores)[:, cols]
        tops = axis_tops(trace)
        top = max(tops.weight if self.values == "weights" else tops.score, 1e-6)  # every layer's: the bar stays put
        limits = dict(xMin=0, xMax=max(cols.size, 1), yMin=0, yMax=max(n, 1), minXRange=min(4, max(cols.size, 1)),
                      minYRange=min(2, n))
        if limits != self._limits:  # first (the old ones would clamp the new range); only on a change of shape
            self._limits = limits
            self.map.plot.vb.setLimits(**limits)
        self.map.set_choice(matrix, view.chosen[:, cols], token_labels(trace.tokens), [f"#{e}" for e in cols.tolist()],
                            (0.0, top), "weight" if self.values == "weights" else "router score",
                            dim=215 if self.values == "weights" else 150, key=(view, self.order))
        what = "chosen weights" if self.values == "weights" else "router scores"
        title = f"L{view.layer} {what}, top {cfg.experts_per_token} of {cfg.n_experts}"
        if self.map.plot.titleLabel.text != title:  # (a title set again is laid out again)
            self.map.plot.setTitle(title)
        if self._strip_of is not view:  # (the margins do not depend on the map's values or columns)
            self._strip_of = view
            self.strip.set_margins(view.margin, strip_image(trace, view), view.typical_tolerance, tops.margin)
        self.load.set_load(view.load[cols], n * cfg.experts_per_token / max(cfg.n_experts, 1), tops.load)
        if self.layer_combo.currentData() != view.layer:
            self.layer_combo.setCurrentIndex(max(self.layer_combo.findData(view.layer), 0))
        dense = self.selection.layer != view.layer
        shared = " + a shared one" if cfg.d_shared else ""
        self.info.setText((f"L{self.selection.layer} is dense: showing L{view.layer}. " if dense else "")
                          + f"{len(cfg.moe_layers)} MoE layers \u00d7 {cfg.n_experts} experts{shared}")
        text, warn = routing_note(view, list(trace.tokens), trace.meta.dtype, cfg.experts_per_token)
        self.warning.setText(text)
        if warn != self._warned:  # (a style sheet set again restyles the label: only on a change)
            self._warned = warn
            self.warning.setStyleSheet(WARN_STYLE if warn else QUIET_STYLE)
        self._place_row()
        self.refresh_marks()

    def _place_row(self) -> None:
        if self._view is None:
            return
        self.row_outline.setRect(QRectF(0, self.selected_token, self._columns.size, 1))
        self.row_outline.setVisible(True)
        self.token_side.mark_layer(self._view.layer)

    def _draw_token(self) -> None:
        trace = self.trace
        if trace is None or not trace.config.moe_layers:
            return
        p = self.selected_token
        lanes = lanes_of(trace, p)
        ready = trace.memo_get(("experts.effects", p))
        self.token_side.show_lanes(lanes, list(trace.tokens), ready)
        self.token_side.show_effects(ready, self.tokenizer)
        self.token_side.mark_layer(self.shown_layer())
        if ready is None:
            def apply(got: Any) -> None:
                if self.trace is trace and self.selected_token == p:
                    self.token_side.show_lanes(lanes, list(trace.tokens), got)
                    self.token_side.show_effects(got, self.tokenizer)

            self.now_or_later(("effects",), effects_are_cheap(trace), lambda _check: effects_of(trace, p), apply)

    # --- tooltips and export ---------------------------------------------------------------------
    def _describe_cell(self, row: int, col: int) -> str:
        view, trace = self._view, self.trace
        if view is None or trace is None or col >= self._columns.size:
            return ""
        e = int(self._columns[col])
        head = f"token {row} {quoted(trace.tokens[row])} \u2192 expert {e} (L{view.layer})"
        score = f"router score {format_value(view.scores[row, e])}"
        if not view.chosen[row, e]:
            return f"{head}: not chosen; {score}"
        experts = trace[f"blocks.{view.layer}.moe.experts"][row]
        slot = int(np.flatnonzero(experts == e)[0])
        return (f"{head}: chosen ({ordinal(slot + 1)} of {len(experts)}), weight "
                f"{format_value(view.weights[row, e])}; {score}")

    def _margin_text(self, row: int) -> str:
        if self._view is None or self.trace is None:
            return ""
        return margin_text(self._view, row, quoted(self.trace.tokens[row]), self.trace.meta.dtype)

    def _load_text(self, col: int) -> str:
        view, trace = self._view, self.trace
        if view is None or trace is None or col >= self._columns.size:
            return ""
        e, n, k = int(self._columns[col]), trace.n_tokens, trace.config.experts_per_token
        return (f"expert {e} (L{view.layer}): {int(view.load[e])} of {n} tokens chose it, "
                f"{view.load_share[e]:.2%} of the layer's {n * k} routed slots; their weights sum to "
                f"{view.load_weight[e]:.4f} (an even load: {n * k / trace.config.n_experts:.2f} tokens)")

    def _map_data(self) -> tuple[np.ndarray, list[str], list[str]]:
        return np.asarray(self.map.matrix), self.map.row_labels, self.map.col_labels

    def _margin_data(self) -> tuple[np.ndarray, list[str], list[str]]:
        return margin_table(self._view, self.trace)

    def _load_data(self) -> tuple[np.ndarray, list[str], list[str]]:
        return load_table(self._view, self._columns)

    # --- clicks and right-clicks -----------------------------------------------------------------
    def _lane_clicked(self, row: int, _col: int) -> None:
        lanes = self.token_side.lanes
        if lanes is not None and 0 <= row < len(lanes.layers):
            self.selection.set_layer(lanes.layers[row])

    def _patch_context(self) -> tuple[Trace, Any, Any] | None:
        loaded = self.session.loaded if self.session is not None else None
        if self.trace is None or loaded is None or not self.trace.config.moe_layers:
            return None
        return self.trace, loaded.model, self.tokenizer

    def _ask_factor(self) -> float | None:
        if self.factor_value is not None:
            return self.factor_value()
        value, ok = QInputDialog.getDouble(self, "Scale the router logit", "Multiply the expert's router logit by:",
                                           0.5, -1000.0, 1000.0, 3)
        return value if ok else None

    def _component(self, layer: int, expert: int, position: int | None) -> ExpertComponent:
        token = quoted(self.trace.tokens[position]) if position is not None and self.trace is not None else ""
        return ExpertComponent(layer, expert, self.trace.config.experts_per_token, position, token, self._ask_factor)

    def intervention_targets(self) -> list[Target]:
        """A routing map cell (the expert, for every token or that row's), a load bar (every token), a lanes cell
        (that layer's expert, for every token or the selected one), a patching cell (every token)."""
        lanes_map, patch_map = self.token_side.lanes_map, self.patching.map

        def on_map(pos: QPointF):
            cell = self.map.cell_at(pos) if self._view is not None else None
            if cell is None or cell[1] >= self._columns.size:
                return None
            return self._component(self._view.layer, int(self._columns[cell[1]]), cell[0])

        def on_load(pos: QPointF):
            vb = self.load.plot.vb
            if self._view is None or not vb.sceneBoundingRect().contains(pos):
                return None
            col = math.floor(vb.mapSceneToView(pos).x())
            return self._component(self._view.layer, int(self._columns[col]), None) \
                if 0 <= col < self._columns.size else None

        def on_lanes(pos: QPointF):
            cell, lanes = lanes_map.cell_at(pos), self.token_side.lanes
            if cell is None or lanes is None or self.trace is None:
                return None
            return self._component(lanes.layers[cell[0]], cell[1], lanes.position)

        def on_patch(pos: QPointF):
            cell = patch_map.cell_at(pos)
            layer = self.patching.layer_of_row(cell[0]) if cell is not None else None
            return None if layer is None or self.trace is None else self._component(layer, cell[1], None)

        return [Target(self.map.plot, on_map, self._map_marks), Target(self.load.plot, on_load, self._load_marks),
                Target(lanes_map.plot, on_lanes, self._lane_marks), Target(patch_map.plot, on_patch, self._patch_marks)]

    def _map_marks(self, iv: Intervention) -> list[Point]:
        view = self._view
        return [] if view is None else map_marks(iv, view.layer, self._columns, view.margin.size)

    def _load_marks(self, iv: Intervention) -> list[Point]:
        y = 0.1 * max(float(self.load.values.max(initial=0.0)), 1.0)
        return [] if self._view is None else bar_marks(iv, self._view.layer, self._columns, y)

    def _lane_marks(self, iv: Intervention) -> list[Point]:
        lanes = self.token_side.lanes
        return [] if lanes is None else grid_marks(iv, lanes.layers, lanes.position)

    def _patch_marks(self, iv: Intervention) -> list[Point]:
        r = self.patching.result
        return [] if r is None else grid_marks(iv, r.layers, None)
