"""Issue 38, the window half: the conversation editor driven with real clicks and keys traces exactly the ids
``encode_chat`` (and transformers' ``apply_chat_template``) gives; every token axis carries the role bands of
``ChatSpans.segments()``; Generate continues the assistant's turn and stops at the template's end-of-turn
token; the reply kept becomes a turn; a reasoning model's thinking is told apart on the timeline; the selection
jumps by turn; patching, interventions and sessions work on conversations; a model without a template says so.

The models: tiny random Llamas over tiny tokenizers with the real Qwen3 and DeepSeek-R1 templates
(``tests/ui/chat_model.py``), rigged so that their greedy replies end their turn (and close their thinking) at
known steps."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import QPointF, Qt
from PySide6.QtGui import QColor
from PySide6.QtTest import QTest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from chat_model import STARTER, build_chat_model  # noqa: E402

pytest.importorskip("transformers")  # builds the tiny models (a test reference)

from explorer.core.chat.assistant import split_reply  # noqa: E402
from explorer.core.checkpoint import load_checkpoint  # noqa: E402
from explorer.ui.widgets.role_bands import label_and_colour  # noqa: E402

TIMEOUT = 60_000


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory):
    """Qwen3's template; the greedy reply to STARTER ends its turn with <|im_end|> as its 4th token."""
    return build_chat_model(tmp_path_factory.mktemp("chat") / "qwen3-tiny", "qwen3", emits=(("eos", 3),))


@pytest.fixture(scope="module")
def deepseek(tmp_path_factory):
    """DeepSeek-R1's template (it opens the reply's <think> itself); the reply closes it at step 3, ends at 6."""
    return build_chat_model(tmp_path_factory.mktemp("chat") / "r1-tiny", "deepseek_r1",
                            emits=(("</think>", 3), ("eos", 6)))


def settled(window) -> bool:
    return window.trace is not None and window.presenter.is_idle() and window.session.conversation.is_idle()


def open_conversation(qtbot, make_window, model):
    """A window on ``model`` with the conversation editor opened by a click, its first trace drawn."""
    window = make_window()
    with qtbot.waitSignal(window.trace_applied, timeout=TIMEOUT):
        window.open_checkpoint(str(model["directory"]))
    qtbot.waitUntil(lambda: settled(window) and window.session.conversation.available, timeout=TIMEOUT)
    QTest.mouseClick(window.prompt_area.chat_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: settled(window) and window.trace.meta.chat is not None, timeout=TIMEOUT)
    return window


def wait_for(qtbot, window, messages, add_generation_prompt=True):
    """The conversation traced is ``messages``: the trace's ids are encode_chat's; returns them."""
    loaded = window.session.loaded
    expected = list(loaded.encode_chat(messages, add_generation_prompt).ids)
    qtbot.waitUntil(lambda: settled(window) and list(window.trace.token_ids) == expected, timeout=TIMEOUT)
    assert window.session.conversation.messages == messages
    return expected


def type_into(widget, text):
    widget.setFocus()
    QTest.keyClick(widget, Qt.Key.Key_A, Qt.KeyboardModifier.ControlModifier)
    QTest.keyClicks(widget, text)


def test_editor_turns_are_traced_as_the_template_encodes_them(qtbot, make_window, qwen3):
    window = open_conversation(qtbot, make_window, qwen3)
    editor = window.prompt_area.editor
    assert list(window.trace.token_ids) == qwen3["ids"]  # transformers' apply_chat_template(STARTER)
    assert window.prompt_area.conversation_shown and editor.count.text() == f"<b>{len(qwen3['ids'])}</b> tokens"
    # an assistant reply and a second question, added and typed
    QTest.mouseClick(editor.turns.viewport(), Qt.MouseButton.LeftButton,
                     pos=editor.turns.visualItemRect(editor.turns.item(1)).center())
    QTest.mouseClick(editor.add_buttons["assistant"], Qt.MouseButton.LeftButton)
    QTest.keyClicks(editor.content, "The capital of France is Paris.")
    QTest.mouseClick(editor.add_buttons["user"], Qt.MouseButton.LeftButton)
    QTest.keyClicks(editor.content, "And of Italy?")
    messages = STARTER + [{"role": "assistant", "content": "The capital of France is Paris."},
                          {"role": "user", "content": "And of Italy?"}]
    ids = wait_for(qtbot, window, messages)
    from transformers import AutoTokenizer

    assert ids == AutoTokenizer.from_pretrained(str(qwen3["directory"])).apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True)["input_ids"]
    # reordered with the buttons, one turn's role changed with the keyboard, one removed
    QTest.mouseClick(editor.up_button, Qt.MouseButton.LeftButton)
    messages[2], messages[3] = messages[3], messages[2]
    wait_for(qtbot, window, messages)
    editor.role.setFocus()
    QTest.keyClick(editor.role, Qt.Key.Key_Up)  # user -> developer
    messages[2] = {"role": "developer", "content": "And of Italy?"}
    wait_for(qtbot, window, messages)
    QTest.mouseClick(editor.remove_button, Qt.MouseButton.LeftButton)
    del messages[2]
    wait_for(qtbot, window, messages)
    # the template's options: no generation prompt, then Qwen3's enable_thinking off
    QTest.mouseClick(editor.generation_prompt, Qt.MouseButton.LeftButton)
    wait_for(qtbot, window, messages, add_generation_prompt=False)
    QTest.mouseClick(editor.generation_prompt, Qt.MouseButton.LeftButton)
    thinking = editor.option_widgets["enable_thinking"]
    thinking.setFocus()
    QTest.keyClick(thinking, Qt.Key.Key_End)  # "enable_thinking: false"
    expected = list(window.session.loaded.encode_chat(messages, True, enable_thinking=False).ids)
    qtbot.waitUntil(lambda: settled(window) and list(window.trace.token_ids) == expected, timeout=TIMEOUT)
    assert "thinking" in window.trace.meta.chat.kinds or "<think>" in "".join(window.trace.tokens)
    # the raw tokens view shows the same ids
    QTest.mouseClick(editor.view_buttons["raw"], Qt.MouseButton.LeftButton)
    assert [chip.token_id for chip in editor.view.chips.chips] == expected


