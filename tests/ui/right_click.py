"""Right-clicking a point of a plot through the window system, as a user does, and choosing an entry
of the menu that opens (whatever opens it: a plot's own menu or a widget's context menu)."""

from __future__ import annotations

from PySide6.QtCore import QPoint, QPointF, Qt, QTimer
from PySide6.QtGui import QAction
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication, QGraphicsView, QMenu


def window_point(view: QGraphicsView, scene_pos: QPointF) -> QPoint:
    """Where ``scene_pos`` of ``view``'s scene lies in the coordinates of its top-level window."""
    viewport = view.viewport()
    return viewport.mapTo(viewport.window(), view.mapFromScene(scene_pos))


def right_click_menu(qtbot, view: QGraphicsView, scene_pos, choose: str | None = None) -> list[str]:
    """Press and release the right button at ``scene_pos`` through the top-level QWindow (so Qt makes
    the context-menu event a real click makes), find the popup menu that opens, return its entries'
    texts and trigger the first entry that starts with ``choose`` (then close the menu).

    ``scene_pos`` is a QPointF, or a callable giving it: a plot still being laid out or ranged moves its
    items, so a callable is read again until the point it gives stays on the plot."""
    window = view.window()
    handle = window.windowHandle()
    where = scene_pos if callable(scene_pos) else (lambda: scene_pos)
    # a dock just raised may still be laid out: wait until the point is on the plot, twice in a row
    last: list = [None]

    def settled() -> bool:
        point = window_point(view, where())
        steady = point == last[0] and window.childAt(point) is view.viewport()
        last[0] = point
        return steady

    qtbot.waitUntil(settled, timeout=10_000)
    point = window_point(view, where())
    seen: dict[str, object] = {}

    def look() -> None:  # runs also inside a blocking QMenu.exec
        menu = QApplication.activePopupWidget()
        if not isinstance(menu, QMenu) or not menu.isVisible():
            QTimer.singleShot(20, look)
            return
        actions = [a for a in menu.actions() if not a.isSeparator()]
        seen["texts"] = [a.text() for a in actions]
        chosen: QAction | None = next((a for a in actions if choose and a.text().startswith(choose)), None)
        menu.close()
        if chosen is not None:
            chosen.trigger()
        seen["chosen"] = chosen is not None
        seen["done"] = True

    QTimer.singleShot(0, look)
    QTest.mousePress(handle, Qt.MouseButton.RightButton, Qt.KeyboardModifier.NoModifier, point)
    QTest.mouseRelease(handle, Qt.MouseButton.RightButton, Qt.KeyboardModifier.NoModifier, point)
    qtbot.waitUntil(lambda: seen.get("done", False), timeout=10_000)
    assert choose is None or seen["chosen"], f"no entry {choose!r} in the menu: {seen['texts']}"
    return list(seen["texts"])
