"""The generation pane: streaming, Stop, live re-scoring, clicks that set the window's trace, seeds,
greedy, "Continue from here" and the transcript export."""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest
from PySide6.QtCore import QPoint, Qt, QThread
from PySide6.QtWidgets import QApplication, QFileDialog

from explorer.core.generation.candidates import candidate_table
from explorer.core.generation.generate import generate
from explorer.core.generation.sampling import SamplingParams
from explorer.ui.generation import GenerationPane, prob_colour
from explorer.ui.generation import stream as gen_stream
from explorer.ui.session.selection import Selection

PROMPT = "The capital of France is"


@pytest.fixture
def pane(qtbot, tiny_loaded):
    pane = GenerationPane(Selection())
    qtbot.addWidget(pane)
    pane.resize(480, 860)
    pane.show()
    pane.set_model(tiny_loaded)
    pane.set_prompt(PROMPT)
    pane.max_new.setValue(8)
    pane.random_seed.setChecked(False)
    yield pane
    pane.stop()


def gate_forward(monkeypatch, loaded, wait):
    """Count the model's forward passes; before pass ``n`` (1-based) call ``wait(n)``."""
    model = loaded.model
    original = model.forward
    calls = []

    def forward(*args, **kwargs):
        calls.append(1)
        wait(len(calls))
        return original(*args, **kwargs)

    monkeypatch.setattr(model, "forward", forward)
    return calls


def wait_until(predicate, timeout=30.0):
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            raise AssertionError("timed out waiting in the worker")
        time.sleep(0.001)


def run(qtbot, pane, action=None):
    with qtbot.waitSignal(pane.generation_finished, timeout=60_000) as blocker:
        assert (action or pane.generate)()
    return blocker.args[0]


def test_tokens_stream_in_one_signal_per_step_while_the_worker_runs(qtbot, pane, tiny_loaded, monkeypatch):
    monkeypatch.setattr(gen_stream, "FRAME_MS", 0)  # every step handed on alone, as for a slow model
    pane.temperature.setValue(1.5)
    records = []
    main_thread = QApplication.instance().thread()

    def on_step(index):
        records.append((index, pane.text_view.n_tokens, len(pane.text_view.toPlainText()), pane.result,
                        QThread.currentThread() is main_thread))

    pane.step_added.connect(on_step)
    # forward pass n waits until the window has shown step n - 1: the steps arrive while the worker runs
    gate_forward(monkeypatch, tiny_loaded, lambda n: wait_until(lambda: len(records) >= n - 1))
    result = run(qtbot, pane)
    assert result.n_new == 8 and result.stop_reason == "max_new_tokens"
    assert [r[0] for r in records] == list(range(8))  # one signal per step, in order
    assert [r[1] for r in records] == list(range(1, 9))  # the view held one more token each time
    lengths = [r[2] for r in records]
    assert lengths == sorted(lengths) and lengths[-1] > len(PROMPT)
    assert all(r[3] is None for r in records)  # the result had not come back yet
    assert all(r[4] for r in records)  # handled on the GUI thread
    assert pane.text_view.toPlainText() == PROMPT + result.text
    assert [s.token_id for s in pane.steps] == result.token_ids
    assert "maximum number of new tokens" in pane.status.text()
    assert pane.selected == 7 and pane.table is not None  # the newest step's candidates are shown


def test_stop_cancels_within_a_step(qtbot, pane, tiny_loaded, monkeypatch):
    monkeypatch.setattr(gen_stream, "FRAME_MS", 0)
    pane.max_new.setValue(40)
    seen = []
    pane.step_added.connect(seen.append)
    # from the third forward on, the worker waits for Stop: it must come from the GUI
    gate_forward(monkeypatch, tiny_loaded,
                 lambda n: n < 3 or pane._cancel.wait(30))
    pane.step_added.connect(lambda i: qtbot.mouseClick(pane.stop_button, Qt.MouseButton.LeftButton)
                            if i == 1 else None)
    result = run(qtbot, pane)
    assert result.stop_reason == "cancelled"
    assert 2 <= result.n_new <= 3 < 40
    assert seen == list(range(result.n_new))
    assert "cancelled" in pane.status.text()
    assert pane.generate_button.isEnabled() and not pane.stop_button.isEnabled()


