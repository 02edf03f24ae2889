"""The Experts panel's selected-token side: its lanes (the experts it went to in every MoE layer, as a layers x
experts map of their weights or of their direct effects on the logit) and the table of each chosen expert's
weight and direct effect on the DLA target's logit (``views.effects_of``)."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QVBoxLayout, QWidget

from explorer.core.display.tokens import quoted, vocab_quoted
from explorer.ui.panels.experts_views import LANE_VALUES, Effects, Lanes
from explorer.ui.panels.experts_widgets import ROW_PEN, ChoiceMap
from explorer.ui.panels.neurons.widgets import table
from explorer.ui.widgets.heatmap import format_value
from explorer.ui.widgets.plots import outline
from explorer.ui.widgets.steady_label import SteadyLabel
from explorer.ui.widgets.table_cells import set_rows

COMPUTING = "computing each expert's direct effect\u2026"


def ordinal(i: int) -> str:
    return f"{i}{'th' if 10 <= i % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(i % 10, 'th')}"


class SelectedToken(QWidget):
    """Lanes and effects of one token; the panel calls ``show_lanes`` and ``show_effects``."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        column = QVBoxLayout(self)
        column.setContentsMargins(0, 0, 0, 0)
        row = QHBoxLayout()
        self.title = QLabel()
        row.addWidget(self.title, 1)
        row.addWidget(QLabel("shows"))
        self.values_combo = QComboBox()
        for key, text in LANE_VALUES.items():
            self.values_combo.addItem(text, key)
        self.values_combo.setToolTip("weight: what multiplies each chosen expert's output; direct effect: how much "
                                     "that output, read through the final norm, moves the target's logit")
        row.addWidget(self.values_combo)
        column.addLayout(row)
        self.lanes_map = ChoiceMap(colormap="viridis", title="")
        self.lanes_map.plot.setLabel("bottom", "expert")
        self.lanes_map.setMinimumHeight(120)
        column.addWidget(self.lanes_map, 2)
        self.effects_title = SteadyLabel()
        column.addWidget(self.effects_title)
        self.effects = table(["layer", "expert", "weight", "direct effect"], (0, 1, 2, 3))
        column.addWidget(self.effects, 3)
        self.lanes: Lanes | None = None
        self.result: Effects | None = None
        self.tokens: list[str] = []
        self.lanes_map.describe = self._describe
        self.layer_outline = outline(self.lanes_map.plot, ROW_PEN, z=19, visible=False)  # the routing map's layer
        self._colormap = "viridis"

    @property
    def mode(self) -> str:
        return self.values_combo.currentData()

    def show_lanes(self, lanes: Lanes, tokens: list[str], effects: Effects | str | None) -> None:
        """Draw the lanes of ``lanes.position`` (weights, or the effects when chosen and ready)."""
        self.lanes, self.tokens = lanes, tokens
        self.result = effects if isinstance(effects, Effects) and effects.position == lanes.position else None
        p = lanes.position
        self.title.setText(f"Token {p} {quoted(tokens[p])} through every MoE layer")
        effect = self.mode == "effect" and self.result is not None
        matrix = self.result.matrix if effect else lanes.weights
        colormap = "CET-D1" if effect else "viridis"
        if colormap != self._colormap:
            self._colormap = colormap
            self.lanes_map.colormap = pg.colormap.get(colormap)
            self.lanes_map.colorbar.setColorMap(self.lanes_map.colormap)
            self.lanes_map.symmetric = effect
        levels = None if effect else (0.0, max(float(lanes.weights.max(initial=0.0)), 1e-6))
        E = matrix.shape[1]
        self.lanes_map.set_choice(matrix, lanes.chosen, [f"L{m}" for m in lanes.layers],
                                  [f"#{e}" for e in range(E)], levels,
                                  "direct effect on the logit" if effect else "weight")
        waiting = self.mode == "effect" and self.result is None
        self.lanes_map.plot.setTitle("weights (the effects are being computed)" if waiting else
                                     "direct effect of each chosen expert" if effect else "chosen experts' weights")

    def mark_layer(self, layer: int | None) -> None:
        """Outline the lane of ``layer`` (the MoE layer the routing map shows)."""
        lanes = self.lanes
        row = lanes.layers.index(layer) if lanes is not None and layer in lanes.layers else None
        self.layer_outline.setVisible(row is not None)
        if row is not None:
            self.layer_outline.setRect(QRectF(0, row, lanes.weights.shape[1], 1))

    def show_effects(self, effects: Effects | str | None, tokenizer) -> None:
        """The table (or why there is none / "computing…")."""
        if not isinstance(effects, Effects):
            self.result = None
            self.effects_title.setText(COMPUTING if effects is None else effects)
            set_rows(self.effects, [])
            return
        self.result = effects
        target = vocab_quoted(tokenizer, effects.target)
        which = ("the token that follows it in the prompt" if effects.follows
                 else "the model's top prediction after the last token")
        self.effects_title.setText(
            f"Direct effect on the logit of {target} ({which}: the DLA panel's default target), the final norm's "
            "scale frozen; each layer's rows add up to its FFN term in the DLA.")
        self.effects_title.setToolTip("A target chosen in the Direct logit attribution panel is not followed here: "
                                      "this table always uses its default target.")
        rows = []
        for layer, expert, weight, effect in effects.rows:
            rows.append((f"L{layer}", "shared" if expert is None else f"#{expert}",
                         "" if not np.isfinite(weight) else f"{weight:.4f}", f"{effect:+.4f}"))
        set_rows(self.effects, rows, numbers=(2, 3))

    def _describe(self, row: int, col: int) -> str:
        lanes = self.lanes
        if lanes is None or row >= len(lanes.layers):
            return ""
        layer = lanes.layers[row]
        head = f"token {lanes.position} {quoted(self.tokens[lanes.position])}, L{layer} \u2192 expert {col}"
        if not lanes.chosen[row, col]:
            return f"{head}: not chosen"
        slot = int(np.flatnonzero(lanes.experts[row] == col)[0])
        text = (f"{head}: chosen ({ordinal(slot + 1)} of {lanes.experts.shape[1]}), weight "
                f"{format_value(lanes.weights[row, col])}")
        if self.result is not None:
            text += f", direct effect on the logit {format_value(self.result.matrix[row, col])}"
        return text

    def effects_data(self) -> tuple[np.ndarray, list[str], list[str]]:
        if self.result is None:
            return np.zeros((0, 2)), [], ["weight", "direct effect"]
        values = np.array([[w, e] for _layer, _expert, w, e in self.result.rows], np.float64)
        labels = [f"L{layer} {'shared' if expert is None else f'#{expert}'}"
                  for layer, expert, _w, _e in self.result.rows]
        return values, labels, ["weight", "direct effect"]

    def lanes_data(self) -> tuple[np.ndarray, list[str], list[str]]:
        m = self.lanes_map
        return np.asarray(m.matrix), m.row_labels, m.col_labels
