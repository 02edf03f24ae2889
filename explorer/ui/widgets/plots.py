"""Small builders shared by the panels' plots: a selection outline and a fixed (non-zoomable) plot."""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtWidgets import QGraphicsRectItem

from explorer.ui.widgets.axis import readable, thin_axes


def outline(plot: pg.PlotItem, pen, z: float = 20, visible: bool = True) -> QGraphicsRectItem:
    """An unfilled rectangle drawn over ``plot`` (placed later with ``setRect``), e.g. the selected cell."""
    rect = QGraphicsRectItem()
    rect.setPen(pen)
    rect.setZValue(z)
    rect.setVisible(visible)
    plot.addItem(rect)
    return rect


def fixed_plot(grid: str = "y") -> pg.PlotWidget:
    """A plot the user reads but does not pan or zoom: mouse off, no auto-range button, a light grid
    on the axes named in ``grid`` ("", "y" or "xy"), and numbers as written (no "x0.001" SI prefix)."""
    widget = pg.PlotWidget(axisItems=thin_axes())
    readable(widget)
    widget.setMinimumSize(200, 130)  # smaller, the panel scrolls (see docks.PanelDock)
    widget.setMouseEnabled(x=False, y=False)
    widget.hideButtons()
    if grid:
        widget.showGrid(x="x" in grid, y="y" in grid, alpha=0.25)
    for axis in ("left", "bottom"):
        widget.getAxis(axis).enableAutoSIPrefix(False)
    return widget
