"""The main window: loading, panels filled, debounced and stale-safe tracing, settings, drops."""

from __future__ import annotations

import sys
import threading

import numpy as np
import pytest
from PySide6.QtCore import QPoint, QMimeData, QPointF, Qt, QTimer, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QFileDialog, QMessageBox

from explorer.ui import app as app_module
from explorer.ui.panels.tokenization import TokenizationPanel
from explorer.ui.window.chrome.model_menu import MAX_RECENT, RecentCheckpoints


def wrap_trace_ids(monkeypatch, loaded, before=None):
    """Count (and optionally delay) every forward pass the window's model runs."""
    calls: list[list[int]] = []
    original = loaded.trace_ids

    def traced(ids, *args, **kwargs):
        calls.append(list(ids))
        if before is not None:
            before(len(calls))
        return original(ids, *args, **kwargs)

    monkeypatch.setattr(loaded, "trace_ids", traced)
    return calls


def test_window_opens_with_model_and_every_panel_filled(qtbot, window, tiny_loaded):
    assert window.loaded.name == "tiny-a"
    assert window.panels, "no panel could be built"
    assert any(isinstance(p, TokenizationPanel) for p in window.panels)
    for dock in window.docks:  # every panel on screen has it; one behind another tab gets it when shown
        if dock.panel.on_screen:
            assert dock.panel.trace is window.trace, f"{dock.panel.title} was not given the trace"
    for dock in window.docks:
        if dock.isHidden():  # only a panel that does not apply to a decoder (or, Features, has no SAE) is hidden
            assert not (dock.panel.applies_to(window.loaded.config)
                        and getattr(dock.panel, "available", lambda: True)()), dock.panel.title
            continue
        dock.raise_()
        qtbot.waitUntil(lambda d=dock: d.panel.trace is window.trace, timeout=10_000)
    text = window.prompt.text()
    assert text and window.trace.n_tokens == len(tiny_loaded.tokenizer.encode(text))
    assert window.status.fields["model"].text() == "<b>tiny-a</b>"
    assert window.status.fields["tokens"].text().startswith(f"{window.trace.n_tokens} token")
    assert "ms" in window.status.fields["forward"].text()
    assert window.layer_head.layer.maximum() == 1 and window.layer_head.head.maximum() == 1


def test_loading_another_checkpoint_replaces_the_model(qtbot, window, other_checkpoint):
    with qtbot.waitSignal(window.trace_applied, timeout=30_000):
        window.open_checkpoint(str(other_checkpoint))
    assert window.loaded.name == "tiny-b"
    assert window.trace.config.n_layers == 3
    assert window.layer_head.layer.maximum() == 2 and window.layer_head.head.maximum() == 3
    assert all(dock.panel.trace is window.trace for dock in window.docks if dock.panel.on_screen)
    assert sum(dock.panel.on_screen for dock in window.docks) < len(window.docks)  # tabs behind: nothing yet


def test_a_bad_checkpoint_shows_the_loaders_message_and_keeps_the_model(qtbot, window, bad_checkpoint,
                                                                         monkeypatch):
    shown = []
    for name in ("critical", "warning"):
        monkeypatch.setattr(QMessageBox, name, lambda parent, title, text, *a, **k: shown.append(text))
    before, trace = window.loaded, window.trace
    with qtbot.waitSignal(window.load_failed, timeout=30_000):
        window.open_checkpoint(str(bad_checkpoint))
    assert len(shown) == 1 and "config.json" in shown[0] and "not readable JSON" in shown[0]
    assert window.loaded is before and window.trace is trace
    assert window.source == str(window.recent.last)
    assert str(bad_checkpoint) not in window.recent.entries()


def test_quick_edits_are_debounced_into_one_forward(qtbot, window, monkeypatch):
    calls = wrap_trace_ids(monkeypatch, window.loaded)
    window.controller.set_debounce_ms(400)  # wide enough for the keystrokes below on any machine
    window.prompt.edit.setFocus()
    window.prompt.edit.clear()
    with qtbot.waitSignal(window.trace_applied, timeout=30_000):
        qtbot.keyClicks(window.prompt.edit, "Hello there")
    assert len(calls) == 1
    assert calls[0] == window.loaded.tokenizer.encode("Hello there")
    assert window.trace.tokens == tuple(window.loaded.tokenizer.displays(calls[0]))


