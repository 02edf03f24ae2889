"""Closing a window while its work runs: workers stop, dialogs go, nothing raises, the window is freed.

Five windows are opened and closed in one process (as ``explorer.show`` from a notebook does), each
closed while a trace, a generation and an attention-map export are running. No error dialog appears,
nothing is logged as an error, and the number of top-level widgets and the process's resident memory
come back to where they were after the first window (within 10%).
"""

from __future__ import annotations

import gc
import logging
import os
import threading
import time
import weakref
from pathlib import Path

import pytest
from PySide6.QtCore import QThreadPool
from PySide6.QtWidgets import QApplication

import explorer.ui.export.attention_maps as attention_maps
from explorer.core.model import Transformer
from explorer.ui.crash import ExceptionHook

WINDOWS = 5


def resident_bytes() -> int:
    """The process's resident memory now (not its peak)."""
    statm = Path("/proc/self/statm")
    if statm.exists():
        return int(statm.read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    import psutil  # other systems (it comes with accelerate)

    return psutil.Process().memory_info().rss


class Gate:
    """Holds the worker threads that reach it while it is shut (polling, so that nothing can hang on
    it past ``open``): work that must still be running when the window closes is held there until
    the test has seen it running, and let go as the window closes."""

    def __init__(self) -> None:
        self.opened = threading.Event()
        self.opened.set()
        self.lock = threading.Lock()
        self.held = 0  # threads waiting at the gate now

    def shut(self) -> None:
        self.opened.clear()

    def open(self) -> None:
        self.opened.set()

    def pass_through(self) -> None:
        if self.opened.is_set():
            return
        with self.lock:
            self.held += 1
        try:
            while not self.opened.wait(0.01):
                pass
        finally:
            with self.lock:
                self.held -= 1


def slow_blocks(monkeypatch, pause: float, gate: Gate) -> None:
    """Every transformer block sleeps ``pause`` seconds first and waits at ``gate`` (a forward pass or
    a generation step then takes long enough to be running when the window closes)."""
    original = Transformer.block_forward

    def slow(self, layer, *args, **kwargs):
        time.sleep(pause)
        gate.pass_through()
        return original(self, layer, *args, **kwargs)

    monkeypatch.setattr(Transformer, "block_forward", slow)


def slow_maps(monkeypatch, pause: float, gate: Gate) -> None:
    """Every attention map takes ``pause`` seconds more and, once written, waits at ``gate``."""
    original = attention_maps.write_attention_maps

    def slow(*args, **kwargs):
        for progress in original(*args, **kwargs):
            time.sleep(pause)
            yield progress
            gate.pass_through()

    monkeypatch.setattr(attention_maps, "write_attention_maps", slow)


def freed(refs: list[weakref.ref]) -> bool:
    QApplication.sendPostedEvents(None, 0)  # the closed window's deferred deletes, on the GUI thread
    gc.collect()
    return all(r() is None for r in refs)


def settle(qtbot, refs: list[weakref.ref]) -> list[str]:
    """Wait for every worker to end and the closed window, its Session, model and trace to be freed;
    what is still alive after 20 s."""
    qtbot.waitUntil(lambda: QThreadPool.globalInstance().activeThreadCount() == 0, timeout=30_000)
    try:
        qtbot.waitUntil(lambda: freed(refs), timeout=20_000)
    except qtbot.TimeoutError:
        pass
    return [type(r()).__name__ for r in refs if r() is not None]


def open_busy_and_close(qtbot, settings, checkpoint, folder: Path, blocks: Gate, maps: Gate) -> list[weakref.ref]:
    """Open a window on ``checkpoint``, start an export, a generation and a trace, close it while all
    three run (each held at its gate until seen running, let go as the window closes); weak
    references to the window, its Session, its model and its trace."""
    from explorer.ui.window.main_window import MainWindow

    window = MainWindow(settings=settings, device="cpu")
    window.resize(1000, 700)
    window.show()
    with qtbot.waitSignal(window.trace_applied, timeout=60_000):
        window.open_checkpoint(str(checkpoint))
    maps.shut()  # the export waits after its first map
    export = window.export_attention_maps(str(folder))
    assert export is not None
    qtbot.waitUntil(lambda: export.done >= 1 and maps.held == 1, timeout=30_000)
    pane = window.generation
    pane.max_new.setValue(40)
    pane.greedy.setChecked(True)
    with qtbot.waitSignal(pane.step_added, timeout=30_000):
        assert pane.generate()
    blocks.shut()  # the generation (39 tokens to go) waits at its next block, the trace at its first
    window.controller.request("A trace that is still running when the window closes")
    qtbot.waitUntil(lambda: blocks.held == 2 and window.controller.busy, timeout=30_000)
    assert pane.running and window.attention_export is export and not window.controller.is_idle()
    blocks.open()  # all three go on (slowly) while the window closes, and stop at their next check
    maps.open()
    with qtbot.waitSignal(window.destroyed, timeout=30_000):
        window.close()
    assert export.closed  # its worker stops before the next head; its dialog is gone
    return [weakref.ref(window), weakref.ref(window.session), weakref.ref(window.loaded), weakref.ref(window.trace)]


@pytest.mark.qt_no_exception_capture
def test_windows_closed_while_busy_leave_nothing_behind(qtbot, settings, tiny_checkpoint, tmp_path, monkeypatch,
                                                        caplog):
    blocks, maps = Gate(), Gate()
    slow_blocks(monkeypatch, 0.02, blocks)
    slow_maps(monkeypatch, 0.05, maps)
    pool = QThreadPool.globalInstance()
    threads = pool.maxThreadCount()
    pool.setMaxThreadCount(max(threads, 4))  # the export, the generation and the trace all run at once
    hook = ExceptionHook().install()  # what the app shows for an unexpected error (sys and threads)
    caplog.set_level(logging.ERROR)
    counts, memory, alive = [], [], []
    try:
        for i in range(WINDOWS):
            refs = open_busy_and_close(qtbot, settings, tiny_checkpoint, tmp_path / f"maps-{i}", blocks, maps)
            alive.append(settle(qtbot, refs))
            counts.append(len(QApplication.topLevelWidgets()))
            memory.append(resident_bytes())
    finally:
        blocks.open()  # nothing waits at a gate after a failure
        maps.open()
        hook.uninstall()
        pool.setMaxThreadCount(threads)
    assert hook.dialogs == [], [d.report for d in hook.dialogs]
    assert alive == [[]] * WINDOWS  # each window, its Session, model and trace were freed
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    print("top-level widgets", counts, "RSS MiB", [m // 2**20 for m in memory])
    first_count, first_memory = counts[0], memory[0]
    assert all(count <= first_count * 1.1 for count in counts), counts
    assert all(rss <= first_memory * 1.1 for rss in memory), [m // 2**20 for m in memory]


def test_closing_twice_is_harmless(qtbot, make_window, caplog):
    window = make_window()
    caplog.set_level(logging.WARNING)
    window.close()
    window.close()  # again, before the deferred delete ran
    with qtbot.waitSignal(window.destroyed, timeout=10_000):
        pass
    window.close()  # and after it: the window stays closed
    assert window.session.closed and not any(r.levelno >= logging.ERROR for r in caplog.records)
