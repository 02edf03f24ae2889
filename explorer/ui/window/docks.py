"""Panels as dock widgets (one per ``PanelSpec`` of ``explorer.ui.panels.registry``): placing their docks,
and the generation pane's dock."""

from __future__ import annotations

import logging

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QDockWidget,
    QFrame,
    QLabel,
    QMainWindow,
    QScrollArea,
    QStackedWidget,
    QTabWidget,
    QWidget,
)

from explorer.ui.generation import GenerationPane
from explorer.ui.panels.base import Panel
from explorer.ui.panels.registry import spec_of
from explorer.ui.session.session import Session
from explorer.ui.window.tab_titles import TabTitles

log = logging.getLogger(__name__)

AREA = Qt.DockWidgetArea.BottomDockWidgetArea


def dock_name(panel: QWidget) -> str:
    """A stable object name for a panel's dock (saved layouts find docks by it): its record's
    (``PanelSpec.dock_name``), else the module path under ``panels`` (a panel without a record)."""
    record = spec_of(type(panel))
    if record is not None:
        return record.dock_name
    module = type(panel).__module__
    tail = module.split("explorer.ui.panels.", 1)[-1] if "explorer.ui.panels." in module else module.rsplit(".", 1)[-1]
    tail = tail.removesuffix(".panel")
    return "dock-" + tail.replace(".", "-")


class PanelDock(QDockWidget):
    """A movable, closable, floatable dock holding one panel; ``panel_id`` is the panel's registry id."""

    def __init__(self, panel: Panel, parent: QMainWindow, scroll: bool = True) -> None:
        # "&" would be read as a mnemonic marker in the title bar and the View menu
        super().__init__((panel.title or type(panel).__name__).replace("&", "&&"), parent)
        self.panel = panel
        self.setObjectName(dock_name(panel))
        record = spec_of(type(panel))
        self.panel_id = record.id if record is not None else self.objectName().removeprefix("dock-")
        self.setFeatures(QDockWidget.DockWidgetFeature.DockWidgetMovable
                         | QDockWidget.DockWidgetFeature.DockWidgetClosable
                         | QDockWidget.DockWidgetFeature.DockWidgetFloatable)
        if not scroll:
            self.setWidget(panel)
            return
        # a panel smaller than its plots' minimum sizes scrolls instead of squashing them into a smear
        area = QScrollArea(self)
        area.setObjectName(f"scroll-{self.objectName()}")
        area.setWidgetResizable(True)
        area.setFrameShape(QFrame.Shape.NoFrame)
        area.setWidget(panel)
        # before the first trace: a line of text, not empty plots with meaningless axes
        self.placeholder = QLabel("", self)
        self.placeholder.setObjectName("panel-placeholder")
        self.placeholder.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.placeholder.setWordWrap(True)
        self.placeholder.setStyleSheet("QLabel { color: #666; font-size: 12pt; }")
        self.stack = QStackedWidget(self)
        self.stack.addWidget(self.placeholder)
        self.stack.addWidget(area)
        self.stack.setCurrentIndex(1)
        self.setWidget(self.stack)

    def show_placeholder(self, text: str) -> None:
        if hasattr(self, "stack"):
            self.placeholder.setText(text)
            self.stack.setCurrentIndex(0)

    def show_content(self) -> None:
        if hasattr(self, "stack"):
            self.stack.setCurrentIndex(1)

    @property
    def showing_placeholder(self) -> bool:
        return hasattr(self, "stack") and self.stack.currentIndex() == 0


def dock_of(widget: QWidget | None) -> PanelDock | None:
    """The ``PanelDock`` that holds ``widget`` (through its scroll area), if any."""
    while widget is not None and not isinstance(widget, PanelDock):
        widget = widget.parentWidget()
    return widget


def place_docks(window: QMainWindow, docks: list[PanelDock]) -> TabTitles:
    """Default layout below the prompt: the first panel (tokenization, short) across the full width,
    every other panel under it as a tab of one full-width area, tabs on top, each tab with a short
    title (the full one in its tooltip and the View menu: ``tab_titles.py``)."""
    titles = TabTitles(window, docks)
    if not docks:
        return titles
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
    titles.watch()  # the tab bars the tabs above made: whole titles, scrolling
    return titles


COMPACT_HEIGHT = 950  # below this window height the tokenization panel becomes the first tab


def size_docks(window: QMainWindow, docks: list[PanelDock], side: QDockWidget | None = None) -> None:
    """The default proportions for the window's size. Tall windows: the first (tokenization) row
    short, the tabbed panels under it tall. Laptop-sized windows (below ``COMPACT_HEIGHT``): the
    tokenization panel joins the tabs, so that every panel gets the full height. The side dock (the
    generation pane) gets about 30% of the width, at least 340 px."""
    if side is not None and not side.isFloating():
        window.resizeDocks([side], [max(340, int(window.width() * 0.3))], Qt.Orientation.Horizontal)
    if len(docks) < 2:
        return
    if window.height() < COMPACT_HEIGHT:
        area = window.dockWidgetArea(docks[0])
        for dock in docks[1:]:  # one tab group, tokenization first (a panel placed beside the side dock stays)
            if window.dockWidgetArea(dock) == area:
                window.tabifyDockWidget(docks[0], dock)
        docks[0].raise_()
        return
    height = max(window.height() - 200, 400)
    window.resizeDocks([docks[0], docks[1]], [int(height * 0.24), int(height * 0.76)], Qt.Orientation.Vertical)


def add_generation_dock(window: QMainWindow, session: Session, pane: GenerationPane) -> PanelDock:
    """Host the ``GenerationPane`` ``pane`` in a dock on the window's right, full height, following
    ``session`` (its model and prompt; a clicked token becomes its trace: ``GenerationPane.attach``)."""
    dock = PanelDock(pane, window, scroll=False)
    window.setCorner(Qt.Corner.TopRightCorner, Qt.DockWidgetArea.RightDockWidgetArea)
    window.setCorner(Qt.Corner.BottomRightCorner, Qt.DockWidgetArea.RightDockWidgetArea)
    window.addDockWidget(Qt.DockWidgetArea.RightDockWidgetArea, dock)
    pane.attach(session)
    return dock
