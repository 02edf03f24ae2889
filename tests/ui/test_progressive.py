"""Progressive views (explorer.ui.session.progressive): expensive views are computed after the cheap drawing,
only for shown panels, the current selection first; stale work is abandoned and never drawn."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from PySide6.QtCore import QObject

from explorer.core.analysis import residual as core
from explorer.ui.panels.residual import ResidualPanel
from explorer.ui.panels.residual import lens as residual_lens
from explorer.ui.session.progressive import Job, ProgressiveWork
from explorer.ui.session.selection import Selection

PROMPT = "The cat sat on the mat, and the dog sat on the log by the door."


class Owner(QObject):
    trace = None


def test_a_job_for_an_old_trace_or_an_old_key_is_never_applied(qtbot):
    work = ProgressiveWork()
    owner = Owner()
    owner.trace = "A"
    release = threading.Event()
    applied = []

    def slow(check):
        release.wait(10)
        check()  # the boundary where a stale job stops
        return "old"

    work.submit(Job(owner, "view", "A", slow, applied.append))
    work.submit(Job(owner, "view", "A", lambda check: "newer selection", applied.append))  # same key: replaces
    other = work.submit(Job(owner, "other", "A", lambda check: "other view", applied.append))
    owner.trace = "B"  # a newer trace is shown: every job of "A" is stale
    release.set()
    qtbot.waitUntil(lambda: not work.busy, timeout=10_000)
    assert applied == []
    assert other.cancel.is_set() is False  # not cancelled, but its trace is no longer shown: not applied

    owner.trace = "C"
    work.submit(Job(owner, "view", "C", lambda check: "current", applied.append))
    qtbot.waitUntil(lambda: applied == ["current"], timeout=10_000)


def test_jobs_run_by_priority_and_cancel_all_stops_them(qtbot):
    work = ProgressiveWork()
    owner = Owner()
    owner.trace = "T"
    gate = threading.Event()
    order = []
    work.submit(Job(owner, "first", "T", lambda check: gate.wait(10), lambda v: order.append("first")))
    for name, priority in (("late", 5), ("soon", 1), ("middle", 3)):
        work.submit(Job(owner, name, "T", lambda check, n=name: n, lambda v: order.append(v), priority))
    gate.set()
    qtbot.waitUntil(lambda: not work.busy, timeout=10_000)
    assert order == ["first", "soon", "middle", "late"]

    gate.clear()
    work.submit(Job(owner, "blocked", "T", lambda check: (gate.wait(10), check()), order.append))
    work.submit(Job(owner, "queued", "T", lambda check: "queued", order.append))
    work.cancel_all()
    gate.set()
    qtbot.waitUntil(lambda: not work.busy, timeout=10_000)
    assert order == ["first", "soon", "middle", "late"]


@pytest.fixture
def progressive_lens(monkeypatch):
    """Make even the tiny model's lens progressive, in blocks of 4 positions."""
    monkeypatch.setattr(residual_lens, "LENS_NOW_MACS", 0)
    monkeypatch.setattr(residual_lens, "block_positions", lambda trace: 4)


def shown_panel(qtbot, loaded, work):
    panel = ResidualPanel(Selection())
    panel.progressive = work
    qtbot.addWidget(panel)
    panel.set_tokenizer(loaded.tokenizer)
    panel.resize(1400, 700)  # wide enough for the whole prompt in the lens beside the token chart
    panel.show()
    qtbot.waitExposed(panel)
    return panel


