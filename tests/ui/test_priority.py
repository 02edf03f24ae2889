"""Background work runs below the GUI thread's CPU priority (explorer.ui.session.priority): every worker
starts through the one door (explorer.ui.session.background), which lowers it first: the forward pass,
the panels' preparation, the progressive views, generation, steering, patching, with torch's own threads;
the GUI thread keeps its own. Linux only: elsewhere the module does nothing."""

from __future__ import annotations

import os
import sys
import threading

import pytest
from PySide6.QtCore import QObject

from explorer.core.cancel import Cancel
from explorer.ui.session import background, priority
from explorer.ui.session.frame import PanelRequest
from explorer.ui.session.presenter import prepare_panels
from explorer.ui.session.progressive import Job, ProgressiveWork
from explorer.ui.session.workers import TraceController

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice values are Linux's")


def nice_here() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


def gui_nice() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.main_thread().native_id)


def target() -> int:
    return min(19, gui_nice() + priority.NICE)


@linux
def test_the_forward_pass_and_torch_threads_run_below_the_gui_thread(qtbot, tiny_loaded):
    before = gui_nice()
    seen = {}

    def prepare(trace, snapshot):  # the first panel's prepare runs on the forward pass's worker, after the pass
        seen["tid"], seen["nice"] = threading.get_native_id(), nice_here()
        seen["others"] = {tid: priority.nice_of(tid) for tid in priority.threads()}
        return None

    controller = TraceController(panels=lambda: (PanelRequest("first", None, prepare),))
    controller.set_model(tiny_loaded)
    with qtbot.waitSignal(controller.trace_ready, timeout=30_000):
        controller.request("The cat sat on the mat. " * 4)
    assert threading.current_thread() is threading.main_thread()
    assert gui_nice() == before  # the GUI thread keeps its priority
    assert seen["tid"] != threading.main_thread().native_id
    assert seen["nice"] >= min(19, before + priority.NICE)
    # every other thread there was then (torch's OpenMP threads, whichever thread made them) is below the GUI thread
    gui = threading.main_thread().native_id
    lower = {tid: nice for tid, nice in seen["others"].items() if tid != gui and nice is not None}
    assert lower and all(nice >= min(19, before + priority.NICE) for nice in lower.values()), lower
    assert seen["others"][gui] == before


@linux
def test_a_progressive_view_and_the_panels_preparation_run_below_the_gui_thread(qtbot):
    class Owner(QObject):
        trace = "T"

    work, owner, niced = ProgressiveWork(), Owner(), []
    work.submit(Job(owner, "view", "T", lambda check: nice_here(), niced.append))
    qtbot.waitUntil(lambda: bool(niced), timeout=10_000)
    assert niced[0] >= target()

    seen = []
    request = PanelRequest("p", None, lambda trace, snapshot: seen.append(nice_here()))
    background.run(prepare_panels, object(), [request], Cancel())  # as the presenter starts it
    qtbot.waitUntil(lambda: bool(seen), timeout=10_000)
    assert seen[0] >= target()


@linux
def test_background_lowers_threads_made_before_it_and_never_raises_one_or_the_gui_thread():
    before = gui_nice()
    made_early, lowest, go = {}, {}, threading.Event()

    def idle(store):  # like an OpenMP thread made at nice 0, before its creator was lowered
        store["tid"] = threading.get_native_id()
        go.wait(10)

    def lowest_first(store):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        idle(store)

    threads = [threading.Thread(target=idle, args=(made_early,)),
               threading.Thread(target=lowest_first, args=(lowest,))]
    for t in threads:
        t.start()
    try:
        while "tid" not in made_early or "tid" not in lowest:
            threading.Event().wait(0.001)
        before_early = priority.nice_of(made_early["tid"])
        lowered = priority.background()
        assert priority.nice_of(made_early["tid"]) == max(before_early, target())
        assert (made_early["tid"] in lowered) == (before_early < target())
        assert priority.nice_of(lowest["tid"]) == 19  # never raised back
        assert lowest["tid"] not in lowered
        assert gui_nice() == before and threading.main_thread().native_id not in lowered
    finally:
        go.set()
        for t in threads:
            t.join(10)


def test_off_linux_nothing_is_done(monkeypatch):
    monkeypatch.setattr(priority, "LINUX", False)
    called = []
    monkeypatch.setattr(os, "setpriority", lambda *args: called.append(args), raising=False)
    assert priority.background() == []
    priority.lower_this_thread(5)
    assert called == [] and priority.nice_of(threading.get_native_id()) is None


def test_freed_memory_goes_back_only_once_the_app_is_idle(qtbot, make_window, tiny_checkpoint, monkeypatch):
    """malloc_trim holds the allocator's locks (the GUI thread's allocations wait): it waits for an idle app,
    and a new request puts it off again."""
    from explorer.core import memory
    from explorer.ui.window import drawing

    monkeypatch.setattr(drawing, "TRIM_IDLE_MS", 300)
    trims = []
    monkeypatch.setattr(memory, "release_freed_memory", lambda: trims.append(threading.get_native_id()) or True)
    window = make_window()
    with qtbot.waitSignal(window.trace_applied, timeout=30_000):
        window.open_checkpoint(str(tiny_checkpoint))
    qtbot.waitUntil(lambda: bool(trims), timeout=30_000)  # the first trace's freed memory, once idle
    assert trims[0] != threading.main_thread().native_id  # on a worker
    trims.clear()
    with qtbot.waitSignal(window.trace_applied, timeout=30_000):
        window.controller.request("A second prompt, and its trace.")
    qtbot.waitUntil(lambda: window.drawing.trim_waiting or bool(trims), timeout=30_000)
    assert trims == []  # not at once: it waits for the app to stay idle
    window.controller.request("A newer prompt arrives before the app was idle long enough.")
    assert not window.drawing.trim_waiting and trims == []
    qtbot.waitUntil(lambda: bool(trims), timeout=30_000)  # after that trace, once idle
    assert window.controller.is_idle() and not window.progressive.busy


@linux
def test_the_door_lowers_every_worker_before_its_work_on_the_pool_and_on_a_thread_of_its_own(qtbot):
    """Generation, steering, patching, compare's second model...: whatever starts through ``background.run``
    runs below the GUI thread from its first line (a generation with no trace before it would otherwise run
    at the GUI thread's priority)."""
    seen: list[int] = []
    background.run(nice_here, on_done=seen.append)
    background.run(nice_here, on_done=seen.append, own_thread=True)

    def steps():
        yield nice_here()
        return nice_here()

    background.run(steps, on_yield=seen.append, on_done=seen.append)
    qtbot.waitUntil(lambda: len(seen) == 4, timeout=10_000)
    assert all(nice >= target() for nice in seen), seen