def test_a_stale_result_is_dropped(qtbot, window, monkeypatch):
    release = threading.Event()
    calls = wrap_trace_ids(monkeypatch, window.loaded,
                           before=lambda n: release.wait(30) if n == 1 else None)
    applied, dropped = [], []
    window.trace_applied.connect(applied.append)
    window.controller.dropped.connect(dropped.append)
    first = window.controller.request("The first, slow request")
    qtbot.waitUntil(lambda: len(calls) == 1)  # the first forward is under way
    second = window.controller.request("A newer request")
    assert second > first
    release.set()
    with qtbot.waitSignal(window.trace_applied, timeout=30_000):
        pass
    qtbot.waitUntil(window.controller.is_idle)
    assert dropped == [first]
    assert [t.tokens for t in applied] == [tuple(window.loaded.tokenizer.displays(
        window.loaded.tokenizer.encode("A newer request")))]


def test_the_gui_thread_stays_responsive_during_a_forward(qtbot, window, monkeypatch):
    ticks = []
    timer_fired_enough = threading.Event()
    timer = QTimer()
    timer.setInterval(10)

    def tick():
        ticks.append(1)
        if len(ticks) >= 5:
            timer_fired_enough.set()

    timer.timeout.connect(tick)
    # the forward pass only finishes once the GUI thread's timer has fired five times
    outcome = []
    wrap_trace_ids(monkeypatch, window.loaded, before=lambda n: outcome.append(timer_fired_enough.wait(30)))
    timer.start()
    with qtbot.waitSignal(window.trace_applied, timeout=40_000):
        window.controller.request("Is the window still alive?")
    timer.stop()
    assert outcome == [True]
    assert len(ticks) >= 5


def test_settings_remember_the_last_checkpoint_and_recent_list(qtbot, window, other_checkpoint, settings,
                                                               make_window, tmp_path):
    first = window.source
    with qtbot.waitSignal(window.trace_applied, timeout=30_000):
        window.open_checkpoint(str(other_checkpoint))
    recent = RecentCheckpoints(settings, lambda: [])
    assert recent.last == str(other_checkpoint)
    assert recent.entries() == [str(other_checkpoint), first]

    # a fresh window on the same settings starts with the last checkpoint
    again = make_window()
    with qtbot.waitSignal(again.trace_applied, timeout=30_000):
        again.start()
    assert again.loaded.name == "tiny-b"

    # missing checkpoints drop out; the list never grows past MAX_RECENT
    recent.add(str(tmp_path / "gone"))
    (tmp_path / "gone").mkdir(exist_ok=True)
    for i in range(MAX_RECENT + 3):
        (tmp_path / f"c{i}").mkdir()
        recent.add(str(tmp_path / f"c{i}"))
    (tmp_path / "gone").rmdir()
    entries = recent.entries()
    assert len(entries) == MAX_RECENT and str(tmp_path / "gone") not in entries
    assert entries[0] == str(tmp_path / f"c{MAX_RECENT + 2}")


def test_drag_and_drop_accepts_a_checkpoint_directory(qtbot, window, other_checkpoint, tmp_path):
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(other_checkpoint))])
    enter = QDragEnterEvent(QPoint(20, 20), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
                            Qt.KeyboardModifier.NoModifier)
    enter.setAccepted(False)
    window.dragEnterEvent(enter)
    assert enter.isAccepted()

    text_only = QMimeData()
    text_only.setText("hello")
    rejected = QDragEnterEvent(QPoint(20, 20), Qt.DropAction.CopyAction, text_only, Qt.MouseButton.LeftButton,
                               Qt.KeyboardModifier.NoModifier)
    window.dragEnterEvent(rejected)
    assert not rejected.isAccepted()

    drop = QDropEvent(QPointF(20, 20), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
                      Qt.KeyboardModifier.NoModifier)
    with qtbot.waitSignal(window.trace_applied, timeout=30_000):
        window.dropEvent(drop)
    assert window.loaded.name == "tiny-b"


