"""An edit's work on the GUI thread comes in short events: the panels draw one per turn of the event
loop (a timer beats between two panels' draws), and no panel's expensive view runs beside a forward
pass (the lane is held while the pass runs and while the panels draw). Counted in events, not timed."""

from __future__ import annotations

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QApplication

from explorer.ui.session.progressive import Job, ProgressiveWork
from tests.ui.screen import every_panel_on_screen

PROMPT = "The cat sat on the mat, and the dog sat on the log by the door."


class Owner(QObject):
    trace = "T"


def test_the_lane_waits_until_every_hold_is_released(qtbot):
    work, owner, computed = ProgressiveWork(), Owner(), []
    work.hold(True, "forward")
    work.hold(True)  # "drawing"
    job = work.submit(Job(owner, "view", "T", lambda check: computed.append("ran") or "value", computed.append))
    QApplication.processEvents()  # one turn of the event loop: nothing may start
    assert work.held and work.pending() == [job] and computed == []
    work.hold(False)  # the panels are drawn, the pass still runs: still waiting
    assert work.held and work.pending() == [job] and computed == []
    work.hold(False, "forward")
    qtbot.waitUntil(lambda: computed == ["ran", "value"], timeout=10_000)
    assert not work.held and not work.busy


def test_no_view_runs_beside_a_forward_pass(qtbot, window):
    work, owner, order = window.session.progressive, Owner(), []
    window.trace_applied.connect(lambda trace: order.append("trace applied"))
    window.controller.request(PROMPT + " again")
    assert window.controller.busy and work.held  # the pass runs: the lane is held
    work.submit(Job(owner, "view", "T", lambda check: order.append("view computed"), lambda value: None))
    qtbot.waitUntil(lambda: "view computed" in order, timeout=30_000)
    assert order == ["trace applied", "view computed"]


def test_the_panels_draw_in_separate_events(qtbot, window, counter):
    """A zero-interval timer beats between any two panels' drawing of a new trace."""
    every_panel_on_screen(qtbot, window)
    draws = counter.draws(window)
    with qtbot.waitSignal(window.trace_applied, timeout=30_000):
        window.controller.request(PROMPT + " once more")
    draws = [(panel, count) for panel, count, trace in draws if trace is window.trace]  # not the old trace's
    assert len(draws) >= 4, draws  # several panels on screen, each drawn once
    assert len({panel for panel, _ in draws}) == len(draws), draws
    counts = [count for _, count in draws]
    assert all(b > a for a, b in zip(counts, counts[1:])), draws  # a beat between any two draws


def test_the_nan_check_runs_beside_the_drawing_and_reaches_the_status_bar(qtbot, window):
    """The numbers are checked on a worker of their own; the status bar says where they stop being finite
    once both the check and the drawing are done, and says nothing again for finite numbers."""
    import torch

    warning = window.status.warning
    assert not warning.isVisible()
    weight = next(p for name, p in window.loaded.model.named_parameters() if name.startswith("blocks.1."))
    saved = weight.detach().clone()
    with torch.no_grad():
        weight.fill_(float("nan"))
    try:
        with qtbot.waitSignal(window.trace_applied, timeout=30_000):
            window.controller.request(PROMPT + " broken")
        qtbot.waitUntil(lambda: not window.presenter.checking and warning.isVisible(), timeout=30_000)
        assert "not finite" in warning.text() and "NaN" in warning.text()
    finally:
        with torch.no_grad():
            weight.copy_(saved)
    with qtbot.waitSignal(window.trace_applied, timeout=30_000):
        window.controller.request(PROMPT + " mended")
    qtbot.waitUntil(lambda: not window.presenter.checking, timeout=30_000)
    assert not warning.isVisible()
