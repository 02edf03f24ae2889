"""The neurons panel's widgets: the [tokens x neurons] heatmap and compact read-only tables."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QHeaderView, QTableWidget

from explorer.core.display.levels import label_step
from explorer.core.display.tokens import quoted
from explorer.ui.widgets.heatmap import Heatmap, format_value
from explorer.ui.widgets.table_cells import cell  # noqa: F401 (re-exported: the features panel's tables)

BAR_POSITIVE, BAR_NEGATIVE = pg.mkBrush("#c0392b"), pg.mkBrush("#3b6fb6")
BAR_HIST = pg.mkBrush("#2a788e")
SELECTED_PEN = pg.mkPen("#111111", width=2)
COLUMN_OUTLINE = pg.mkPen("#ff2d55", width=2, cosmetic=True)
ROW_OUTLINE = pg.mkPen("#ff2d55", width=1.5, cosmetic=True, style=Qt.PenStyle.DashLine)


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


def table(headers: list[str], stretch: tuple[int, ...]) -> QTableWidget:
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