def axis_pixel(heatmap, side, position):
    """The colour the heatmap draws on its ``side`` axis, in the band strip, at token ``position``'s middle."""
    axis, view = heatmap.plot.getAxis(side), heatmap.plot.vb
    mid = view.mapViewToScene(QPointF(position + 0.5, position + 0.5))
    local = axis.mapFromScene(mid)
    if side == "left":
        local = QPointF(axis.size().width() - 2, local.y())
    else:
        local = QPointF(local.x(), 2)
    point = heatmap.mapFromScene(axis.mapToScene(local))
    return heatmap.grab().toImage().pixelColor(point)


def test_role_bands_follow_the_spans_on_every_token_axis(qtbot, make_window, qwen3):
    window = open_conversation(qtbot, make_window, qwen3)
    spans = window.trace.meta.chat
    segments = [(s.start, s.stop, label_and_colour(s.role, s.kind)) for s in spans.segments()]
    extents = [(a, b) for a, b, _ in segments]
    assert {"system", "user"} <= {label for _, _, (label, _) in segments}
    for panel_id in ("attention", "residual", "tokenization"):
        window.dock(panel_id).raise_()
        qtbot.waitUntil(lambda: window.panel(panel_id).trace is window.trace and settled(window), timeout=TIMEOUT)
    attention = window.panel("attention").detail
    for bands in (attention.row_bands, attention.col_bands, window.panel("residual").lens_map.col_bands):
        assert [(b.start, b.stop) for b in bands] == extents
        assert [(b.label, b.colour) for b in bands] == [c for _, _, c in segments]
    system = next((a, b) for a, b, (label, _) in segments if label == "system")
    for side in ("left", "bottom"):  # painted: the system prompt's tokens in its colour on both axes
        colour = axis_pixel(attention, side, (system[0] + system[1]) // 2)
        assert abs(colour.red() - QColor("#9c36b5").red()) < 30 and abs(colour.blue() - QColor("#9c36b5").blue()) < 30
    assert "[system (turn 1) \u2192 template markup]" in attention.tooltip(system[0], 0)
    chips = window.panel("tokenization").chips
    assert [chips.band_colour(i) for i in range(spans.n_tokens)] == \
        [colour for a, b, (_, colour) in segments for _ in range(a, b)]
    assert "system" in window.panel("tokenization").role_legend.text()


def test_generate_stops_at_the_end_of_turn_and_the_kept_reply_becomes_a_turn(qtbot, make_window, qwen3):
    window = open_conversation(qtbot, make_window, qwen3)
    pane = window.generation
    QTest.mouseClick(pane.greedy, Qt.MouseButton.LeftButton)
    with qtbot.waitSignal(pane.generation_finished, timeout=TIMEOUT):
        QTest.mouseClick(pane.generate_button, Qt.MouseButton.LeftButton)
    result = pane.result
    end = qwen3["end"]
    reply = qwen3["reply"][: qwen3["reply"].index(end) + 1]  # transformers' greedy reply, to its end of turn
    assert pane.prompt_ids == qwen3["ids"] and result.token_ids == reply and result.stop_reason == "eos"
    assert result.token_ids[-1] == end and len(reply) == 4
    qtbot.waitUntil(lambda: settled(window) and window.session.timeline.full is not None, timeout=TIMEOUT)
    assert window.trace.meta.chat.n_tokens == window.trace.n_tokens == len(qwen3["ids"]) + 4
    assert pane.assistant.keep_button.isEnabled()
    QTest.mouseClick(pane.assistant.keep_button, Qt.MouseButton.LeftButton)
    tokenizer = window.session.loaded.tokenizer
    thinking, answer = split_reply(tokenizer.decode(reply[:-1]))
    kept = STARTER + [{"role": "assistant", "content": answer}]
    wait_for(qtbot, window, kept)
    editor = window.prompt_area.editor
    assert editor.turns.count() == 3 and editor.turns.item(2).text().startswith("assistant: ")
    assert window.trace.meta.chat.roles == ("system", "user", "assistant", "assistant")


def test_a_reasoning_models_thinking_is_apart_on_the_timeline(qtbot, make_window, deepseek):
    window = open_conversation(qtbot, make_window, deepseek)
    pane = window.generation
    QTest.mouseClick(pane.greedy, Qt.MouseButton.LeftButton)
    with qtbot.waitSignal(pane.generation_finished, timeout=TIMEOUT):
        QTest.mouseClick(pane.generate_button, Qt.MouseButton.LeftButton)
    assert pane.result.stop_reason == "eos" and len(pane.result.token_ids) == 7
    qtbot.waitUntil(lambda: settled(window) and window.session.timeline.full is not None, timeout=TIMEOUT)
    kinds = list(window.trace.meta.chat.kinds[len(deepseek["ids"]):])
    assert kinds == ["thinking"] * 3 + ["markup"] + ["content"] * 2 + ["markup"]
    thinking, answer = label_and_colour("assistant", "thinking")[1], label_and_colour("assistant", "content")[1]
    bar = window.timeline_bar
    assert bar.slider.colours[:3] == [thinking] * 3 and bar.slider.colours[4:6] == [answer] * 2
    while window.session.timeline.step > 1:
        QTest.mouseClick(bar.previous, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: settled(window), timeout=TIMEOUT)
    assert "(thinking)" in bar.label.text()
    window.session.timeline.set_step(5)
    qtbot.waitUntil(lambda: settled(window), timeout=TIMEOUT)
    assert "(answer)" in bar.label.text()
    assert [pane.text_view.kind_of(i) for i in range(7)] == ["thinking"] * 3 + ["markup", "", "", "markup"]
    # the panels' token axes carry the thinking band at that step
    bands = window.panel("attention").detail.row_bands if window.panel("attention").trace is window.trace else ()
    assert not bands or any(b.label == "thinking" for b in bands)


def test_the_selection_jumps_by_turn(qtbot, make_window, qwen3):
    window = open_conversation(qtbot, make_window, qwen3)
    starts = window.trace.meta.chat.turn_starts()
    assert len(starts) == 3  # system, user, the assistant's opened turn
    window.selection.set_token(0)
    window.activateWindow()
    window.panels[0].setFocus()
    QTest.keyClick(window.panels[0], Qt.Key.Key_PageDown, Qt.KeyboardModifier.AltModifier)
    assert window.selection.token == starts[1]
    QTest.mouseClick(window.prompt_area.editor.next_turn, Qt.MouseButton.LeftButton)
    assert window.selection.token == starts[2]
    QTest.mouseClick(window.prompt_area.editor.next_turn, Qt.MouseButton.LeftButton)
    assert window.selection.token == starts[2]  # the last turn: it stays
    QTest.keyClick(window.panels[0], Qt.Key.Key_PageUp, Qt.KeyboardModifier.AltModifier)
    assert window.selection.token == starts[1]
    QTest.mouseClick(window.prompt_area.editor.previous_turn, Qt.MouseButton.LeftButton)
    assert window.selection.token == starts[0]


def test_interventions_and_patching_on_conversations(qtbot, make_window, qwen3):
    from explorer.core.interventions.spec import Intervention

    window = open_conversation(qtbot, make_window, qwen3)
    clean = list(window.trace.token_ids)
    with qtbot.waitSignal(window.trace_applied, timeout=TIMEOUT):
        window.session.set_interventions([Intervention("head", 0, 1, "zero")])
    assert list(window.trace.token_ids) == clean and window.trace.meta.chat is not None and window.trace.interventions
    with qtbot.waitSignal(window.trace_applied, timeout=TIMEOUT):
        window.session.set_interventions([])
    # the corrupted conversation (the same number of tokens), then the clean one back
    editor = window.prompt_area.editor
    QTest.mouseClick(editor.turns.viewport(), Qt.MouseButton.LeftButton,
                     pos=editor.turns.visualItemRect(editor.turns.item(1)).center())
    type_into(editor.content, "What is the capital of Paris?")
    corrupt = wait_for(qtbot, window, [STARTER[0], {"role": "user", "content": "What is the capital of Paris?"}])
    assert len(corrupt) == len(clean)
    QTest.mouseClick(editor.corrupted_button, Qt.MouseButton.LeftButton)
    patching = window.panel("patching")
    assert patching.corrupt_edit.text().startswith("[conversation, ")
    type_into(editor.content, STARTER[1]["content"])
    wait_for(qtbot, window, STARTER)
    qtbot.waitUntil(lambda: patching.trace is window.trace and patching.run_button.isEnabled(), timeout=TIMEOUT)
    patching.mode_box.setCurrentIndex(patching.mode_box.findData("exact"))
    QTest.mouseClick(patching.run_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: patching.result is not None and not patching.cancel_button.isEnabled(), timeout=TIMEOUT)
    assert patching.resid_map.matrix.shape[1] == len(clean)
    assert [(b.start, b.stop) for b in patching.resid_map.col_bands] == \
        [(s.start, s.stop) for s in window.trace.meta.chat.segments()]
    from explorer.core.interventions.patching import activation_patching

    target = int(np.argmax(window.trace["logits"][-1]))  # the clean run's top prediction (no target typed)
    exact = activation_patching(window.session.loaded.model, clean, corrupt, target)
    assert np.allclose(patching.resid_map.matrix, exact.resid, atol=1e-5, equal_nan=True)


def test_a_model_without_a_template_says_so_and_the_raw_prompt_works(qtbot, window):
    area = window.prompt_area
    assert "no chat template" in area.chat_button.toolTip()
    QTest.mouseClick(area.chat_button, Qt.MouseButton.LeftButton)
    editor = area.editor
    assert "no chat template" in editor.status.text() and not editor.add_buttons["user"].isEnabled()
    QTest.mouseClick(editor.raw_button, Qt.MouseButton.LeftButton)
    with qtbot.waitSignal(window.trace_applied, timeout=TIMEOUT):
        type_into(window.prompt.edit, "Hello there")
    assert window.trace.meta.chat is None and window.trace.n_tokens == len(window.loaded.tokenizer.encode("Hello there"))


def test_the_roles_panel_summarises_attention_per_span(qtbot, make_window, qwen3):
    from explorer.core.chat.summaries import attention_to_spans

    window = open_conversation(qtbot, make_window, qwen3)
    window.dock("roles").raise_()
    panel = window.panel("roles")
    qtbot.waitUntil(lambda: panel.trace is window.trace and settled(window), timeout=TIMEOUT)
    expected = attention_to_spans(window.trace)
    assert panel.view.labels == expected.labels and np.allclose(panel.view.values, expected.values, atol=1e-6)
    assert np.allclose(panel.view.values.sum(axis=-1), 1.0, atol=1e-5)
    data, rows, cols = panel.exportables()[1].data()
    assert cols == list(expected.labels) and np.allclose(data, expected.per_layer(), atol=1e-6)
    QTest.mouseClick(window.prompt_area.editor.raw_button, Qt.MouseButton.LeftButton)
    with qtbot.waitSignal(window.trace_applied, timeout=TIMEOUT):
        type_into(window.prompt.edit, "plain text")
    assert "Not a conversation" in panel.info.text()


def test_a_session_keeps_the_conversation(qtbot, make_window, qwen3, tmp_path, settings):
    window = open_conversation(qtbot, make_window, qwen3)
    editor = window.prompt_area.editor
    QTest.mouseClick(editor.add_buttons["assistant"], Qt.MouseButton.LeftButton)
    QTest.keyClicks(editor.content, "Paris.")
    messages = STARTER + [{"role": "assistant", "content": "Paris."}]
    ids = wait_for(qtbot, window, messages)
    window.selection.set_token(7)
    path = tmp_path / "chat.explorer-session.json"
    with qtbot.waitSignal(window.session_files.saved, timeout=TIMEOUT):
        window.session_files.save(path)
    saved = json.loads(path.read_text())
    assert saved["conversation"] == messages and saved["token_ids"] == ids
    assert saved["panels"]["chat"]["add_generation_prompt"] is True
    other = make_window()
    with qtbot.waitSignal(other.session_files.restored, timeout=TIMEOUT):
        other.session_files.open(path, confirm=lambda _line: True)
    qtbot.waitUntil(lambda: settled(other), timeout=TIMEOUT)
    assert other.session.conversation.messages == messages and list(other.trace.token_ids) == ids
    assert other.trace.meta.chat == load_checkpoint(str(qwen3["directory"])).encode_chat(messages).spans
    assert other.prompt_area.conversation_shown and other.prompt_area.editor.turns.count() == 3
    assert other.selection.token == 7