def test_shortcuts_generate_and_stop(qtbot, pane, tiny_loaded, monkeypatch):
    pane.max_new.setValue(40)
    gate_forward(monkeypatch, tiny_loaded, lambda n: n < 2 or pane._cancel.wait(30))
    pane.activateWindow()
    pane.prompt_edit.setFocus()
    pane.step_added.connect(lambda i: qtbot.keyClick(pane.prompt_edit, Qt.Key.Key_Escape) if i == 0 else None)
    with qtbot.waitSignal(pane.generation_finished, timeout=60_000) as blocker:
        qtbot.keyClick(pane.prompt_edit, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    assert blocker.args[0].stop_reason == "cancelled" and blocker.args[0].n_new < 40


def test_fast_steps_are_grouped_but_each_is_announced_once(qtbot, pane):
    """With the default frame a fast model's steps come in groups; each still gets its signal."""
    pane.temperature.setValue(1.5)
    pane.max_new.setValue(30)
    seen = []
    pane.step_added.connect(lambda i: seen.append((i, pane.text_view.n_tokens)))
    result = run(qtbot, pane)
    assert [i for i, _ in seen] == list(range(result.n_new)) and result.n_new == 30
    assert all(n > i for i, n in seen)  # a step is announced once it is in the view
    assert pane.text_view.toPlainText() == PROMPT + result.text


def test_stream_steps_groups_fast_steps_and_returns_the_result(tiny_loaded):
    from explorer.core.generation.generate import generate

    params = SamplingParams(temperature=1.5, max_new_tokens=12, seed=3)
    stream = gen_stream.stream_steps(tiny_loaded, tiny_loaded.tokenizer.encode(PROMPT), params,
                                     threading.Event(), frame_seconds=3600.0)
    groups = []
    while True:
        try:
            groups.append(next(stream))
        except StopIteration as done:
            result = done.value
            break
    assert len(groups[0]) == 1  # the first step at once
    assert [s.index for g in groups for s in g] == list(range(12))
    assert result.token_ids == [s.token_id for g in groups for s in g]
    assert result.token_ids == generate(tiny_loaded, PROMPT, params).token_ids
    single = gen_stream.stream_steps(tiny_loaded, tiny_loaded.tokenizer.encode(PROMPT), params,
                                     threading.Event(), frame_seconds=0.0)
    assert all(len(group) == 1 for group in single)


def test_a_control_change_rescores_the_shown_step_without_the_model(qtbot, pane, tiny_loaded, monkeypatch):
    pane.temperature.setValue(1.0)
    pane.max_new.setValue(5)
    run(qtbot, pane)
    pane.select_step(2)
    step = pane.steps[2]
    before = pane.chart.values.copy()
    table = pane.table

    def no_forward(*args, **kwargs):
        raise AssertionError("the model must not run to re-score a step")

    monkeypatch.setattr(tiny_loaded.model, "forward", no_forward)
    pane.temperature.setValue(0.3)  # sharper
    after = pane.chart.values.copy()
    assert not np.allclose(before[:, 1], after[:, 1])
    np.testing.assert_allclose(np.sort(before[:, 0]), np.sort(after[:, 0]))  # the model's own bars stay
    assert after[:, 1].max() > before[:, 1].max()
    # the bars are the re-scored distribution of the same logits
    _, dist = step.distributions(20, pane.current_params())
    top = pane.table.ids[np.argmax(pane.table.after)]
    assert top == dist.ids[0] and np.isclose(after[:, 1].max(), dist.probs[0])
    assert pane.table is not table and pane.selected == 2
    assert "T 0.3" in pane.info.toolTip() and "drawn at" in pane.info.text()

    pane.top_k.setValue(3)
    assert np.count_nonzero(pane.chart.values[:, 1]) == 3
    assert pane.table.num_possible == 3
    pane.greedy.setChecked(True)
    assert np.count_nonzero(pane.chart.values[:, 1]) == 1 and pane.chart.values[:, 1].max() == 1.0
    assert pane.chart.values.shape == (len(pane.chart.labels), 2)
    # the chart's right-click export sees the same numbers
    (exportable,) = pane.exportables()
    data, rows, cols = exportable.data()
    assert data.shape == (len(rows), 2) and cols == ["model's own", "after the controls"]
    assert any(label.startswith("▶") for label in rows)  # the chosen token is marked


def test_candidate_table_lists_the_chosen_token_and_matches_rescore(tiny_loaded):
    steps = generate(tiny_loaded, PROMPT, SamplingParams(temperature=1.5, max_new_tokens=3, seed=1)).steps
    params = SamplingParams(temperature=0.7, top_k=5)
    for step in steps:
        table = candidate_table(step, params)
        assert len(table.ids) == 20 and step.token_id in table.ids
        before, after = step.distributions(20, params)
        assert set(after.ids[:5].tolist()) <= set(table.ids.tolist())
        np.testing.assert_allclose(np.sort(table.after)[::-1][:5], after.probs[:5])
        assert np.all(np.diff(table.after) <= 0)
        assert table.num_possible == after.num_possible == 5
        rank, prob = step.scores.rank_and_prob(step.token_id, params)
        assert table.chosen_after[0] == rank and np.isclose(table.chosen_after[1], prob)
        np.testing.assert_allclose(table.before[table.ids == before.ids[0]], before.probs[0])
    assert prob_colour(1.0) != prob_colour(0.001)


def test_clicking_a_generated_token_makes_it_the_windows_trace(qtbot, window):
    pane = window.generation
    assert window.generation_dock.toggleViewAction() in window.menuBar().actions()[3].menu().actions()
    assert pane.prompt_edit.toPlainText() == window.prompt.text()  # follows the main prompt
    pane.temperature.setValue(1.5)
    pane.random_seed.setChecked(False)
    pane.max_new.setValue(8)
    result = run(qtbot, pane)
    # the finished generation is the window's timeline now: the main prompt shows the whole sequence
    prompt_ids = window.loaded.tokenizer.encode(pane.prompt_edit.toPlainText())
    assert pane.prompt_ids == prompt_ids
    k = next(i for i in range(2, result.n_new) if pane.text_view.token_rect(i) is not None)
    rect = pane.text_view.token_rect(k)
    with qtbot.waitSignal(window.trace_applied, timeout=30_000,
                          check_params_cb=lambda t: t.n_tokens == len(prompt_ids) + k + 1):
        qtbot.mouseClick(pane.text_view.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    expected = prompt_ids + result.token_ids[: k + 1]
    assert window.trace.n_tokens == len(prompt_ids) + k + 1
    assert list(window.trace.token_ids) == expected  # exactly the generated tokens, not a re-encoding
    assert window.prompt.text() == window.loaded.tokenizer.decode(expected)
    assert pane.selected == k and pane.text_view.selected == k
    assert f"<b>step {k}</b>:" in pane.info.text() and pane.step_spin.value() == k
    assert window.controller.model is window.loaded
    # the pane's own prompt did not follow the click
    assert pane.prompt_edit.toPlainText() == window.loaded.tokenizer.decode(prompt_ids)
    # the tooltip of a token tells its probability and rank
    tip = pane.tooltip_for(k)
    assert f"step {k}" in tip and "rank" in tip and "model's own" in tip

    # typing in the main prompt traces the typed text again
    with qtbot.waitSignal(window.trace_applied, timeout=30_000):
        window.set_prompt("Hello world")
    assert window.trace.n_tokens == len(window.loaded.tokenizer.encode("Hello world"))


def test_the_same_seed_gives_the_same_text(qtbot, pane):
    pane.temperature.setValue(1.5)
    pane.seed.setValue(123)
    first = run(qtbot, pane)
    text = pane.text_view.toPlainText()
    second = run(qtbot, pane)
    assert second.token_ids == first.token_ids and pane.text_view.toPlainText() == text
    pane.seed.setValue(124)
    assert run(qtbot, pane).token_ids != first.token_ids

    # a random seed is drawn, shown and recorded, so the text can be made again
    pane.random_seed.setChecked(True)
    drawn = run(qtbot, pane)
    seed = pane.params_used.seed
    assert seed is not None and pane.seed.value() == seed and f"seed {seed}" in pane.status.text()
    pane.random_seed.setChecked(False)
    assert run(qtbot, pane).token_ids == drawn.token_ids


def test_greedy_checkbox_is_temperature_zero(qtbot, pane, tiny_loaded):
    pane.temperature.setValue(0.8)
    pane.greedy.setChecked(True)
    assert pane.temperature.value() == 0.0 and pane.current_params().temperature == 0.0
    by_checkbox = run(qtbot, pane)
    pane.greedy.setChecked(False)
    assert pane.temperature.value() == pytest.approx(0.8)  # the previous temperature comes back
    pane.temperature.setValue(0.0)
    assert pane.greedy.isChecked()
    by_slider = run(qtbot, pane)
    assert by_slider.token_ids == by_checkbox.token_ids
    core = generate(tiny_loaded, tiny_loaded.tokenizer.encode(PROMPT),
                    SamplingParams(temperature=0.0, max_new_tokens=8))
    assert by_checkbox.token_ids == core.token_ids
    assert all(s.prob == 1.0 and s.rank == 0 for s in by_checkbox.steps)


def test_continue_from_here_regenerates_from_the_selected_step(qtbot, pane, tiny_loaded):
    pane.temperature.setValue(1.5)
    first = run(qtbot, pane)
    prompt_ids = list(pane.prompt_ids)
    pane.select_step(2)
    pane.max_new.setValue(4)
    second = run(qtbot, pane, pane.continue_from_here)
    assert pane.prompt_ids == prompt_ids + first.token_ids[:3]
    assert second.n_new == 4 and second.prompt_ids == tuple(pane.prompt_ids)
    assert pane.prompt_edit.toPlainText() == tiny_loaded.tokenizer.decode(pane.prompt_ids)
    assert pane.params_used.max_new_tokens == 4


def test_transcript_export_writes_the_steps(qtbot, pane, tmp_path, monkeypatch):
    assert not pane.export_button.isEnabled()
    pane.temperature.setValue(0.9)
    pane.top_k.setValue(50)
    pane.max_new.setValue(5)
    result = run(qtbot, pane)
    path = tmp_path / "transcript.json"
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(path), ""))
    qtbot.mouseClick(pane.export_button, Qt.MouseButton.LeftButton)
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["format"] == "transformer-explorer.transcript"
    assert data["prompt"] == PROMPT and data["text"] == result.text
    assert data["stop_reason"] == "max_new_tokens" and data["n_steps"] == 5
    assert [s["token_id"] for s in data["steps"]] == result.token_ids
    assert data["controls"]["temperature"] == 0.9 and data["controls"]["top_k"] == 50
    assert data["controls"]["seed"] == 0
    assert all(len(s["before"]) == 10 and s["before"][0]["text"] is not None for s in data["steps"])
    assert list(tmp_path.iterdir()) == [path]  # written atomically: no temporary file left


