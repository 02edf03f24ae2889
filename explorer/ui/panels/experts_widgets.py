"""The Experts panel's plots: a routing map whose unchosen cells are dimmed (the chosen ones stand out), the
top-k margin strip beside it (one bar per token, on a log scale, close calls in red) and the load bars under
it (one per expert, the same columns). Every one of them says its exact numbers in a tooltip."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, Qt
from PySide6.QtGui import QCursor
from PySide6.QtWidgets import QToolTip

from explorer.ui.panels.experts_views import LOG_FLOOR
from explorer.ui.panels.neurons.widgets import NeuronHeatmap
from explorer.ui.widgets.axis import readable, thin_axes
from explorer.ui.widgets.heatmap import cached_image

DIM = (255, 255, 255, 215)  # over the experts a token did not choose: washed out, the chosen ones stand out
LOAD_BRUSH = pg.mkBrush("#2a788e")
ROW_PEN = pg.mkPen("#ff2d55", width=1.5, cosmetic=True, style=Qt.PenStyle.DashLine)


class ChoiceMap(NeuronHeatmap):
    """A heatmap of experts (columns) whose cells a token did not choose are dimmed; ``describe(row, col)``
    gives a cell's tooltip (the panel's: weight, score, rank)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.describe: Callable[[int, int], str] | None = None
        self.dim = cached_image(axisOrder="row-major")
        self.dim.setZValue(5)
        self.plot.addItem(self.dim)
        self.chosen = np.zeros((0, 0), bool)
        self._dim = DIM[3]
        self._key: tuple | None = None
        self.companions: list = []  # a MarginStrip, LoadBars: plots in this layout with their own tooltips

    def companion_plot(self, row: int, col: int) -> pg.PlotItem:
        """A plot of this map's layout at (row, col) counted from the map's own plot (the heatmap's row 0 is a
        conversation's role key), mouse off, numbers as written."""
        plot = readable(self.addPlot(row=row + 1, col=col, axisItems=thin_axes()))
        plot.setMouseEnabled(x=False, y=False)
        plot.hideButtons()
        for axis in ("left", "bottom"):
            plot.getAxis(axis).enableAutoSIPrefix(False)
        return plot

    def set_choice(self, matrix: np.ndarray, chosen: np.ndarray, rows: list[str], cols: list[str],
                   levels: tuple[float, float] | None, value_name: str, dim: int = DIM[3],
                   key: tuple | None = None) -> None:
        """``dim``: how opaque the wash over the unchosen cells is (less where their values are worth reading);
        ``key``: (an object, more) that names ``chosen``: the same object and the rest equal, the wash is kept."""
        self.set_data(matrix, rows, cols, levels=levels, value_name=value_name)
        old = self._key
        if key is not None and old is not None and key[0] is old[0] and key[1:] == old[1:] and dim == self._dim:
            return
        same = self.chosen.shape == chosen.shape and dim == self._dim
        if key is None and same and np.array_equal(self.chosen, chosen):
            return
        self.chosen, self._dim, self._key = np.asarray(chosen, bool), dim, key
        if not chosen.size:
            self.dim.clear()
            return
        wash = np.array((*DIM[:3], dim), np.uint8).view(np.uint32)[0]
        pixels = np.ascontiguousarray(np.where(self.chosen, np.uint32(0), wash))  # one uint32 per cell: RGBA bytes
        self.dim.setImage(pixels.view(np.uint8).reshape(*chosen.shape, 4), autoLevels=False, levels=(0, 255))
        self.dim.setRect(0, 0, chosen.shape[1], chosen.shape[0])

    def cell_text(self, row: int, col: int) -> str:
        return self.describe(row, col) if self.describe is not None else super().cell_text(row, col)

    def _on_mouse_moved(self, args: tuple) -> None:
        pos = args[0]
        for companion in self.companions:  # over the margin strip or the load bars: their own tooltip
            if companion.plot.vb.sceneBoundingRect().contains(pos):
                text = companion.text_at(companion.plot.vb.mapSceneToView(pos))
                QToolTip.showText(QCursor.pos(), text, self) if text else QToolTip.hideText()
                return
        super()._on_mouse_moved(args)

    def _update_ticks(self) -> None:
        super()._update_ticks()
        if not hasattr(self, "companions"):  # (called from pyqtgraph's constructor, before this one's)
            return
        width = self.plot.getAxis("left").fixedWidth
        for companion in self.companions:  # the load bars' columns under the map's: the same left axis width
            if companion.align_left and width and companion.plot.getAxis("left").fixedWidth != width:
                companion.plot.getAxis("left").setWidth(max(width, 40))


