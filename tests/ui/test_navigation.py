"""The panels' navigation: every tab's title readable at laptop and desktop sizes (the full title in
its tooltip and the View menu), and panels that do not apply to the model hidden."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QEvent
from PySide6.QtGui import QHelpEvent
from PySide6.QtWidgets import QApplication, QTabBar, QToolTip

from explorer.ui.window.tab_titles import SHORT_TITLES


def panel_tab_bars(window):
    """The window's visible tab bars that hold panel tabs."""
    shorts = {d.windowTitle() for d in window.docks}
    return [bar for bar in window.findChildren(QTabBar)
            if bar.isVisible() and any(bar.tabText(i) in shorts for i in range(bar.count()))]


@pytest.mark.parametrize("size", [(1280, 800), (1600, 1000)])
def test_every_tab_title_is_readable(qtbot, make_window, size):
    window = make_window()
    window.resize(*size)
    from explorer.ui.window.docks import size_docks

    size_docks(window, window.docks, window.generation_dock)
    qtbot.waitUntil(lambda: bool(panel_tab_bars(window)))
    QApplication.processEvents()
    seen = 0
    for bar in panel_tab_bars(window):
        for i in range(bar.count()):
            text = bar.tabText(i)
            # elided: Qt gives the tab less than the width its whole text needs
            assert bar.tabRect(i).width() >= bar.tabSizeHint(i).width(), f"tab {text!r} is cut at {size}"
            assert bar.tabRect(i).right() <= bar.width(), f"tab {text!r} is off the bar at {size}"
            seen += 1
    assert seen >= 7  # the panels are tabs (one may be hidden: it does not apply to this window's model)
    assert set(SHORT_TITLES) == {d.objectName() for d in window.docks}  # every panel has a short title


def test_the_full_title_is_in_the_tooltip_and_the_view_menu(qtbot, make_window, monkeypatch):
    window = make_window()
    window.resize(1280, 800)
    qtbot.waitUntil(lambda: bool(panel_tab_bars(window)))
    titles = window.tab_titles
    shown = []
    monkeypatch.setattr(QToolTip, "showText", lambda pos, text, *a: shown.append(text))
    for bar in panel_tab_bars(window):
        for i in range(bar.count()):
            dock = next(d for d in window.docks if d.windowTitle() == bar.tabText(i))
            assert titles.tooltip(bar, i) == dock.panel.title
            centre = bar.tabRect(i).center()
            event = QHelpEvent(QEvent.Type.ToolTip, centre, bar.mapToGlobal(centre))
            assert titles.eventFilter(bar, event) is True
            assert shown[-1] == dock.panel.title
    assert titles.tooltip(panel_tab_bars(window)[0], 99) is None
    residual = next(d for d in window.docks if d.objectName() == "dock-residual")
    assert residual.windowTitle() == "Residual"
    assert residual.toggleViewAction().text().replace("&&", "&") == "Residual stream & logit lens"
