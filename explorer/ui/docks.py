"""Panels as dock widgets: finding the registered panel classes, placing their docks, and the
generation pane's dock (built and wired to the window here)."""

from __future__ import annotations

import logging
from importlib import import_module
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDockWidget, QMainWindow, QTabWidget

from explorer.ui.panels.base import Panel

log = logging.getLogger(__name__)

AREA = Qt.DockWidgetArea.BottomDockWidgetArea


def load_panel_classes() -> list[type[Panel]]:
    """The registry's panel classes, each imported on its own: one that is missing or broken
    (still being written, say) is skipped with a log line instead of taking the window down."""
    from explorer.ui import panels

    entries = getattr(panels, "_REGISTRY", None)
    if entries is None:  # a registry without the (module, class) list: all or nothing
        return list(panels.panel_classes())
    classes = []
    for module, name in entries:
        try:
            classes.append(getattr(import_module(module), name))
        except Exception as exc:  # noqa: BLE001 - ImportError, AttributeError or a bug in the module
            log.warning("skipping panel %s.%s: %s: %s", module, name, type(exc).__name__, exc)
    return classes


class PanelDock(QDockWidget):
    """A movable, closable, floatable dock holding one panel."""

    def __init__(self, panel: Panel, parent: QMainWindow) -> None:
        # "&" would be read as a mnemonic marker in the title bar and the View menu
        super().__init__((panel.title or type(panel).__name__).replace("&", "&&"), parent)
        self.panel = panel
        self.setObjectName(f"dock-{type(panel).__module__.rsplit('.', 1)[-1]}")
        self.setFeatures(QDockWidget.DockWidgetFeature.DockWidgetMovable
                         | QDockWidget.DockWidgetFeature.DockWidgetClosable
                         | QDockWidget.DockWidgetFeature.DockWidgetFloatable)
        self.setWidget(panel)


def place_docks(window: QMainWindow, docks: list[PanelDock]) -> None:
    """Default layout below the prompt: the first panel (tokenization, short) across the full width,
    every other panel under it as a tab of one full-width area, tabs on top."""
    if not docks:
        return
    window.setTabPosition(Qt.DockWidgetArea.AllDockWidgetAreas, QTabWidget.TabPosition.North)
    first, rest = docks[0], docks[1:]
    window.addDockWidget(AREA, first)
    for i, dock in enumerate(rest):
        if i == 0:
            window.addDockWidget(AREA, dock)
            window.splitDockWidget(first, dock, Qt.Orientation.Vertical)
        else:
            window.tabifyDockWidget(rest[0], dock)
    if rest:
        rest[0].raise_()


def size_docks(window: QMainWindow, docks: list[PanelDock]) -> None:
    """The default proportions: the first (tokenization) row short, the tabbed panels under it tall."""
    if len(docks) < 2:
        return
    height = max(window.height() - 200, 400)
    window.resizeDocks([docks[0], docks[1]], [int(height * 0.24), int(height * 0.76)], Qt.Orientation.Vertical)


def add_generation_dock(window: Any, pane: Any) -> PanelDock:
    """Host the ``GenerationPane`` ``pane`` in a dock on the window's right, full height, and wire it
    up: a new model and the window's prompt reach the pane; a clicked token becomes the window's trace
    (``MainWindow.show_generated``); closing the window stops a running generation."""
    dock = PanelDock(pane, window)
    window.setCorner(Qt.Corner.TopRightCorner, Qt.DockWidgetArea.RightDockWidgetArea)
    window.setCorner(Qt.Corner.BottomRightCorner, Qt.DockWidgetArea.RightDockWidgetArea)
    window.addDockWidget(Qt.DockWidgetArea.RightDockWidgetArea, dock)

    def on_model(loaded: Any) -> None:
        pane.set_model(loaded)
        pane.follow_prompt(window.prompt.text())

    window.model_loaded.connect(on_model)
    window.prompt.text_edited.connect(pane.follow_prompt)
    pane.trace_requested.connect(window.show_generated)
    window.installEventFilter(pane)
    window.generation = pane
    return dock
