"""The generation timeline while the generation streams in: the range grows, step t is a fresh trace of
the prompt plus t tokens, the user's step stays, the end switches to one trace of the whole sequence,
Stop keeps what was produced; and over the memory budget, each step traced on its own.

The tiny model generates in a worker whose steps pass a gate the test opens token by token (a
semaphore, no sleeps), so "while generating" is a state the test holds, not a race."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from explorer.core.budget import global_budget
from explorer.core.trace import CaptureSpec

KEYS = ("blocks.1.resid_pre", "blocks.0.attn.pattern", "logits")


class Gate:
    """Lets the generation make one more step per ``open(1)``."""

    def __init__(self) -> None:
        self.tokens = threading.Semaphore(0)

    def open(self, n: int) -> None:
        for _ in range(n):
            self.tokens.release()


@pytest.fixture
def gate(monkeypatch):
    import explorer.core.generation.generate as generate
    import explorer.ui.generation.stream as stream

    real = generate.generate_steps
    g = Gate()

    def gated_steps(*args, **kwargs):
        steps = real(*args, **kwargs)
        while True:
            assert g.tokens.acquire(timeout=60), "the test never let the next step through"
            try:
                step = next(steps)
            except StopIteration as done:
                return done.value
            yield step

    monkeypatch.setattr(generate, "generate_steps", gated_steps)
    monkeypatch.setattr(stream, "FRAME_MS", 0)  # every step reaches the GUI thread on its own
    yield g
    g.open(100)  # a generation still waiting ends


def _same_as_fresh(window, ids):
    shown = window.trace
    assert list(shown.token_ids) == list(ids)
    fresh = window.loaded.trace_ids(list(ids), CaptureSpec.full())
    for key in KEYS:
        np.testing.assert_allclose(shown[key], fresh[key], rtol=1e-5, atol=1e-5, err_msg=key)


def _start(qtbot, window, gate, first: int, max_new: int = 8):
    pane, timeline, bar = window.generation, window.session.timeline, window.timeline_bar
    pane.greedy.setChecked(True)
    pane.max_new.setValue(max_new)
    pane.stop_at_eos = False
    maxima: list[int] = []
    timeline.changed.connect(lambda step: maxima.append(bar.slider.maximum()) if step is not None else None)
    shown, applied = [], []
    window.presenter.shown.connect(lambda frame: shown.append(frame.trace))
    window.trace_applied.connect(applied.append)
    gate.open(first)
    assert pane.generate()
    n_prompt = len(pane.prompt_ids)
    qtbot.waitUntil(lambda: timeline.total == first and window.trace is not None
                    and window.trace.n_tokens == n_prompt + first and timeline.waiting is None, timeout=30_000)
    assert pane.running
    # following: a step's every panel is drawn before the newest step is traced (none left half drawn)
    qtbot.waitUntil(lambda: window.trace in applied, timeout=30_000)
    assert shown and all(trace in applied for trace in shown)
    return pane, timeline, bar, maxima


def test_step_t_while_generating_is_a_fresh_trace_and_stays_as_tokens_arrive(qtbot, window, gate):
    pane, timeline, bar, maxima = _start(qtbot, window, gate, first=3)
    n_prompt = timeline.n_prompt
    # the bar appeared as the tokens came, its range growing with each one, following the newest
    assert set(maxima) == {1, 2, 3} and maxima == sorted(maxima)
    assert bar.slider.isEnabled() and bar.slider.value() == 3 and "following" in bar.label.text()
    assert timeline.full is None and timeline.streaming
    _same_as_fresh(window, timeline.ids[: n_prompt + 3])

    # the user chooses step 1: "computing" until its trace is on screen, then "paused at 1"
    with qtbot.waitSignal(window.trace_applied, timeout=30_000, check_params_cb=lambda tr: tr.n_tokens == n_prompt + 1):
        bar.slider.setValue(1)
        assert "computing step 1" in bar.label.text()
    qtbot.waitUntil(lambda: timeline.waiting is None, timeout=30_000)
    assert "paused at 1" in bar.label.text() and window.selection.token == n_prompt
    _same_as_fresh(window, timeline.ids[: n_prompt + 1])
    step1 = window.trace

    # more tokens: the range grows, the user's step stays
    gate.open(2)
    qtbot.waitUntil(lambda: bar.slider.maximum() == 5, timeout=30_000)
    assert timeline.step == 1 and bar.slider.value() == 1 and window.trace is step1
    assert "paused at 1" in bar.label.text() and "step 1 of 5" in bar.label.text()

    # the end: one trace of the whole sequence, the step unchanged, its cut equal to the step's own trace
    with qtbot.waitSignal(pane.generation_finished, timeout=60_000):
        gate.open(100)
    qtbot.waitUntil(lambda: timeline.full is not None and window.trace is not step1
                    and window.trace.n_tokens == n_prompt + 1, timeout=30_000)
    assert not timeline.streaming and timeline.step == 1 and bar.slider.value() == 1
    assert timeline.full.trace.n_tokens == n_prompt + 8 and bar.slider.maximum() == 8
    assert list(window.trace.token_ids) == list(step1.token_ids)
    for key in KEYS:
        np.testing.assert_allclose(window.trace[key], step1[key], rtol=1e-5, atol=1e-5, err_msg=key)
    assert not timeline.reserving  # the whole trace holds its own bytes now


def test_following_reaches_the_newest_step_and_stop_keeps_what_was_produced(qtbot, window, gate):
    pane, timeline, bar, _ = _start(qtbot, window, gate, first=2)
    n_prompt = timeline.n_prompt
    journey = window.panel("journey")
    gate.open(1)
    qtbot.waitUntil(lambda: window.trace.n_tokens == n_prompt + 3 and timeline.waiting is None, timeout=30_000)
    assert bar.slider.value() == 3 and "following" in bar.label.text()
    # step back while it streams: the journey of the token produced there, from the step's own trace
    with qtbot.waitSignal(window.trace_applied, timeout=30_000, check_params_cb=lambda tr: tr.n_tokens == n_prompt + 2):
        timeline.step_by(-1)
    from explorer.ui.window.docks import dock_of

    dock_of(journey).raise_()
    qtbot.waitUntil(lambda: journey.view is not None and journey.view.trace is window.trace, timeout=30_000)
    assert journey.view.journey is not None and journey.view.journey.token_id == timeline.ids[n_prompt + 2]
    assert journey.view.journey.step == 2
    # Stop: the timeline keeps the tokens produced, traced once as a whole, at the user's step
    with qtbot.waitSignal(pane.generation_finished, timeout=60_000):
        pane.stop()
        gate.open(100)
    assert pane.result is not None and pane.result.n_new == 3
    qtbot.waitUntil(lambda: timeline.full is not None and window.trace.n_tokens == n_prompt + 2, timeout=30_000)
    assert timeline.total == 3 and timeline.step == 2 and bar.slider.maximum() == 3
    assert timeline.full.trace.n_tokens == n_prompt + 3
    # another prompt ends it, and a run it ended does not come back
    with qtbot.waitSignal(timeline.changed, timeout=30_000, check_params_cb=lambda s: s is None):
        window.set_prompt("Hello world")
    assert not bar.slider.isEnabled() and not timeline.reserving


def test_over_the_memory_budget_each_step_is_traced_on_its_own(qtbot, window):
    budget = global_budget()
    limit, explicit = budget.limit, budget.explicit
    budget.set_limit(1)  # nothing more fits: the whole sequence's trace is never made
    try:
        pane, timeline = window.generation, window.session.timeline
        pane.greedy.setChecked(True)
        pane.max_new.setValue(4)
        pane.stop_at_eos = False
        with qtbot.waitSignal(pane.generation_finished, timeout=60_000):
            assert pane.generate()
        n_prompt = len(pane.prompt_ids)
        qtbot.waitUntil(lambda: timeline.budget_reason is not None and timeline.waiting is None
                        and window.trace.n_tokens == n_prompt + 4, timeout=30_000)
        assert timeline.full is None and timeline.active and not timeline.streaming
        assert "memory budget" in window.timeline_bar.label.text()
        assert "does not fit the memory budget" in window.timeline_bar.label.toolTip()
        for t in (1, 3):
            with qtbot.waitSignal(window.trace_applied, timeout=30_000,
                                  check_params_cb=lambda tr, t=t: tr.n_tokens == n_prompt + t):
                timeline.set_step(t)
                assert f"computing step {t}" in window.timeline_bar.label.text()
            _same_as_fresh(window, timeline.ids[: n_prompt + t])
            assert timeline.full is None
    finally:
        budget.set_limit(limit, explicit)