def test_the_lens_fills_progressively_selected_token_first_with_exact_values(qtbot, tiny_loaded, progressive_lens):
    work = ProgressiveWork()
    panel = shown_panel(qtbot, tiny_loaded, work)
    trace = tiny_loaded.trace(PROMPT)
    panel.selection.clamp(trace.config.n_layers, trace.config.n_heads, trace.n_tokens)
    panel.selection.set_token(9)
    panel.prepare(trace, panel.snapshot())
    assert trace.memo_get(("residual.lens", residual_lens.LENS_TOP, tiny_loaded.tokenizer.vocab_size)).filled.sum() == 0
    panel.set_trace(trace)
    assert not panel.lens.complete and "computing" in panel.lens_map.plot.titleLabel.text
    assert np.isnan(panel.lens_map.matrix).all()  # nothing shown before it is computed
    assert panel.computing()
    qtbot.waitUntil(lambda: not panel.computing(), timeout=30_000)
    keys = [key for owner, key in work.computed if owner is panel]
    assert keys[0] == ("lens", "selected")  # the selected position across every layer first
    assert keys[1] == ("lens", 8)  # then the block holding it
    whole = core.logit_lens(trace, top=residual_lens.LENS_TOP, vocab_size=tiny_loaded.tokenizer.vocab_size)
    assert panel.lens.complete
    for name in ("ids", "target_ranks"):
        np.testing.assert_array_equal(getattr(panel.lens, name), getattr(whole, name))
    for name in ("probs", "logits", "target_probs", "entropy"):  # blocks of rows: BLAS may round differently
        np.testing.assert_allclose(getattr(panel.lens, name), getattr(whole, name), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(panel.lens_map.matrix, whole.probs[..., 0], rtol=1e-5, atol=1e-6)
    assert "computing" not in panel.lens_map.plot.titleLabel.text
    assert all(text for row in panel.lens_texts for text in row)  # every cell has its text once complete
    # the last boundary is the model's own prediction
    final = trace["logits"].argmax(-1)
    np.testing.assert_array_equal(panel.lens.ids[-1, :, 0], final)


def test_a_newer_trace_abandons_the_old_lens_and_never_draws_it(qtbot, tiny_loaded, progressive_lens, monkeypatch):
    work = ProgressiveWork()
    panel = shown_panel(qtbot, tiny_loaded, work)
    old, new = tiny_loaded.trace(PROMPT), tiny_loaded.trace("A different prompt with other words in it.")
    gate = threading.Event()
    original = core.lens_columns

    def gated(trace, *args, **kwargs):
        if trace is old:
            gate.wait(10)
        return original(trace, *args, **kwargs)

    monkeypatch.setattr(core, "lens_columns", gated)
    panel.selection.clamp(2, 2, old.n_tokens)
    panel.set_trace(old)
    qtbot.waitUntil(lambda: work.busy, timeout=5_000)
    old_lens = panel.lens
    panel.set_trace(new)  # a newer edit while the old lens is being computed
    gate.set()
    qtbot.waitUntil(lambda: not panel.computing(), timeout=30_000)
    assert panel.lens is not old_lens and panel.lens.complete
    assert not old_lens.filled.any()  # the old trace's blocks were never written, let alone drawn
    whole = core.logit_lens(new, top=residual_lens.LENS_TOP, vocab_size=tiny_loaded.tokenizer.vocab_size)
    np.testing.assert_allclose(panel.lens_map.matrix, whole.probs[..., 0], rtol=1e-5, atol=1e-6)


def test_a_hidden_tab_computes_nothing_until_shown(qtbot, make_window, tiny_checkpoint, progressive_lens):
    window = make_window()
    with qtbot.waitSignal(window.trace_applied, timeout=30_000):
        window.open_checkpoint(str(tiny_checkpoint))
    residual = next(d for d in window.docks if isinstance(d.panel, ResidualPanel))
    front = next(d for d in window.docks[1:] if d is not residual)  # the tabs share one area (docks.py)
    if residual not in window.tabifiedDockWidgets(front):
        window.tabifyDockWidget(front, residual)
    front.raise_()
    qtbot.waitUntil(lambda: not residual.panel.on_screen, timeout=5_000)  # Qt still says "visible"
    window.progressive.computed.clear()
    with qtbot.waitSignal(window.trace_applied, timeout=30_000):
        window.set_prompt(PROMPT)
    qtbot.waitUntil(lambda: not window.progressive.busy, timeout=30_000)
    assert all(owner is not residual.panel for owner, _ in window.progressive.computed)
    vocab = window.loaded.tokenizer.vocab_size
    lens = window.trace.memo_get(("residual.lens", residual_lens.LENS_TOP, vocab))
    assert lens is None or not lens.filled.any()
    residual.raise_()  # the tab is shown: now it computes, for the current trace
    qtbot.waitUntil(lambda: residual.panel.trace is window.trace and residual.panel.lens is not None
                    and residual.panel.lens.filled[slice(*residual.panel._lens_shown)].all()
                    and residual.panel._lens_shown[1] > 0 and not residual.panel.computing(), timeout=30_000)
    assert any(owner is residual.panel for owner, _ in window.progressive.computed)


def test_a_long_prompt_lens_computes_the_window_around_the_selection_only(qtbot, tiny_loaded, progressive_lens):
    """Past the tokens that fit its grid (``lens_window``) the lens shows (and computes) a window around
    the selected token; the window moves when the selection leaves it, computing only what was not seen; "whole prompt" fills
    the rest. Every value is the whole lens's."""
    work = ProgressiveWork()
    panel = shown_panel(qtbot, tiny_loaded, work)
    trace = tiny_loaded.trace(" ".join([PROMPT] * 4))
    n, W = trace.n_tokens, panel.lens_window()
    assert residual_lens.LENS_WINDOW_MIN <= W <= residual_lens.LENS_WINDOW and n > 2 * W
    whole = core.logit_lens(trace, top=residual_lens.LENS_TOP, vocab_size=tiny_loaded.tokenizer.vocab_size)
    panel.selection.clamp(trace.config.n_layers, trace.config.n_heads, n)
    panel.selection.set_token(30)
    panel.set_trace(trace)
    assert panel.lens_whole.isVisible() and not panel.lens_whole.isChecked()
    qtbot.waitUntil(lambda: not panel.computing(), timeout=30_000)
    a, b = panel._lens_shown
    assert b - a == W and a <= 30 < b
    assert panel.lens.filled[a:b].all() and panel.lens.filled.sum() == W  # nothing outside the window
    assert panel.lens_map.matrix.shape == (trace.config.n_layers + 1, W)
    np.testing.assert_allclose(panel.lens_map.matrix, whole.probs[:, a:b, 0], rtol=1e-5, atol=1e-6)
    assert f"positions {a}\u2013{b - 1} of {n}" in panel.lens_map.plot.titleLabel.text
    assert panel.lens_map._col_labels == list(trace.tokens[a:b])
    # a tooltip and a click name the real position, not the column
    assert f"({a + 2})" in panel.lens_cell_text(0, 2)
    panel.lens_map.cell_clicked.emit(0, 3)
    assert panel.selection.token == a + 3 and panel._lens_shown == (a, b)  # inside: the window stays

    # the selection leaves the window: it moves, and only the new positions are computed
    seen = panel.lens.filled.copy()
    work.computed.clear()
    panel.selection.set_token(n - 1)
    assert panel._lens_shown == (n - W, n)
    qtbot.waitUntil(lambda: not panel.computing(), timeout=30_000)
    assert panel.lens.filled[n - W:].all()
    assert panel.lens.filled.sum() == seen.sum() + np.count_nonzero(~seen[n - W:])
    np.testing.assert_allclose(panel.lens_map.matrix, whole.probs[:, n - W:, 0], rtol=1e-5, atol=1e-6)
    from explorer.ui.panels.residual.cells import visible_text  # each cell's text: the window's own tokens
    assert panel.lens_texts == [[visible_text(panel.token_text(int(i))) for i in row] for row in whole.ids[:, n - W:, 0]]
    probs, rows, cols = panel._lens_probs_data()
    assert probs.shape == (trace.config.n_layers + 1, W) and len(cols) == W and not np.isnan(probs).any()

    # "whole prompt": every position, exact
    panel.lens_whole.setChecked(True)
    assert panel._lens_shown == (0, n)
    qtbot.waitUntil(lambda: not panel.computing(), timeout=30_000)
    assert panel.lens.complete
    np.testing.assert_array_equal(panel.lens.ids, whole.ids)
    np.testing.assert_array_equal(panel.lens.target_ranks, whole.target_ranks)
    np.testing.assert_allclose(panel.lens_map.matrix, whole.probs[..., 0], rtol=1e-5, atol=1e-6)

    # a narrower grid shows fewer positions (as many as fit), still around the selected token
    panel.lens_whole.setChecked(False)
    panel.selection.set_token(40)
    panel.resize(420, 700)
    qtbot.waitUntil(lambda: panel._lens_shown[1] - panel._lens_shown[0] == panel.lens_window() < W, timeout=5_000)
    a, b = panel._lens_shown
    assert a <= 40 < b and panel.lens_map.matrix.shape[1] == b - a


def test_jobs_parked_by_a_request_run_again_only_if_its_trace_never_comes(qtbot):
    work = ProgressiveWork()
    owner, other = Owner(), Owner()
    owner.trace = other.trace = "T"
    gate = threading.Event()
    applied = []
    work.submit(Job(owner, "lens", "T", lambda check: (gate.wait(10), check(), "lens")[-1], applied.append))
    work.submit(Job(owner, "stats", "T", lambda check: "stats", applied.append, priority=1))
    work.submit(Job(other, "grid", "T", lambda check: "old grid", applied.append, priority=2))
    work.park_all()  # a new trace is requested: everything stops
    gate.set()
    qtbot.waitUntil(lambda: not work.busy, timeout=10_000)
    assert applied == [] and not work.pending()
    work.submit(Job(other, "grid", "T", lambda check: "newer grid", applied.append))  # asked again meanwhile
    qtbot.waitUntil(lambda: not work.busy, timeout=10_000)
    work.resume_parked()  # the pass failed: "T" stays on screen, its views complete (the newer grid is kept)
    qtbot.waitUntil(lambda: not work.busy, timeout=10_000)
    assert applied == ["newer grid", "lens", "stats"]

    work.submit(Job(owner, "lens", "T", lambda check: (gate.clear(), gate.wait(10), check())[-1], applied.append))
    work.park_all()
    owner.trace = "U"  # the requested trace came instead
    work.discard_parked()
    gate.set()
    work.resume_parked()
    qtbot.waitUntil(lambda: not work.busy, timeout=10_000)
    assert applied == ["newer grid", "lens", "stats"] and not work.pending()


def test_a_failed_edit_leaves_the_shown_lens_completing(qtbot, window, progressive_lens, monkeypatch):
    """A request stops the lens of the trace on screen; its pass fails, the trace stays: the lens still
    fills (it once stayed at "computing…" for ever)."""
    from explorer.core.errors import PromptError

    residual = next(d for d in window.docks if isinstance(d.panel, ResidualPanel))
    residual.raise_()
    qtbot.waitUntil(lambda: residual.panel.on_screen, timeout=5_000)
    panel = residual.panel
    window.progressive.hold(True, "test")  # the lens's blocks wait in the lane
    with qtbot.waitSignal(window.trace_applied, timeout=30_000):
        window.set_prompt(PROMPT)
    shown = window.trace
    assert panel.computing() and not panel.lens.filled.any()

    def fail(*args, **kwargs):
        raise PromptError("this prompt cannot be traced")

    monkeypatch.setattr(type(window.loaded), "trace_ids", fail)
    with qtbot.waitSignal(window.session.failed, timeout=30_000):
        window.session.controller.request("another prompt")
    window.progressive.hold(False, "test")
    qtbot.waitUntil(lambda: not panel.computing() and not window.progressive.busy, timeout=30_000)
    assert window.trace is shown and panel.trace is shown
    assert panel.lens.filled[slice(*panel._lens_shown)].all() and panel._lens_shown[1] > 0


def test_a_job_asked_for_during_a_switch_starts_after_the_repaint(qtbot):
    """Its worker thread would otherwise share the interpreter lock with the switch's handlers and painting."""
    from PySide6.QtWidgets import QWidget

    log = []

    class Painted(QWidget):
        def paintEvent(self, event):  # noqa: N802 (Qt override)
            log.append("paint")

    widget = Painted()
    qtbot.addWidget(widget)
    widget.show()
    qtbot.waitExposed(widget)
    qtbot.waitUntil(lambda: "paint" in log, timeout=5_000)
    work, owner = ProgressiveWork(), Owner()
    owner.trace = "T"
    log.clear()
    widget.update()  # a switch: the window is to be repainted, and a view asked for
    work.submit(Job(owner, "view", "T", lambda check: log.append("started") or 1, lambda v: log.append("applied")))
    assert work.busy and not work._running  # queued, not started inside the switch
    qtbot.waitUntil(lambda: "applied" in log, timeout=10_000)
    assert log.index("paint") < log.index("started")
