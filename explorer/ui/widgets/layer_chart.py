"""One token's probability and rank after every layer boundary, as two charts over one depth axis.

A probability that stays near 0 until the last layers is flat beside a rank that falls from 40,000 to 1,
so the two never share an axis: the probability (0 to 1) is the top chart, the rank (1 at the top, a
log scale: 1, 10, 100, 1k, …) the bottom one, both over the boundaries "embed", "after 0", … (labels
thinned to what fits: ``widgets/axis.py``). Hovering shows the exact numbers of the nearest boundary
and stays while the pointer is on the chart. Used by the residual panel (a token across layers) and
the Journey (the generated token's path).
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, QPointF
from PySide6.QtGui import QCursor
from PySide6.QtWidgets import QToolTip, QWidget

from explorer.core.analysis.residual import first_top
from explorer.ui.widgets.axis import readable, thin_axes

PROB_PEN = pg.mkPen("#d62728", width=2)
RANK_PEN = pg.mkPen("#1f77b4", width=2)
_SUFFIX = {0: "", 3: "k", 6: "M"}


def rank_text(rank: int) -> str:
    """A 1-based rank as the axis writes powers of ten: 1, 10, 100, 1k, 10k, 100k, 1M."""
    exponent = int(round(math.log10(rank))) if rank > 0 else 0
    for power in (6, 3, 0):
        if exponent >= power:
            return f"{10 ** (exponent - power)}{_SUFFIX[power]}"
    return str(rank)


def percent(p: float) -> str:
    return f"{100 * p:.2f}%" if p >= 5e-5 else f"{p:.2e}"


class LayerChart(pg.GraphicsLayoutWidget):
    """Probability (top) and 1-based rank (bottom, log scale, best at the top) of one token per boundary."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setMinimumSize(220, 220)
        self.labels: list[str] = []
        self.probs = np.zeros(0, np.float64)
        self.ranks = np.zeros(0, np.int64)  # 0-based
        self.prob_plot: pg.PlotItem = readable(self.addPlot(row=0, col=0, axisItems=thin_axes()))
        self.rank_plot: pg.PlotItem = readable(self.addPlot(row=1, col=0, axisItems=thin_axes()))
        for plot, name in ((self.prob_plot, "probability"), (self.rank_plot, "rank")):
            plot.setMouseEnabled(x=False, y=False)
            plot.hideButtons()
            plot.showGrid(x=True, y=True, alpha=0.25)
            plot.setLabel("left", name)
            plot.getAxis("left").enableAutoSIPrefix(False)
            plot.getAxis("left").setWidth(48)
        self.rank_plot.setXLink(self.prob_plot)
        self.rank_plot.invertY(True)  # rank 1 at the top, as "higher is better" reads
        self.rank_plot.setLabel("bottom", "after block")
        self.prob_plot.getAxis("bottom").setStyle(showValues=False)
        self.prob_curve = self.prob_plot.plot([], [], pen=PROB_PEN, symbol="o", symbolSize=5,
                                              symbolBrush="#d62728", symbolPen=None)
        self.rank_curve = self.rank_plot.plot([], [], pen=RANK_PEN, symbol="o", symbolSize=5,
                                              symbolBrush="#1f77b4", symbolPen=None)
        self.marker = pg.InfiniteLine(angle=90, pen=pg.mkPen((60, 60, 60), width=1, style=pg.QtCore.Qt.PenStyle.DotLine))
        self.marker.setVisible(False)
        self.rank_plot.addItem(self.marker)
        self._hover = pg.SignalProxy(self.scene().sigMouseMoved, rateLimit=30, slot=self._on_moved)

    # --- data ------------------------------------------------------------------------------------
    def show_path(self, labels: Sequence[str], probs: np.ndarray, ranks: np.ndarray, title: str = "",
                  vocab_size: int | None = None) -> None:
        """Draw one token's ``probs`` and 0-based ``ranks`` at the boundaries ``labels``."""
        self.labels = [str(s) for s in labels]
        self.probs = np.asarray(probs, dtype=np.float64)
        self.ranks = np.asarray(ranks, dtype=np.int64)
        x = np.arange(len(self.labels), dtype=np.float64)
        self.prob_curve.setData(x, self.probs)
        self.rank_curve.setData(x, np.log10(self.ranks.astype(np.float64) + 1.0))
        short = [label.removeprefix("after ") for label in self.labels]
        ticks = [(float(i), text) for i, text in enumerate(short)]
        for plot in (self.prob_plot, self.rank_plot):
            plot.getAxis("bottom").setTicks([ticks])
            plot.setXRange(-0.5, max(len(x) - 0.5, 0.5), padding=0)
        self.prob_plot.setYRange(0.0, 1.0, padding=0.04)
        worst = max(int(self.ranks.max(initial=0)) + 1, vocab_size or 1, 10)
        top = math.ceil(math.log10(worst))
        self.rank_plot.getAxis("left").setTicks([[(float(e), rank_text(10 ** e)) for e in range(0, top + 1)]])
        self.rank_plot.setYRange(0.0, float(top), padding=0.04)
        first = self.first_top()
        self.marker.setVisible(first is not None)
        if first is not None:
            self.marker.setValue(first)
        self.prob_plot.setTitle(_rich(title))

    def clear_path(self, title: str = "") -> None:
        self.labels, self.probs, self.ranks = [], np.zeros(0), np.zeros(0, np.int64)
        self.prob_curve.setData([], [])
        self.rank_curve.setData([], [])
        self.marker.setVisible(False)
        self.prob_plot.setTitle(_rich(title))

    def first_top(self) -> int | None:
        """The first boundary from which the token is the top prediction to the end (None: never)."""
        return first_top(self.ranks)

    def data(self) -> tuple[np.ndarray, list[str], list[str]]:
        """[B, 2]: the probability and the 1-based rank at every boundary."""
        if not self.labels:
            return np.zeros((0, 2)), [], ["probability", "rank"]
        return np.stack([self.probs, self.ranks.astype(np.float64) + 1], axis=1), list(self.labels), \
            ["probability", "rank"]

    # --- hover -----------------------------------------------------------------------------------
    def point_text(self, i: int) -> str:
        return (f"{self.labels[i]}: probability {percent(float(self.probs[i]))}, rank {int(self.ranks[i]) + 1}"
                + (" (the top prediction)" if self.ranks[i] == 0 else ""))

    def boundary_at(self, scene_pos: QPointF) -> int | None:
        if not self.labels:
            return None
        for plot in (self.prob_plot, self.rank_plot):
            if plot.vb.sceneBoundingRect().contains(scene_pos):
                i = int(round(plot.vb.mapSceneToView(scene_pos).x()))
                return i if 0 <= i < len(self.labels) else None
        return None

    def _on_moved(self, args: tuple) -> None:
        i = self.boundary_at(args[0])
        if i is None:
            QToolTip.hideText()
            return
        QToolTip.showText(QCursor.pos(), self.point_text(i), self)

    def viewportEvent(self, event: QEvent) -> bool:  # noqa: N802 (Qt override)
        """Qt's own tooltip event (the pointer resting) would hide the text (no item has a tooltip): the
        point's text is shown again instead, so it stays while the pointer is on the chart."""
        if event.type() == QEvent.Type.ToolTip:
            i = self.boundary_at(self.mapToScene(event.pos()))
            if i is not None:
                QToolTip.showText(event.globalPos(), self.point_text(i), self)
                event.accept()
                return True
        return super().viewportEvent(event)


def _rich(title: str) -> str | None:
    """The title as rich text whose tokens are text: a token "<extra_1>" is not a tag, and the fitted title
    (widgets/axis.py) reads escaped text inside a span as rich text, never escaping it twice."""
    return f"<span>{html.escape(title, quote=False)}</span>" if title else None
