"""Issue 42, items 6 and 7, on a 30-layer model in the window at its 1280x800 size.

Item 6: the generation pane's step box said 28 while the timeline said "step 40 of 40": the box only moved the
candidate chart. Now the box and the timeline say the same step whichever one the user moves, the last step T
included (the box says T: none is being produced).

Item 7: the Journey chart was unreadable at the default dock width: the probability flat at 0 beside the rank
scale (one plot, two axes), the boundaries' labels smeared over each other, and the head map's rows labelled
"L0H0, L1H1, …" (every (H+1)-th row), which reads as a diagonal.
"""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest

from explorer.core.analysis.timeline import journey
from explorer.ui.widgets.axis import ThinAxis

STEPS = 4


def generated(qtbot, window):
    pane, timeline = window.generation, window.session.timeline
    pane.greedy.setChecked(True)
    pane.max_new.setValue(STEPS)
    with qtbot.waitSignal(pane.generation_finished, timeout=120_000):
        assert pane.generate()
    qtbot.waitUntil(lambda: timeline.full is not None and window.presenter.is_idle(), timeout=120_000)
    return pane, timeline


def box_says(pane, t: int):
    return lambda: pane.step_spin.value() == t


def test_the_step_box_and_the_timeline_say_the_same_step(qtbot, laptop_window):
    window = laptop_window
    with qtbot.waitSignal(window.presenter.drawn, timeout=60_000):
        window.set_prompt("The capital of France is")
    pane, timeline = generated(qtbot, window)
    bar = window.timeline_bar
    assert timeline.step == STEPS and f"step {STEPS} of {STEPS}" in bar.label.text()
    qtbot.waitUntil(box_says(pane, STEPS), timeout=5_000)  # the end: the box says T too
    assert "none is being produced" in pane.info.text()

    # the user types a step into the box: the timeline (and every panel) goes there
    pane.step_spin.setFocus()
    pane.step_spin.lineEdit().selectAll()
    QTest.keyClicks(pane.step_spin, "1")
    QTest.keyClick(pane.step_spin, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: timeline.step == 1 and window.presenter.is_idle(), timeout=60_000)
    assert pane.step_spin.value() == 1 and "step 1 of" in bar.label.text()
    assert window.trace.n_tokens == timeline.n_prompt + 1

    # the timeline moves (the ] key, the slider): the box follows, to the end and back
    bar.setFocus()
    for key, t in ((Qt.Key.Key_BracketRight, 2), (Qt.Key.Key_BracketRight, 3), (Qt.Key.Key_BracketRight, 4),
                   (Qt.Key.Key_BracketLeft, 3)):
        QTest.keyClick(bar, key)
        qtbot.waitUntil(lambda t=t: timeline.step == t and window.presenter.is_idle(), timeout=60_000)
        qtbot.waitUntil(box_says(pane, t), timeout=5_000)
        assert f"step {t} of {STEPS}" in bar.label.text()
    bar.slider.setValue(STEPS)
    qtbot.waitUntil(lambda: timeline.step == STEPS and window.presenter.is_idle(), timeout=60_000)
    qtbot.waitUntil(box_says(pane, STEPS), timeout=5_000)


def test_the_journey_is_readable_at_the_default_dock_width(qtbot, laptop_window):
    window = laptop_window
    with qtbot.waitSignal(window.presenter.drawn, timeout=60_000):
        window.set_prompt("The capital of France is")
    pane, timeline = generated(qtbot, window)
    timeline.set_step(1)
    qtbot.waitUntil(lambda: timeline.step == 1 and window.presenter.is_idle(), timeout=60_000)
    window.dock("journey").raise_()
    panel = window.panel("journey")
    qtbot.waitUntil(lambda: panel.on_screen and panel.view is not None and panel.view.journey is not None
                    and window.presenter.is_idle(), timeout=60_000)
    assert panel.width() < 560  # the dock beside the main panels, as it opens
    j = panel.view.journey
    want = journey(timeline.full.trace, timeline.n_prompt, 1, vocab_size=window.loaded.tokenizer.vocab_size)
    chart = panel.lens
    # the probability on a chart of its own (0 to 1), the rank on another (log scale, best at the top)
    assert chart.prob_plot is not chart.rank_plot
    np.testing.assert_allclose(chart.probs, want.probs, rtol=1e-6)
    np.testing.assert_array_equal(chart.ranks, want.ranks)
    low, high = chart.prob_plot.vb.viewRange()[1]
    assert low <= 0.0 and 1.0 <= high <= 1.1
    # the 31 boundaries' labels thinned to what the chart's width holds, never drawn over each other
    panel.grab()
    axis = chart.rank_plot.getAxis("bottom")
    assert isinstance(axis, ThinAxis) and axis.stride > 1
    drawn = len(j.labels[::axis.stride])
    assert drawn * 18 <= chart.rank_plot.vb.width()  # at least ~18 px for each label written
    # the head map's rows named by layer at the first head of a layer, never "L1H1" on row 1 * H + 1
    H = window.loaded.config.n_heads
    ticks = panel.reads.shown_ticks("left")
    assert ticks and all(text.startswith("L") and "H" not in text for _pos, text in ticks)
    assert all(pos == int(text[1:]) * H for pos, text in ticks)
