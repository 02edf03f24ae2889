"""The right-click export menu of a plot: Export PNG/SVG…, Export data as CSV/NPY…, Copy image, Copy data.

An ``Exportable`` is one plot of a panel (what to render and the data behind it); ``attach_export_menu``
puts the four actions on its right-click menu, each asking for a file name (``ask_path``) and writing
through ``explorer.ui.export.images`` or ``explorer.ui.export.data``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QFileDialog, QMenu, QMessageBox, QWidget

from explorer.ui.export.clipboard import copy_data, copy_image
from explorer.ui.export.data import export_data
from explorer.ui.export.folders import last_folder, remember, slug, tell
from explorer.ui.export.images import export_png, export_svg
from explorer.ui.export.provenance import record_near, write_beside
from explorer.ui.widgets.heatmap import Heatmap


@dataclass
class Exportable:
    """One plot of a panel: what to render (a pyqtgraph item or widget) and the data behind it.

    ``data`` returns ``(matrix_or_vector, row_labels, column_labels)``; labels may be None.
    """

    name: str
    item: Any
    data: Callable[[], tuple[np.ndarray, list[str] | None, list[str] | None]]


def ask_path(parent: QWidget | None, caption: str, name: str, suffix: str, filter_: str) -> Path | None:
    """A file name for an export, starting in the last export folder (kept in the window's settings)."""
    start = os.path.join(last_folder(parent), f"{slug(name)}{suffix}")
    chosen, _ = QFileDialog.getSaveFileName(parent, caption, start, filter_)
    if not chosen:
        return None
    path = Path(chosen)
    if path.suffix.lower() != suffix:
        path = path.with_name(path.name + suffix)
    remember(parent, path.parent)
    return path


def _menu_host(item: Any) -> QMenu | None:
    """The context menu that right-clicking the plot opens (a ViewBox menu), if there is one.

    A layout of several items (a plot and its colour bar) uses its first plot's menu: a widget-level
    menu there would take the right-click from that plot and hide the entries panels add to its menu
    (switching a head or a neuron off, ``explorer.ui.interventions``)."""
    plot = None
    if isinstance(item, Heatmap):
        plot = item.plot
    elif isinstance(item, pg.PlotWidget):
        plot = item.getPlotItem()
    elif isinstance(item, pg.PlotItem):
        plot = item
    elif isinstance(item, pg.ViewBox):
        return item.menu
    elif isinstance(item, pg.GraphicsLayoutWidget):  # a plot with its colour bar: the plot's own menu
        plot = next((i for i in item.ci.items if isinstance(i, pg.PlotItem)), None)
    return None if plot is None else plot.getViewBox().menu


def export_actions(exportable: Exportable, parent: QWidget | None = None) -> list[QAction]:
    """The four export actions for one plot, each asking for a file name."""
    widget = exportable.item if isinstance(exportable.item, QWidget) else parent

    def run(kind: str) -> None:
        specs = {"png": ("Export PNG", ".png", "PNG image (*.png)"),
                 "svg": ("Export SVG", ".svg", "SVG image (*.svg)"),
                 "csv": ("Export data as CSV", ".csv", "CSV table (*.csv)"),
                 "npy": ("Export data as NPY", ".npy", "NumPy array (*.npy)")}
        caption, suffix, filter_ = specs[kind]
        path = ask_path(widget, caption, exportable.name, suffix, filter_)
        if path is None:
            return
        try:
            if kind == "png":
                export_png(exportable.item, path)
            elif kind == "svg":
                export_svg(exportable.item, path)
            else:
                export_data(exportable, path)
            write_beside(path, record_near(widget, f"{exportable.name} ({kind})"))  # where the numbers come from
        except Exception as exc:  # shown to the user, not raised into the event loop
            QMessageBox.warning(widget, caption, f"Could not write {path}:\n{exc}")
            return
        what = {"png": "image", "svg": "image", "csv": "data", "npy": "data"}[kind]
        tell(widget, f"Saved {exportable.name} ({what}) to {path}")

    actions = []
    for kind, text in (("png", "Export PNG\u2026"), ("svg", "Export SVG\u2026"),
                       ("csv", "Export data as CSV\u2026"), ("npy", "Export data as NPY\u2026")):
        action = QAction(text, widget)
        action.triggered.connect(lambda _checked=False, k=kind: run(k))
        actions.append(action)
    return actions + copy_actions(exportable, widget)


def copy_actions(exportable: Exportable, widget: QWidget | None) -> list[QAction]:
    """Copy image and Copy data (tab-separated, with labels) to the clipboard (``export.clipboard``)."""
    def run(copy: Callable[[Exportable], object], what: str) -> None:
        try:
            copy(exportable)
        except Exception as exc:  # shown to the user, not raised into the event loop
            QMessageBox.warning(widget, what, f"Could not copy {exportable.name}:\n{exc}")

    image, data = QAction("Copy image", widget), QAction("Copy data", widget)
    image.triggered.connect(lambda _checked=False: run(copy_image, "Copy image"))
    data.triggered.connect(lambda _checked=False: run(copy_data, "Copy data"))
    data.setToolTip("The numbers behind the plot, tab-separated with their labels")
    return [image, data]


def attach_export_menu(exportable: Exportable, parent: QWidget | None = None) -> bool:
    """Put the export actions on the plot's right-click menu. Returns False if it has none to host them.

    pyqtgraph plots get them at the top of their ViewBox menu (pyqtgraph's own "Export..." entry,
    which would duplicate them, is removed); plain widgets get a custom context menu.
    """
    item = exportable.item
    menu = _menu_host(item)
    if menu is not None:
        for old in getattr(menu, "_explorer_export_actions", []):
            menu.removeAction(old)
        actions = export_actions(exportable, parent)
        first = menu.actions()[0] if menu.actions() else None
        menu.insertActions(first, actions)
        menu.insertSeparator(first) if first is not None else menu.addSeparator()
        menu._explorer_export_actions = actions
        scene = item.scene() if hasattr(item, "scene") else None
        if scene is not None and hasattr(scene, "contextMenu"):
            scene.contextMenu = [a for a in scene.contextMenu if "Export" not in a.text()]
        return True
    if isinstance(item, QWidget):
        actions = export_actions(exportable, parent)
        item.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)

        def show_menu(pos: Any) -> None:
            popup = QMenu(item)
            extra = item.context_actions(pos, popup) if hasattr(item, "context_actions") else []
            if extra:  # the widget's own entries for what is under the pointer (a head: switch it off) first
                popup.addActions(extra)
                popup.addSeparator()
            popup.addActions(actions)
            popup.exec(item.mapToGlobal(pos))

        item.customContextMenuRequested.connect(show_menu)
        item._explorer_export_actions = actions
        return True
    return False