def test_a_prompt_longer_than_the_context_is_refused(qtbot, pane):
    pane.set_prompt(" word" * 100)  # the tiny model's context is 64 tokens
    assert not pane.generate()
    assert "context" in pane.status.text() and not pane.running


@pytest.mark.parametrize("extra", [0, -1])
def test_a_prompt_that_fills_the_context_says_so_in_one_line(qtbot, pane, extra):
    """Exactly n_ctx tokens: no room for a continuation, one clear line; n_ctx - 1: one token is made."""
    n_ctx = pane.loaded.config.n_ctx
    pane.set_prompt(" word" * (n_ctx + extra))
    if extra == 0:
        assert not pane.generate() and not pane.running
        text = pane.status.text()
        assert f"{n_ctx} tokens" in text and "context holds" in text and "\n" not in text
    else:
        pane.max_new.setValue(5)
        result = run(qtbot, pane)
        assert len(result.steps) == 1 and result.stop_reason == "context_full"


def test_clicking_a_token_maps_to_its_step(qtbot, pane):
    pane.temperature.setValue(1.5)
    result = run(qtbot, pane)
    clicked = []
    pane.text_view.token_clicked.connect(clicked.append)
    indices = [i for i in range(result.n_new) if pane.text_view.token_rect(i) is not None]
    for i in indices:
        qtbot.mouseClick(pane.text_view.viewport(), Qt.MouseButton.LeftButton,
                         pos=pane.text_view.token_rect(i).center())
    assert clicked == indices
    # a click on the prompt selects nothing
    qtbot.mouseClick(pane.text_view.viewport(), Qt.MouseButton.LeftButton, pos=QPoint(6, 6))
    assert clicked == indices
