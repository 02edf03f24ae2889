"""A window a script drops without close(): Python may free its Session before the window's own widgets
(the order of the interpreter's clean-up), and the docks, hidden as the window is destroyed, must not
reach the Session's deleted objects ("Signal source has been deleted")."""

from __future__ import annotations

import shiboken6
from PySide6.QtCore import QThreadPool


def test_a_window_dropped_after_its_session_was_freed_raises_nothing(qtbot, settings, tiny_checkpoint):
    from explorer.ui.window.main_window import MainWindow

    window = MainWindow(settings=settings, device="cpu")
    window.resize(1200, 800)
    window.show()
    with qtbot.waitSignal(window.trace_applied, timeout=30_000):
        window.open_checkpoint(str(tiny_checkpoint))
    qtbot.waitUntil(lambda: not window.progressive.busy and window.presenter.is_idle())
    assert QThreadPool.globalInstance().waitForDone(60_000)
    with qtbot.capture_exceptions() as raised:
        shiboken6.delete(window.session)  # the interpreter's clean-up may free the Session first
        shiboken6.delete(window)  # then the window: its docks are hidden, each says so
    assert not raised, raised
