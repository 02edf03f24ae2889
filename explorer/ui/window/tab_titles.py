"""Tab titles that can be read at 1280x800: each dock's tab carries a short title (its ``PanelSpec``'s
``short_title``, or its ``title`` when it has none), the View menu and the tab's tooltip its full
title.

Nine full titles ("Residual stream & logit lens", "Direct logit attribution", …) need about 1,130 px
of tab bar, more than the ~830 px a 1280-wide window leaves beside the generation pane, so Qt cut
them to "At…", "FF…". The short ones need about 780 px, still more than the ~700 px there: the tabs write
their whole short title and the bar scrolls (``whole_titles``) rather than cut every one ("Toke…").
Qt sets a dock tab's tooltip to the dock's
(short) title whenever it rebuilds the tab, so the full title is given at the moment a tooltip is
asked for (an event filter on the window's tab bars), never stored in the tab bar.

Qt can leave a dock tab bar of an earlier arrangement on screen behind the docks (its tabs name docks that
now sit in another bar); with scroll arrows its arrows poked out beside the generation pane. After each
relayout such a bar, whose current dock does not sit against it, is hidden (``stale_bars``); Qt shows a bar
again when it uses it.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt, QTimer
from PySide6.QtGui import QHelpEvent
from PySide6.QtWidgets import QDockWidget, QMainWindow, QTabBar, QToolTip
from shiboken6 import Shiboken

from explorer.ui.panels.base import Panel
from explorer.ui.panels.registry import spec_of

def full_title(panel: Panel) -> str:
    return panel.title or type(panel).__name__


def short_title(panel: Panel) -> str:
    """The tab's text: the panel's record's ``short_title``, else its title."""
    record = spec_of(type(panel))
    return record.tab_title if record is not None else full_title(panel)


def _mnemonic_safe(text: str) -> str:
    return text.replace("&", "&&")  # "&" would be read as a mnemonic marker in tabs and menus


def whole_titles(bar: QTabBar) -> None:
    """Tabs that write their whole (short) title: when they do not all fit the bar scrolls (arrows at its end)
    instead of cutting each to "Toke…", "Neuro…", "Fl…" (1280x800: twelve panels beside the generation pane)."""
    if bar.elideMode() != Qt.TextElideMode.ElideNone:
        bar.setElideMode(Qt.TextElideMode.ElideNone)
    if not bar.usesScrollButtons():
        bar.setUsesScrollButtons(True)


class TabTitles(QObject):
    """Watches ``window``'s dock tab bars (made and remade by Qt as docks are tabbed) and answers a
    tab's tooltip with its panel's full title. ``docks`` are the window's ``PanelDock``s."""

    def __init__(self, window: QMainWindow, docks: list) -> None:
        super().__init__(window)
        self.window = window
        self.full: dict[str, str] = {}
        for dock in docks:
            short = _mnemonic_safe(short_title(dock.panel))
            full = full_title(dock.panel)
            dock.setWindowTitle(short)
            dock.toggleViewAction().setText(_mnemonic_safe(full))
            dock.toggleViewAction().setToolTip(full)
            self.full[short] = full
        self._tidy_timer = QTimer(self)  # (an owned timer: a pending singleShot's callable outlived the window)
        self._tidy_timer.setSingleShot(True)
        self._tidy_timer.setInterval(0)
        self._tidy_timer.timeout.connect(self._tidy)
        window.installEventFilter(self)
        self.watch()

    def watch(self) -> None:
        for bar in self.window.findChildren(QTabBar):
            bar.removeEventFilter(self)  # never twice
            bar.installEventFilter(self)
            whole_titles(bar)

    def tooltip(self, bar: QTabBar, index: int) -> str | None:
        """The full title for tab ``index`` of ``bar`` (None: not a panel's tab)."""
        if not 0 <= index < bar.count():
            return None
        return self.full.get(bar.tabText(index))

    def _tidy(self) -> None:
        for bar in stale_bars(self.window):
            bar.hide()

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt's name
        if obj is self.window and event.type() in (QEvent.Type.LayoutRequest, QEvent.Type.Resize,
                                                   QEvent.Type.Show) and not self._tidy_timer.isActive():
            self._tidy_timer.start()  # once the layout has placed the docks
        if obj is self.window and event.type() == QEvent.Type.ChildAdded and isinstance(event.child(), QTabBar):
            event.child().installEventFilter(self)
        elif obj is self.window and event.type() == QEvent.Type.ChildPolished and isinstance(event.child(), QTabBar):
            whole_titles(event.child())  # made by Qt with ElideRight just before: polished, it is set up
        elif isinstance(obj, QTabBar) and event.type() in (QEvent.Type.Show, QEvent.Type.Polish):
            whole_titles(obj)  # (Qt sets ElideRight on a dock tab bar after adding it: set again when it shows)
        elif isinstance(obj, QTabBar) and event.type() == QEvent.Type.ToolTip and isinstance(event, QHelpEvent):
            text = self.tooltip(obj, obj.tabAt(event.pos()))
            if text is not None:
                QToolTip.showText(event.globalPos(), text, obj)
                return True
        return False


def stale_bars(window: QMainWindow) -> list[QTabBar]:
    """The window's dock tab bars on screen whose current tab's dock does not sit right against them (below, or
    above for tabs at the bottom): bars of an earlier arrangement that Qt left behind."""
    docks = {Shiboken.getCppPointer(d)[0]: d for d in window.findChildren(QDockWidget)}
    out = []
    for bar in window.findChildren(QTabBar):
        if bar.parentWidget() is not window or not bar.isVisible() or bar.count() == 0:
            continue
        dock = docks.get(bar.tabData(bar.currentIndex()))
        if dock is None:
            continue  # not a dock tab bar
        b, d = bar.geometry(), dock.geometry()
        touching = abs(d.top() - b.bottom() - 1) <= 2 or abs(b.top() - d.bottom() - 1) <= 2
        if not dock.isVisible() or not touching or abs(d.left() - b.left()) > 2 or abs(d.width() - b.width()) > 2:
            out.append(bar)
    return out
