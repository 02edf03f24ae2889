"""Small builders shared by the panels' plots: a selection outline and a fixed (non-zoomable) plot."""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtWidgets import QGraphicsRectItem, QMenu, QWidget

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


def adopt_plot_menus(owner: QWidget) -> int:
    """Make ``owner`` the Qt parent of the context menus pyqtgraph made without one under it (each
    plot's "Plot Options" menu, each view box's menu, with their submenus), so they are deleted with
    ``owner``. Left parentless, a menu's C++ connections hold its plot's Python objects, which hold the
    menu: a cycle Python's collector cannot see, so a closed window's plots would never be freed.
    Returns how many menus were adopted."""
    adopted = 0
    for view in owner.findChildren(pg.GraphicsView):
        scene = view.scene()
        for item in scene.items() if scene is not None else ():
            for name in ("ctrlMenu", "menu"):
                menu = getattr(item, name, None)
                if isinstance(menu, QMenu) and menu.parent() is None:
                    menu.setParent(owner, menu.windowFlags())
                    adopted += 1
    return adopted


def set_x_range(plot: pg.PlotItem | pg.PlotWidget, lo: float, hi: float, padding: float = 0.0) -> None:
    """``plot.setXRange(lo, hi, padding=padding)``, skipped while the view still shows what the same call set
    last (a switch over the same vocabulary or blocks): pyqtgraph updates the view, its axes and its items on
    every call, even for the range it has. A view panned or zoomed since, or auto-ranging, is set again."""
    vb = plot.getViewBox()
    asked = (float(lo), float(hi), float(padding))
    last = getattr(vb, "_explorer_x_range", None)
    if last is not None and last[0] == asked and last[1] == vb.viewRange()[0] and not vb.state["autoRange"][0]:
        return
    plot.setXRange(lo, hi, padding=padding)
    vb._explorer_x_range = (asked, vb.viewRange()[0])
