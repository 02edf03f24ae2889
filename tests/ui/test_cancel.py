"""Cancellable work: a stale forward pass stops at a layer boundary; closing never waits for it; a
load that finishes after closing starts nothing."""

from __future__ import annotations

import threading
import time

import pytest
from PySide6.QtCore import QCoreApplication, QThreadPool

from explorer.core.cancel import Cancel, Cancelled
from explorer.core.model import Transformer
from explorer.core.trace import capture


def count_blocks(monkeypatch, pause: float = 0.0, gate: threading.Event | None = None):
    """Count (and slow down) every block the model runs; ``gate``: the first block waits for it."""
    ran: list[int] = []
    original = Transformer.block_forward

    def counted(self, layer, *args, **kwargs):
        ran.append(layer)
        if gate is not None and len(ran) == 1:
            gate.wait(30)
        if pause:
            time.sleep(pause)
        return original(self, layer, *args, **kwargs)

    monkeypatch.setattr(Transformer, "block_forward", counted)
    return ran


def test_a_cancelled_capture_stops_at_the_next_layer_boundary(monkeypatch, tiny_loaded):
    ran = count_blocks(monkeypatch)
    cancel = Cancel()
    asked = []

    def after_first_block() -> bool:
        asked.append(len(ran))
        if len(ran) == 1:
            cancel.set()
        return cancel.is_set()

    ids = tiny_loaded.tokenizer.encode("Hello there, world")
    with pytest.raises(Cancelled):
        capture(tiny_loaded.model, ids, ["t"] * len(ids), cancel=after_first_block)
    assert ran == [0]  # block 1 never ran
    trace, _ = capture(tiny_loaded.model, ids, ["t"] * len(ids), cancel=lambda: False)
    assert trace.n_tokens == len(ids)


def test_a_stale_trace_is_abandoned_at_a_layer_boundary(qtbot, window, monkeypatch):
    gate = threading.Event()
    ran = count_blocks(monkeypatch, gate=gate)
    applied, dropped = [], []
    window.trace_applied.connect(applied.append)
    window.controller.dropped.connect(dropped.append)
    first = window.controller.request("The first request, soon stale")
    qtbot.waitUntil(lambda: len(ran) == 1, timeout=60_000)  # block 0 of the first pass is under way
    window.controller.request("A newer request")
    gate.set()
    qtbot.waitUntil(lambda: len(applied) == 1, timeout=60_000)
    qtbot.waitUntil(window.controller.is_idle, timeout=60_000)
    n_layers = window.loaded.config.n_layers
    assert dropped == [first]
    assert ran == [0] + list(range(n_layers))  # the stale pass stopped after block 0; the new one ran whole
    assert applied[0].tokens == tuple(window.loaded.tokenizer.displays(window.loaded.tokenizer.encode("A newer request")))


def test_closing_during_a_trace_does_not_wait_for_it(qtbot, make_window, tiny_checkpoint, monkeypatch):
    """Closing returns while the pass is still inside a block (held there by a gate, not by time), and
    the pass then stops at the next layer boundary instead of running its remaining 39 passes."""
    window = make_window()
    with qtbot.waitSignal(window.trace_applied, timeout=60_000):
        window.open_checkpoint(str(tiny_checkpoint))
    original = window.loaded.trace_ids
    passes = 40

    def long_trace(ids, *args, **kwargs):
        for _ in range(passes - 1):
            original(ids, *args, **kwargs)
        return original(ids, *args, **kwargs)

    monkeypatch.setattr(window.loaded, "trace_ids", long_trace)
    inside, gate, left = threading.Event(), threading.Event(), threading.Event()
    ran: list[int] = []
    block = Transformer.block_forward

    def held(self, layer, *args, **kwargs):
        ran.append(layer)
        if len(ran) == 2:  # the second block of the first pass waits for the test
            inside.set()
            gate.wait(60)
            left.set()
        return block(self, layer, *args, **kwargs)

    monkeypatch.setattr(Transformer, "block_forward", held)
    applied = []
    window.trace_applied.connect(applied.append)
    window.controller.request("A long trace the user closes the window on")
    qtbot.waitUntil(inside.is_set, timeout=60_000)
    window.close()
    assert not left.is_set()  # close() returned while the worker was still held inside the block
    gate.set()
    qtbot.waitUntil(lambda: window.controller.is_idle(), timeout=60_000)
    assert len(ran) < 2 * passes  # abandoned at a boundary, not finished
    assert applied == []


def test_a_load_that_finishes_after_closing_starts_no_trace(qtbot, make_window, tiny_checkpoint, monkeypatch):
    import explorer.ui.session.workers as workers

    gate = threading.Event()
    original = workers.load_model_steps

    def slow_load(request, *args, **kwargs):
        result = yield from original(request, *args, **kwargs)
        gate.wait(30)
        return result

    monkeypatch.setattr(workers, "load_model_steps", slow_load)
    window = make_window()
    requests = []
    window.controller.requested.connect(requests.append)
    window.open_checkpoint(str(tiny_checkpoint))
    window.close()
    gate.set()
    qtbot.waitUntil(lambda: not window.loader.busy, timeout=60_000)
    assert QThreadPool.globalInstance().waitForDone(60_000)  # every worker done, then every queued signal
    QCoreApplication.processEvents()
    QCoreApplication.sendPostedEvents()
    assert requests == [] and window.loaded is None and window.trace is None
