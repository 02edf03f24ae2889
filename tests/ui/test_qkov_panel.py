"""Why a head attends and what it moves, in the window: a real right-click on a cell of the Attention panel's
selected head asks the QK/OV panel, whose numbers are ``qk_split``'s and ``ov_split``'s (the terms add up to the
score the trace recorded, the sources' shares to 1, their direct effects to the head's DLA term); the tour's
"Why this score?" asks the same for its score; a run the split cannot take apart shows one line."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QPointF, Qt
from PySide6.QtWidgets import QScrollArea, QTabBar

from explorer.core.analysis.ov import ov_circuit, ov_split
from explorer.core.analysis.qk import qk_split
from explorer.core.analysis.stream_parts import SplitError
from explorer.core.display.tokens import quoted
from explorer.core.interventions.spec import Intervention
from explorer.ui.session.question import Question
from explorer.ui.window.docks import dock_of
from tests.ui.right_click import right_click_menu

PROMPT = " Good night, sweet prince. Good night, sweet"
LAYER, HEAD = 1, 2  # the bundled model's induction head


@pytest.fixture
def induction_window(qtbot, make_window):
    window = make_window()
    window.resize(1280, 800)
    with qtbot.waitSignal(window.trace_applied, timeout=60_000):
        window.open_checkpoint("induction")
    with qtbot.waitSignal(window.trace_applied, timeout=60_000):
        window.set_prompt(PROMPT)
    return window


def cell(tokens) -> tuple[int, int]:
    """(the second copy of a repeated token, the token after its first copy)."""
    query = len(tokens) - 1
    return query, tokens.index(tokens[query]) + 1


def show_head(qtbot, window, query: int):
    attention = window.panel("attention")
    dock_of(attention).raise_()
    window.session.selection.set_layer_head(LAYER, HEAD)
    window.session.selection.set_token(query)
    qtbot.waitUntil(lambda: window.presenter.is_idle() and not attention.redraw_pending, timeout=30_000)
    return attention


def ask_by_right_click(qtbot, window, attention, query: int, key: int, choose: str):
    panel = window.panel("qkov")

    def scene():
        return attention.detail.plot.vb.mapViewToScene(QPointF(key + 0.5, query + 0.5))

    texts = right_click_menu(qtbot, attention.detail, scene, choose=choose)
    qtbot.waitUntil(lambda: window.presenter.is_idle() and (panel.answer is not None or panel.message
                                                            and "computing" not in panel.message), timeout=30_000)
    return panel, texts


def data(panel, name: str):
    return next(e for e in panel.exportables() if e.name == name).data()


def test_why_does_it_attend_here_shows_the_exact_split(qtbot, induction_window):
    window = induction_window
    trace = window.trace
    query, key = cell(trace.tokens)
    attention = show_head(qtbot, window, query)
    assert not dock_of(window.panel("qkov")).isVisible()  # no tab before a question: the bar keeps its room
    panel, texts = ask_by_right_click(qtbot, window, attention, query, key, "Why does it attend here?")
    assert texts[:2] == ["Why does it attend here?", "What does it move?"]
    assert "Export PNG\u2026" in texts  # the plot's own entries stay
    assert dock_of(panel).isVisible() and panel.stack.currentWidget() is panel.qk and panel.qk.isVisible()
    selection = window.session.selection
    assert (selection.layer, selection.head, selection.token) == (LAYER, HEAD, query)

    split = qk_split(trace, LAYER, HEAD, query, key)
    shown = panel.qk.heatmap.matrix
    np.testing.assert_allclose(shown, split.table, rtol=1e-6, atol=1e-6)
    recorded = float(trace[f"blocks.{LAYER}.attn.scores"][HEAD, query, key])
    assert float(np.asarray(shown, np.float64).sum()) == pytest.approx(recorded, rel=1e-4)
    assert f"the score {recorded:+.4f}" in panel.headline.text()
    table, rows, cols = data(panel, "QK: the score's terms")
    assert rows == list(split.query_names) and cols == list(split.key_names)
    assert float(table.sum()) == pytest.approx(recorded, rel=1e-4)
    # the ranked list: the largest term first, in words, with its share; the textbook induction circuit
    top = split.terms(1)[0]
    assert panel.qk.terms.item(0, 2).text() == top.label and panel.qk.terms.item(0, 0).text() == f"{top.share:+.0%}"
    assert top.key_part.key == "L0.H1"  # the previous-token head's output at the key
    values, labels, _ = data(panel, "QK: the largest terms")
    assert labels[0] == top.label and values[0, 0] == pytest.approx(top.value)
    a, b = split.query_parts.index(top.query_part), split.key_parts.index(top.key_part)
    assert f"{top.value:+.6f}" in panel.qk.heatmap.cell_text(a, b)  # the exact value in the tooltip
    assert "Rotary" in panel.qk.notes.text()

    # the query row's bars ask the same questions, for the row's query and the bar's key
    show_head(qtbot, window, query)
    bar = dock_of(attention).findChild(QScrollArea).verticalScrollBar()
    bar.setValue(bar.maximum())  # the panel scrolled down to the row, as a user does
    row = attention.row_plot.getPlotItem().vb
    texts = right_click_menu(qtbot, attention.row_plot, lambda: row.mapViewToScene(QPointF(key + 0.5, 0.05)),
                             choose="What does it move?")
    assert texts[:2] == ["Why does it attend here?", "What does it move?"]
    qtbot.waitUntil(lambda: window.presenter.is_idle() and panel.answer is not None and panel.question.kind == "ov",
                    timeout=30_000)
    assert (panel.question.layer, panel.question.head, panel.question.query, panel.question.key) == \
        (LAYER, HEAD, query, key)


def test_the_new_tab_scrolls_the_bar_instead_of_cutting_titles(qtbot, induction_window):
    window = induction_window
    window.resize(1024, 768)  # a small laptop: the QK/OV tab does not fit beside the others
    query, key = cell(window.trace.tokens)
    panel = window.panel("qkov")
    window.session.ask(Question("qk", LAYER, HEAD, query, key))
    qtbot.waitUntil(lambda: window.presenter.is_idle() and panel.answer is not None and dock_of(panel).isVisible(),
                    timeout=30_000)
    bar = next(b for b in window.findChildren(QTabBar) if b.isVisible()
               and any(b.tabText(i) == "QK/OV" for i in range(b.count())))
    qtbot.waitUntil(lambda: all(bar.tabRect(i).width() >= bar.tabSizeHint(i).width() for i in range(bar.count())))
    assert sum(bar.tabSizeHint(i).width() for i in range(bar.count())) > bar.width()  # (it really overflows)


def test_what_does_it_move_shares_add_up_and_the_copy_choice(qtbot, induction_window):
    window = induction_window
    trace = window.trace
    query, key = cell(trace.tokens)
    attention = show_head(qtbot, window, query)
    panel, _ = ask_by_right_click(qtbot, window, attention, query, key, "What does it move?")
    assert panel.stack.currentWidget() is panel.ov and panel.kind_buttons["ov"].isChecked()
    split = ov_split(trace, LAYER, HEAD, query, target=int(np.argmax(trace["logits"][query])))
    values, labels, _ = data(panel, "OV: share of the output by source")
    assert len(labels) == len(split.sources) == query + 1
    np.testing.assert_allclose(values[:, 1], split.shares, atol=1e-9)
    assert float(values[:, 1].sum()) == pytest.approx(1.0, abs=1e-6)
    assert float(values[:, 2].sum()) == pytest.approx(split.dla_total, rel=1e-5, abs=1e-6)
    np.testing.assert_allclose(panel.ov.share.bars.opts["height"], split.shares, atol=1e-9)  # the bars drawn
    where = panel.ov.share.widget.getPlotItem().vb.mapViewToScene(QPointF(key + 0.5, 0.01))
    assert f"share of the head's output: {split.shares[key]:+.4%}" in panel.ov.share.text_at(where)  # its tooltip
    assert labels[int(np.argmax(values[:, 1]))] == f"#{key} {quoted(trace.tokens[key])}"

    panel.ov.copy.setCurrentIndex(panel.ov.copy.findData("value"))
    qtbot.waitUntil(lambda: window.presenter.is_idle() and panel.answer is not None and panel.answer.copy == "value",
                    timeout=30_000)
    circuit = ov_circuit(trace, LAYER, HEAD, query, top=5, copy="value", limit=48)
    got, rows, _ = data(panel, "OV circuit on the prompt")
    np.testing.assert_allclose(got[:, 0], circuit.top_values.ravel(), rtol=1e-9)
    heaviest = panel.ov.circuit.item(0, 2).text()
    assert panel.ov.circuit.item(0, 0).text().startswith(f"#{key} ") and heaviest.startswith(rows[0].split("-> ")[1])
    # the same cell the other way round, from the panel's own button
    qtbot.mouseClick(panel.kind_buttons["qk"], Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: window.presenter.is_idle() and panel.answer is not None and panel.question.kind == "qk",
                    timeout=30_000)
    assert (panel.question.query, panel.question.key) == (query, key)


def test_the_tour_score_step_asks_why(qtbot, induction_window):
    window = induction_window
    query, _ = cell(window.trace.tokens)
    window.session.selection.set_layer_head(LAYER, HEAD)
    window.session.selection.set_token(query)
    diagram = window.panel("diagram")
    dock_of(diagram).raise_()
    qtbot.waitUntil(lambda: window.presenter.is_idle() and diagram.trace is window.trace, timeout=30_000)
    diagram.open_tour()
    tour = diagram.tour
    qtbot.waitUntil(lambda: not tour.waiting, timeout=30_000)
    assert not tour.why.isVisible()
    while tour.step.name != "score":
        qtbot.mouseClick(tour.next, Qt.MouseButton.LeftButton)
    assert tour.why.isVisible()
    step = tour.step
    j = int(step.values["j"])
    with qtbot.waitSignal(window.session.asked) as asked:
        qtbot.mouseClick(tour.why, Qt.MouseButton.LeftButton)
    assert asked.args == [Question("qk", step.layer, step.head, step.token, j)]
    panel = window.panel("qkov")
    qtbot.waitUntil(lambda: window.presenter.is_idle() and panel.answer is not None, timeout=30_000)
    recorded = float(window.trace[f"blocks.{step.layer}.attn.scores"][step.head, step.token, j])
    assert float(np.asarray(panel.qk.heatmap.matrix, np.float64).sum()) == pytest.approx(recorded, rel=1e-4)
    assert step.values["why_value"] == pytest.approx(float(panel.answer.split.terms(1)[0].value))  # the tour's own
    tour.close()


def test_a_run_the_split_cannot_take_apart_shows_one_line(qtbot, induction_window):
    window = induction_window
    query, key = cell(window.trace.tokens)
    with qtbot.waitSignal(window.trace_applied, timeout=30_000):  # the stream entering block 1 at the key, zeroed
        window.session.set_interventions([Intervention("resid", LAYER, None, "zero", (key,))])
    trace = window.trace
    with pytest.raises(SplitError) as refused:
        qk_split(trace, LAYER, HEAD, query, key)
    attention = show_head(qtbot, window, query)
    panel, _ = ask_by_right_click(qtbot, window, attention, query, key, "Why does it attend here?")
    assert panel.answer is None and str(refused.value) in panel.message and "\n" not in panel.message
    assert panel.headline.text() == panel.message and not panel.qk.heatmap.isVisible()
    # a masked cell has no score: the right-click offers only what the head moves there
    show_head(qtbot, window, query)
    texts = right_click_menu(qtbot, attention.detail,
                             lambda: attention.detail.plot.vb.mapViewToScene(QPointF(query - 0.5, 1.5)))
    assert texts[0] == "What does it move?"


def test_computing_is_said_until_the_answer_comes(qtbot, induction_window):
    window = induction_window
    query, key = cell(window.trace.tokens)
    panel = window.panel("qkov")
    window.session.ask(Question("ov", LAYER, HEAD, query))  # (the new trace's question is answered as it is drawn)
    qtbot.waitUntil(lambda: window.presenter.is_idle() and panel.answer is not None, timeout=30_000)
    lane = window.session.progressive
    lane.hold(True, "test")  # the panel's lane waits: the next answer cannot come yet
    try:
        window.session.ask(Question("qk", LAYER, HEAD, query - 1, key))
        assert panel.message.startswith("computing why head 1.2 attends from #8") and panel.answer is None
        assert not window.presenter.is_idle()
    finally:
        lane.hold(False, "test")
    qtbot.waitUntil(lambda: window.presenter.is_idle() and panel.answer is not None, timeout=30_000)
    assert panel.answer.question == Question("qk", LAYER, HEAD, query - 1, key)
    assert not panel.message and panel.stack.currentWidget() is panel.qk
    # a new prompt: the same question asked of the new trace
    with qtbot.waitSignal(window.trace_applied, timeout=30_000):
        window.set_prompt(" Good night, sweet prince. Good night, sweet prince")
    qtbot.waitUntil(lambda: window.presenter.is_idle() and panel.answer is not None
                    and panel.answer.split.table is not None and panel.trace is window.trace, timeout=30_000)
    np.testing.assert_allclose(panel.qk.heatmap.matrix, qk_split(window.trace, LAYER, HEAD, query - 1, key).table,
                               rtol=1e-6, atol=1e-6)
