"""Loading with progress and Cancel (the previous model stays), and a model whose numbers are NaN: every
panel draws it, the status bar names the first layer where NaN appears."""

from __future__ import annotations

import logging

import torch
from PySide6.QtWidgets import QMessageBox

from explorer.core.checkpoint import save_native
from explorer.core.config import ModelConfig
from explorer.core.model import Transformer
from explorer.core.tokenize.base import gpt2_tokenizer


def test_cancelling_a_load_keeps_the_previous_model(qtbot, window, other_checkpoint, monkeypatch):
    import explorer.core.checkpoint.validate as validate

    shown = []
    monkeypatch.setattr(QMessageBox, "critical", lambda *a, **k: shown.append(a))
    before, trace = window.loaded, window.trace
    progress = []
    window.loader.progress.connect(lambda i, n: progress.append((i, n)))
    real_step = validate.LoadContext.step

    def slow_step(self, total, what):  # stop after the third tensor: the user clicks Cancel meanwhile
        if self.done == 3:
            window.loader.cancel()  # what the Cancel button does (thread-safe: it sets an Event)
        real_step(self, total, what)

    monkeypatch.setattr(validate.LoadContext, "step", slow_step)
    with qtbot.waitSignal(window.loader.cancelled, timeout=30_000):
        window.open_checkpoint(str(other_checkpoint))
    assert progress and progress[0][0] == 0 and progress[0][1] > 3
    assert window.loaded is before and window.trace is trace and not shown
    assert "cancelled" in window.status.currentMessage() and "tiny-a stays open" in window.status.currentMessage()
    assert window.status.cancel.isHidden() and window.status.progress.isHidden()


def test_the_cancel_button_is_shown_while_loading_and_asks_the_loader(qtbot, window):
    window.status.set_loading("Loading…")
    assert not window.status.cancel.isHidden()
    window.status.set_progress(4, 10)
    assert window.status.progress.format() == "tensor 5 of 10" and window.status.progress.maximum() == 10
    asked = []
    window.loader.cancel = lambda: asked.append(True)  # the connection resolves the slot at emit time
    window.status.cancel_requested.disconnect()
    window.status.cancel_requested.connect(window.loader.cancel)
    window.status.cancel.click()
    assert asked == [True]
    window.status.set_loading(None)


def test_a_model_with_nan_is_drawn_and_named_in_the_status_bar(qtbot, make_window, tmp_path, caplog):
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=50257, n_ctx=64, d_model=32, n_layers=2, n_heads=2, d_head=16, d_ff=64)
    model = Transformer(cfg).eval()
    with torch.no_grad():
        model.blocks[1].mlp.W_in.weight[0, 0] = float("nan")
    save_native(model, gpt2_tokenizer(), tmp_path / "nan", name="nan")
    window = make_window()
    with caplog.at_level(logging.ERROR), qtbot.waitSignal(window.trace_applied, timeout=30_000):
        window.open_checkpoint(str(tmp_path / "nan"))
    assert not [r for r in caplog.records if "failed to show" in r.getMessage()]
    # the NaN check runs on its own worker beside the panels' drawing: its end names the layer
    qtbot.waitUntil(lambda: not window.presenter.checking and not window.status.warning.isHidden(), timeout=30_000)
    text = window.status.warning.text()
    assert not window.status.warning.isHidden() and "NaN first appears in layer 1" in text
    for layer in (0, 1):  # switching layers redraws every panel on NaN data without an error
        window.selection.set_layer(layer)
        qtbot.wait(50)
    assert not [r for r in caplog.records if "failed" in r.getMessage()]


def test_closing_the_window_during_a_load_stops_it_at_the_next_tensor(qtbot, window, other_checkpoint, monkeypatch):
    import time

    from PySide6.QtCore import QThreadPool

    import explorer.core.checkpoint.validate as validate

    real_step = validate.LoadContext.step
    steps = []

    def slow_step(self, total, what):  # a slow disk: 50 ms per tensor
        steps.append(what)
        time.sleep(0.05)
        real_step(self, total, what)

    monkeypatch.setattr(validate.LoadContext, "step", slow_step)
    before = window.loaded
    applied = []
    window.model_loaded.connect(applied.append)
    with qtbot.waitSignal(window.loader.progress, timeout=30_000):
        window.open_checkpoint(str(other_checkpoint))
    window.close()
    assert QThreadPool.globalInstance().waitForDone(30_000)
    qtbot.wait(50)
    assert not applied and window.loaded is before
    assert len(steps) < 20  # tiny-b has 52 tensors: the load stopped early instead of running to its end
