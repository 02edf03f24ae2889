"""The generation pane's bar chart: one step's next-token candidates before and after the controls.

The rows come from ``explorer.core.generation.candidates.candidate_table``; this module only draws them.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtGui import QFontMetrics
from PySide6.QtWidgets import QGraphicsItem, QWidget

from explorer.core.display.tokens import short
from explorer.core.generation.candidates import CandidateTable
from explorer.ui.widgets.axis import thin_axes

LABEL_CHARS = 14  # candidate labels are cut to this many characters
BEFORE_BRUSH, BEFORE_CHOSEN = "#c4c9d0", "#4b5563"
AFTER_BRUSH, AFTER_CHOSEN = "#3b82f6", "#ea580c"


def nice_limit(value: float) -> float:
    """The x-axis end for probabilities up to ``value``: one of a few round numbers, so that the axis
    (and its cached drawing) rarely changes from one step to the next."""
    for limit in (0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75):
        if value <= limit / 1.06:
            break
    else:
        return 1.06
    if limit > 0.02:
        return limit
    value = max(float(value), 1e-9)  # smaller still (a flat distribution): 1, 2 or 5 times a power of ten,
    decade = 10.0 ** math.floor(math.log10(value * 1.06))  # so the longest bar fills half the axis or more
    return next(m * decade for m in (1, 2, 5, 10) if value * 1.06 <= m * decade * (1 + 1e-9))



def token_label(text: str, limit: int = LABEL_CHARS) -> str:
    """A candidate's label: the glyphs every panel uses (``explorer.core.display.tokens``), cut to ``limit``."""
    return short(text, limit)


class CandidateChart(pg.PlotWidget):
    """Horizontal bars, one row per candidate: grey = the model's own probability, blue = after the
    controls; the chosen token's bars are dark grey and orange and its label starts with ▶."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent, axisItems=thin_axes())
        self.setMinimumSize(240, 180)
        self.setAntialiasing(False)  # axis-aligned bars: the same picture, painted faster
        item = self.getPlotItem()
        item.setMouseEnabled(x=False, y=False)
        item.hideButtons()
        item.setMenuEnabled(True)
        item.getViewBox().invertY(True)
        item.setLabel("bottom", "probability")
        item.getAxis("bottom").enableAutoSIPrefix(False)  # 0.2, not "200 (x0.001)"
        item.setTitle("next-token candidates", size="9pt")  # fixed: a changing title re-lays the plot out
        left = item.getAxis("left")  # fixed width too, for the same reason (labels change every step)
        left.setWidth(QFontMetrics(left.font()).horizontalAdvance("▶ " + "m" * LABEL_CHARS) + 12)
        item.showGrid(x=True, y=False, alpha=0.25)
        self.before = pg.BarGraphItem(x0=[], y=[], height=0.4, width=[], brush=BEFORE_BRUSH, pen=None)
        self.after = pg.BarGraphItem(x0=[], y=[], height=0.4, width=[], brush=AFTER_BRUSH, pen=None)
        item.addItem(self.before)
        item.addItem(self.after)
        legend = item.addLegend(offset=(-4, -4), labelTextSize="8pt")  # bottom right: the short bars
        legend.addItem(self.before, "model's own")
        legend.addItem(self.after, "after the controls")
        # pyqtgraph repaints the whole plot on every change: keep what does not change as pixmaps
        for static in (legend, item.titleLabel, item.getAxis("bottom")):
            static.setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
        self.labels: list[str] = []
        self.values = np.zeros((0, 2))
        self.paint_seconds = 0.0  # the last repaint's time (pyqtgraph paints in Python)
        self._limit, self._rows = 0.0, 0

    def paintEvent(self, event: Any) -> None:  # noqa: N802 - Qt override
        t0 = time.perf_counter()
        super().paintEvent(event)
        self.paint_seconds = time.perf_counter() - t0

    def show_table(self, table: CandidateTable | None, labels: list[str]) -> None:
        item = self.getPlotItem()
        if table is None or not len(table.ids):
            self.before.setOpts(x0=[], y=[], width=[], brushes=None)
            self.after.setOpts(x0=[], y=[], width=[], brushes=None)
            self.labels, self.values = [], np.zeros((0, 2))
            item.getAxis("left").setTicks([[]])
            return
        n = len(table.ids)
        rows = np.arange(n, dtype=float)
        chosen = table.chosen_row
        marked = [("▶ " + s) if i == chosen else s for i, s in enumerate(labels)]
        self.before.setOpts(x0=np.zeros(n), y=rows - 0.21, height=0.4, width=table.before,
                            brushes=[BEFORE_CHOSEN if i == chosen else BEFORE_BRUSH for i in range(n)])
        self.after.setOpts(x0=np.zeros(n), y=rows + 0.21, height=0.4, width=table.after,
                           brushes=[AFTER_CHOSEN if i == chosen else AFTER_BRUSH for i in range(n)])
        item.getAxis("left").setTicks([list(enumerate(marked))])
        limit = nice_limit(float(max(table.before.max(), table.after.max())))
        if limit != self._limit:
            self._limit = limit
            item.setXRange(0, limit, padding=0)
        if n != self._rows:
            self._rows = n
            item.setYRange(-0.6, n - 0.4, padding=0)
        self.labels, self.values = marked, np.column_stack([table.before, table.after])