class MarginStrip:
    """Each token's top-k margin as a horizontal bar (log10 scale), its rows those of the routing map beside it
    (in its layout, linked y); close calls red. Drawn as one image (``BINS`` columns over the log range): a
    thousand bars as items would cost a repaint of a thousand rectangles on every switch. ``text(row)`` is a
    row's tooltip, with the exact numbers."""

    align_left = False

    def __init__(self, owner: ChoiceMap) -> None:
        self.plot = owner.companion_plot(0, 2)
        self.plot.setTitle("top-k margin")
        self.plot.setYLink(owner.plot)
        self.plot.invertY(True)
        self.plot.showGrid(x=True, y=False, alpha=0.25)
        self.plot.getAxis("left").setStyle(showValues=False)
        self.plot.getAxis("left").setWidth(4)
        self.plot.setLabel("bottom", "log\u2081\u2080 margin")
        self.plot.setPreferredWidth(130)
        self.plot.setMaximumWidth(160)
        owner.companions.append(self)
        self.image = cached_image(axisOrder="row-major")
        self.plot.addItem(self.image)
        self.tolerance = pg.InfiniteLine(angle=90, pen=pg.mkPen("#d62728", width=1, style=Qt.PenStyle.DashLine))
        self.plot.addItem(self.tolerance)
        self.text: Callable[[int], str] | None = None
        self.values = np.zeros(0)
        self._range: tuple[int, int] | None = None

    def set_margins(self, margin: np.ndarray, image: np.ndarray, tolerance: float, top: int) -> None:
        """``image``: the bars (``experts_views.strip_image``) over [LOG_FLOOR, ``top``], the same range for every
        layer of a trace (a layer switch keeps the axis)."""
        finite = np.isfinite(margin)
        top = max(int(top), LOG_FLOOR + 1)
        self.values = np.where(finite, np.log10(np.maximum(np.where(finite, margin, 1.0), 10.0 ** LOG_FLOOR)), top)
        n = margin.size
        if n:
            self.image.setImage(image, autoLevels=False, levels=(0, 255))
            self.image.setRect(LOG_FLOOR, 0, top - LOG_FLOOR, n)
        else:
            self.image.clear()
        self.tolerance.setValue(math.log10(max(tolerance, 10.0 ** LOG_FLOOR)))
        if self._range != (LOG_FLOOR, top):  # (a new range re-lays out the axis: only when it changes)
            self._range = (LOG_FLOOR, top)
            self.plot.setXRange(LOG_FLOOR, top, padding=0.02)
            step = 3 if top - LOG_FLOOR > 6 else 1
            self.plot.getAxis("bottom").setTicks([[(v, f"{v:g}") for v in range(LOG_FLOOR, top + 1, step)]])

    def text_at(self, point: QPointF) -> str | None:
        row = math.floor(point.y())
        return self.text(row) if self.text is not None and 0 <= row < self.values.size else None


class LoadBars:
    """Tokens routed to each expert, one bar per column of the routing map above (linked x); the dashed line is
    a perfectly even load (n x k / experts). ``text(col)`` is a bar's tooltip."""

    align_left = True

    def __init__(self, owner: ChoiceMap) -> None:
        self.plot = owner.companion_plot(1, 0)
        self.plot.setXLink(owner.plot)
        self.plot.showGrid(x=False, y=True, alpha=0.25)
        self.plot.setLabel("left", "tokens")
        self.plot.getAxis("bottom").setStyle(showValues=False)
        self.plot.setPreferredHeight(90)
        self.plot.setMaximumHeight(130)
        owner.companions.append(self)
        self.bars = pg.BarGraphItem(x=[], height=[], width=0.8, brush=LOAD_BRUSH, pen=None)
        self.plot.addItem(self.bars)
        self.even = pg.InfiniteLine(angle=0, pen=pg.mkPen("#555", width=1, style=Qt.PenStyle.DashLine))
        self.plot.addItem(self.even)
        self.text: Callable[[int], str] | None = None
        self.values = np.zeros(0)
        self._top: float | None = None

    def set_load(self, tokens: np.ndarray, even: float, top: float) -> None:
        """``top``: the y axis' end (the busiest expert of any layer: a layer switch keeps the axis)."""
        self.values = np.asarray(tokens, np.float64)
        self.bars.setOpts(x=np.arange(self.values.size) + 0.5, height=self.values)
        self.even.setValue(even)
        top = max(float(top), even, 1.0) * 1.05
        if self._top != top:
            self._top = top
            self.plot.setYRange(0, top, padding=0)

    def text_at(self, point: QPointF) -> str | None:
        col = math.floor(point.x())
        return self.text(col) if self.text is not None and 0 <= col < self.values.size else None
