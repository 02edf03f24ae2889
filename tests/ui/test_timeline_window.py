"""The generation timeline in the window: every panel at step t, cut from one trace of the whole sequence;
the journey panel for the token produced at step t; [ and ] step."""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import Qt

from explorer.core.trace import CaptureSpec
from explorer.ui.panels.journey import JourneyPanel, NO_TIMELINE

STEPS = 5


def _generate(qtbot, window):
    pane = window.generation
    pane.greedy.setChecked(True)
    pane.max_new.setValue(STEPS)
    timeline = window.session.timeline
    with qtbot.waitSignal(timeline.changed, timeout=60_000, check_params_cb=lambda s: s is not None):
        with qtbot.waitSignal(pane.generation_finished, timeout=60_000):
            assert pane.generate()
    qtbot.waitUntil(lambda: window.trace is not None and window.trace.n_tokens == len(timeline.ids), timeout=30_000)
    return pane, timeline


def _journey_panel(window) -> JourneyPanel:
    return next(p for p in window.panels if isinstance(p, JourneyPanel))


def test_the_timeline_at_step_t_is_a_fresh_trace_of_prompt_plus_t_tokens(qtbot, window):
    from explorer.ui.window.docks import dock_of

    journey_panel = _journey_panel(window)
    assert NO_TIMELINE in journey_panel.info.text()
    assert not window.timeline_bar.slider.isEnabled()  # no timeline yet
    pane, timeline = _generate(qtbot, window)
    dock = dock_of(journey_panel)  # a tab beside the generation pane
    assert window.generation_dock in window.tabifiedDockWidgets(dock)  # (the conversation's Roles there too)
    dock.raise_()
    qtbot.waitUntil(lambda: journey_panel.on_screen and journey_panel.view is not None
                    and journey_panel.view.trace is window.trace, timeout=30_000)
    prompt = list(pane.prompt_ids)
    generated = [s.token_id for s in pane.steps]
    assert timeline.n_prompt == len(prompt) and timeline.total == STEPS and timeline.step == STEPS
    assert window.timeline_bar.slider.isEnabled() and f"step {STEPS} of {STEPS}" in window.windowTitle()
    full = timeline.full.trace
    for t in (2, 0, 4):
        with qtbot.waitSignal(window.trace_applied, timeout=30_000,
                              check_params_cb=lambda tr, t=t: tr.n_tokens == len(prompt) + t):
            timeline.set_step(t)
        shown = window.trace
        assert list(shown.token_ids) == prompt + generated[:t]
        fresh = window.loaded.trace_ids(prompt + generated[:t], CaptureSpec.full())
        for key in ("blocks.1.resid_pre", "blocks.0.attn.pattern", "logits"):
            np.testing.assert_allclose(shown[key], fresh[key], rtol=1e-5, atol=1e-5, err_msg=key)
        assert timeline.full.trace is full  # one trace of the whole sequence, never traced again
        assert window.selection.token == len(prompt) + t - 1  # the position producing token t
        assert f"step {t} of {STEPS}" in window.windowTitle()
        assert window.timeline_bar.slider.value() == t and f"step {t} of {STEPS}" in window.timeline_bar.label.text()
        view = journey_panel.view
        assert view is not None and view.journey is not None and view.journey.step == t
        assert view.journey.token_id == generated[t]
        assert [s.control for s in view.stages][:2] == ["model", "greedy"]
        assert journey_panel.reads.matrix.shape == (window.loaded.config.n_layers * window.loaded.config.n_heads,
                                                    len(prompt) + t)


def _at(timeline, t):
    return lambda trace: trace.n_tokens == timeline.n_prompt + t


def test_brackets_step_and_a_clicked_token_shows_its_step(qtbot, window):
    pane, timeline = _generate(qtbot, window)
    with qtbot.waitSignal(window.trace_applied, timeout=30_000, check_params_cb=_at(timeline, 2)):
        timeline.set_step(2)
    window.activateWindow()
    window.panels[0].setFocus()
    with qtbot.waitSignal(window.trace_applied, timeout=30_000, check_params_cb=_at(timeline, 3)):
        qtbot.keyClick(window.panels[0], Qt.Key.Key_BracketRight)
    assert timeline.step == 3 and window.trace.n_tokens == timeline.n_prompt + 3
    with qtbot.waitSignal(window.trace_applied, timeout=30_000, check_params_cb=_at(timeline, 2)):
        qtbot.keyClick(window.panels[0], Qt.Key.Key_BracketLeft)
    assert timeline.step == 2
    seen: list = []
    window.trace_applied.connect(seen.append)
    with qtbot.waitSignal(window.trace_applied, timeout=30_000, check_params_cb=_at(timeline, 4)):
        timeline.set_step(1)  # a quick second switch: only the newest step is ever shown
        timeline.set_step(4)
    window.trace_applied.disconnect(seen.append)
    assert [t.n_tokens for t in seen] == [timeline.n_prompt + 4]
    with qtbot.waitSignal(window.trace_applied, timeout=30_000, check_params_cb=_at(timeline, 1)):
        pane.click_token(0)  # the prompt plus generated token 0: step 1, cut from the same trace
    assert timeline.active and timeline.step == 1 and window.trace.n_tokens == timeline.n_prompt + 1
    # typing another prompt ends the timeline
    with qtbot.waitSignal(timeline.changed, timeout=30_000, check_params_cb=lambda s: s is None):
        window.set_prompt("Hello world")
    assert not window.timeline_bar.slider.isEnabled()