def test_a_long_prompt_shows_the_truncation_notice(qtbot, window):
    text = "word " * 100
    with qtbot.waitSignal(window.trace_applied, timeout=30_000):
        window.set_prompt(text)
    n_ctx, total = window.loaded.config.n_ctx, len(window.loaded.tokenizer.encode(text))
    assert window.trace.n_tokens == n_ctx < total
    assert not window.prompt.notice.isHidden()
    assert f"showing the first {n_ctx} of {total} tokens" in window.prompt.notice.text()


def test_a_prompt_error_is_a_notice_not_a_dialog(qtbot, window, monkeypatch):
    monkeypatch.setattr(QMessageBox, "critical", lambda *a, **k: pytest.fail("no dialog for a prompt error"))
    trace = window.trace
    with qtbot.waitSignal(window.controller.failed, timeout=30_000):
        window.set_prompt("")
    assert window.trace is trace
    assert "empty" in window.prompt.notice.text()


def test_layer_and_head_shortcuts_move_the_shared_selection(window):
    actions = {a.text(): a for a in window.findChildren(type(window.menuBar().actions()[0]))}
    actions["Next layer"].trigger()
    actions["Next head"].trigger()
    assert (window.selection.layer, window.selection.head) == (1, 1)
    actions["Next layer"].trigger()  # clamped to the model's 2 layers
    assert window.selection.layer == 1
    assert window.layer_head.layer.value() == 1
    assert window.layer_head.layer.text() == "1  (0-1)"  # the index and the range, not "1 / 1"
    actions["Previous head"].trigger()
    assert window.selection.head == 0
    assert actions["Next layer"].shortcut().toString() == "Alt+Up"


def test_f1_toggles_the_explanation_of_the_focused_panel(qtbot, window):
    panel = next(p for p in window.panels if isinstance(p, TokenizationPanel))
    panel.chips.setFocus()
    qtbot.waitUntil(lambda: window.presenter.focus == "tokenization")  # drawn first from now on
    window.toggle_focused_explanation()
    assert panel.explain_text.isVisible()
    assert "byte-pair encoding" in panel.explain_text.toPlainText()
    window.toggle_focused_explanation()
    assert not panel.explain_text.isVisible()


def test_export_trace_writes_the_npz(qtbot, window, tmp_path, monkeypatch):
    target = tmp_path / "out.npz"
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(target), ""))
    window.export_trace()
    qtbot.waitUntil(target.exists, timeout=30_000)
    with np.load(target) as data:
        assert list(data["token_ids"]) == list(window.trace.token_ids)


def test_programmatic_prompt_changes_keep_the_undo_history(qtbot, window):
    before = window.prompt.text()
    with qtbot.waitSignal(window.trace_applied, timeout=30_000):
        window.set_prompt("A sample prompt")  # what Prompt > Sample prompts and a model change do
    assert window.prompt.edit.document().isUndoAvailable()
    with qtbot.waitSignal(window.trace_applied, timeout=30_000):
        window.prompt.edit.undo()
    assert window.prompt.text() == before
    assert "".join(window.trace.tokens) == before  # the undone text is analysed again


def test_device_and_precision_are_remembered(qtbot, window, settings, other_checkpoint):
    app_module.remember_device(window)
    with qtbot.waitSignal(window.trace_applied, timeout=30_000):
        window.open_checkpoint(str(other_checkpoint), device="cpu", dtype="float32")
    assert settings.value(app_module.DEVICE_KEY) == "cpu" and settings.value(app_module.DTYPE_KEY) == "float32"
    assert app_module.remembered_device(settings, None, None) == ("cpu", "float32")
    assert app_module.remembered_device(settings, "auto", None) == ("auto", "float32")  # the command line wins
    settings.setValue(app_module.DEVICE_KEY, "mps" if sys.platform != "darwin" else "cuda")
    settings.setValue(app_module.DTYPE_KEY, "float16")
    from explorer.core.device import available_devices

    if settings.value(app_module.DEVICE_KEY) not in available_devices():  # a GPU that is gone: start safely
        assert app_module.remembered_device(settings, None, None) == ("auto", "float32")
