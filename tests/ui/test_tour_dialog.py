"""The tour window: its steps are computed on the panel's lane (not the GUI thread), Next/Back walk them, each
step shows the Trace's numbers, and its button selects the step's layer, head and token and asks for its panel."""

from __future__ import annotations

from PySide6.QtCore import Qt

from explorer.core.diagram.tour import tour_steps
from explorer.ui.panels.diagram import DiagramPanel
from explorer.ui.session.session import Session


def test_next_back_and_the_panel_button(qtbot, worked_loaded):
    trace = worked_loaded.trace("Today is sunday")
    session = Session()
    panel = DiagramPanel(session.selection)
    panel.attach(session)
    qtbot.addWidget(panel)
    panel.set_tokenizer(worked_loaded.tokenizer)
    panel.set_trace(trace)
    session.selection.set_token(0)
    qtbot.mouseClick(panel.tour_button, Qt.MouseButton.LeftButton)
    tour = panel.tour
    qtbot.waitUntil(lambda: not tour.waiting)
    assert tour.isVisible() and tour.index == 0 and not tour.back.isEnabled()
    assert "Text to ids" in tour.heading.text() and "#0 'Today' → id 0" in tour.numbers.text()
    for _ in range(4):
        qtbot.mouseClick(tour.next, Qt.MouseButton.LeftButton)
    assert tour.step.name == "score" and tour.back.isEnabled()
    score = float(trace["blocks.0.attn.scores"][0, 0, 1])
    assert f"(the Trace: {score:+.5f})" in tour.numbers.text()
    assert tour.open_panel.text() == "Show in Attention"
    session.selection.set_token(2)
    with qtbot.waitSignal(session.panel_requested) as asked:
        qtbot.mouseClick(tour.open_panel, Qt.MouseButton.LeftButton)
    assert asked.args == ["attention"] and session.selection.token == 0 and session.selection.layer == 0
    qtbot.mouseClick(tour.back, Qt.MouseButton.LeftButton)
    assert tour.step.name == "query"
    while tour.next.isEnabled():
        qtbot.mouseClick(tour.next, Qt.MouseButton.LeftButton)
    assert tour.step.name == "sampling" and tour.counter.text() == "step 11 of 11"
    tour.close()
    session.shutdown()


def test_the_tour_on_the_bundled_shakespeare_model(qtbot):
    from explorer.core.checkpoint import load_checkpoint

    loaded = load_checkpoint("shakespeare", device="cpu")
    trace = loaded.trace("To be, or not to be")
    session = Session()
    panel = DiagramPanel(session.selection)
    panel.attach(session)
    qtbot.addWidget(panel)
    panel.set_tokenizer(loaded.tokenizer)
    panel.set_trace(trace)
    session.selection.set_layer(1)
    panel.open_tour()
    tour = panel.tour
    qtbot.waitUntil(lambda: not tour.waiting)
    tour.go(2)
    assert tour.step.name == "position" and "position" in tour.numbers.text()
    tour.go(8)
    assert tour.step.name == "ffn" and tour.step.layer == 1 and "neuron" in tour.numbers.text()
    tour.close()
    session.shutdown()


def test_the_steps_are_computed_on_the_lane_and_are_the_cores_exactly(qtbot, worked_loaded):
    trace = worked_loaded.trace("Today is sunday")
    session = Session()
    panel = DiagramPanel(session.selection)
    panel.attach(session)
    qtbot.addWidget(panel)
    panel.set_tokenizer(worked_loaded.tokenizer)
    panel.set_trace(trace)
    session.selection.set_token(1)
    session.progressive.hold(True, "forward")  # as while a pass runs: the tour waits for the lane
    panel.open_tour()
    tour = panel.tour
    assert tour.isVisible() and tour.waiting and "computing" in tour.text.text()
    assert "#1 'is'" in tour.heading.text().replace("&#x27;", "'")
    assert not tour.next.isEnabled() and not tour.open_panel.isEnabled() and panel.computing()
    session.progressive.hold(False, "forward")
    qtbot.waitUntil(lambda: not tour.waiting)
    assert (panel, ("tour",)) in session.progressive.computed
    expected = tour_steps(trace, 1, 0, 0, worked_loaded.tokenizer)
    assert [(s.name, s.lines, s.values) for s in tour.steps] == [(s.name, s.lines, s.values) for s in expected]
    assert tour.open_panel.isEnabled() and tour.next.isEnabled()
    tour.close()
    session.shutdown()


def test_a_new_trace_while_the_tour_waits_computes_it_for_the_new_trace(qtbot, worked_loaded):
    session = Session()
    panel = DiagramPanel(session.selection)
    panel.attach(session)
    qtbot.addWidget(panel)
    panel.set_tokenizer(worked_loaded.tokenizer)
    panel.set_trace(worked_loaded.trace("Today is sunday"))
    session.progressive.hold(True, "forward")
    panel.open_tour()
    newer = worked_loaded.trace("Today is saturday")
    panel.set_trace(newer)
    assert panel.tour.waiting
    session.progressive.hold(False, "forward")
    qtbot.waitUntil(lambda: not panel.tour.waiting)
    assert panel.tour.token_text == newer.tokens[-1]
    expected = tour_steps(newer, newer.n_tokens - 1, 0, 0, worked_loaded.tokenizer)
    assert [s.values for s in panel.tour.steps] == [s.values for s in expected]
    panel.tour.close()
    session.shutdown()
