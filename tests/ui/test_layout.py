"""The window as a new user meets it, at laptop and desktop sizes, on a 12-layer, 12-head model:
no two labels overlap, titles fit their plots, every colour bar is inside its plot widget, the head
statistics table shows rows, and the "computing…" state follows the request whose trace is shown."""

from __future__ import annotations

import threading

import pyqtgraph as pg
import pytest
import torch
from PySide6.QtCore import QPoint, QRect
from PySide6.QtWidgets import QApplication, QLabel, QScrollArea

from explorer.core.checkpoint import save_native
from explorer.core.config import ModelConfig
from explorer.core.model import Transformer
from explorer.core.tokenize.base import gpt2_tokenizer
from explorer.ui.widgets.axis import FittedTitle, axis_label_rects
from explorer.ui.widgets.heatmap import Heatmap

PROMPT = ("When Mary and John went to the store, John gave a drink to Mary. The blue kite drifted over "
          "the old harbor while the fishermen mended their nets.")


@pytest.fixture(scope="module")
def twelve_heads(tmp_path_factory):
    """GPT-2 small's counts (12 layers, 12 heads, GPT-2's vocabulary), narrow so that it is fast."""
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=50257, n_ctx=128, d_model=48, n_layers=12, n_heads=12, d_head=4, d_ff=96)
    path = tmp_path_factory.mktemp("ckpt") / "twelve"
    save_native(Transformer(cfg).eval(), gpt2_tokenizer(), path, name="twelve-heads")
    return path


@pytest.fixture(scope="module")
def deep_wide(tmp_path_factory):
    """The far end of the range: 80 layers of 32 heads (tiny widths)."""
    torch.manual_seed(1)
    cfg = ModelConfig(vocab_size=50257, n_ctx=512, d_model=64, n_layers=80, n_heads=32, d_head=2, d_ff=64)
    path = tmp_path_factory.mktemp("ckpt") / "deep"
    save_native(Transformer(cfg).eval(), gpt2_tokenizer(), path, name="deep-wide")
    return path


def settle(qtbot, ms: int = 150) -> None:
    qtbot.wait(ms)
    QApplication.processEvents()


def open_at(qtbot, make_window, checkpoint, width: int, height: int, prompt: str = PROMPT):
    window = make_window()
    window.resize(width, height)
    settle(qtbot)
    with qtbot.waitSignal(window.trace_applied, timeout=60_000):
        window.open_checkpoint(str(checkpoint))
    with qtbot.waitSignal(window.trace_applied, timeout=60_000):
        window.set_prompt(prompt)
    attention = next(p for p in window.panels if hasattr(p, "show_statistics"))
    attention.show_statistics(True)
    return window


def window_rect(widget) -> QRect:
    return QRect(widget.mapTo(widget.window(), QPoint(0, 0)), widget.size())


def check_graphics_view(view: pg.GraphicsView, where: str) -> int:
    """No overlapping tick labels on any axis; titles elided to fit; colour bars inside the view.
    Returns how many axes with labels it checked."""
    checked = 0
    viewport = view.mapToScene(view.viewport().rect()).boundingRect()
    for item in view.scene().items():
        if not item.isVisible():
            continue
        if isinstance(item, pg.AxisItem):
            rects = axis_label_rects(item)
            for i, a in enumerate(rects):
                for b in rects[i + 1:]:
                    assert not a.intersects(b), f"{where}: {item.orientation} labels overlap: {a} {b}"
            checked += bool(rects)
        elif isinstance(item, FittedTitle) and item.full_text:
            shown = item.item.boundingRect().width()
            assert shown <= item.rect().width() + 2, f"{where}: title {item.full_text!r} wider than its plot"
        elif isinstance(item, pg.ColorBarItem):
            bar = item.sceneBoundingRect()
            assert viewport.adjusted(-1, -1, 1, 1).contains(bar), f"{where}: colour bar clipped: {bar} not in {viewport}"
            for box in view.scene().items():
                if isinstance(box, pg.ViewBox) and box.isVisible() and box is not item.vb:
                    overlap = box.sceneBoundingRect().intersected(bar)
                    assert overlap.width() < 2, f"{where}: a colour bar drawn over a plot"
    return checked


def check_labels(dock, where: str) -> None:
    """Visible QLabels inside one panel never overlap each other."""
    labels = [w for w in dock.findChildren(QLabel) if w.isVisible() and w.text() and w.width() > 0]
    rects = [(w, window_rect(w)) for w in labels]
    for i, (a, ra) in enumerate(rects):
        for b, rb in rects[i + 1:]:
            if a.isAncestorOf(b) or b.isAncestorOf(a):
                continue
            assert not ra.intersects(rb), f"{where}: labels {a.text()!r} and {b.text()!r} overlap"


@pytest.mark.parametrize(("model", "size", "words"), [("twelve_heads", (1280, 800), 1),
                                                       ("twelve_heads", (1280, 800), 30),
                                                       ("twelve_heads", (1600, 1000), 30),
                                                       ("deep_wide", (1280, 800), 8)])
def test_every_panel_is_readable(qtbot, make_window, request, model, size, words):
    prompt = " ".join((PROMPT.split() * 10)[:words])
    window = open_at(qtbot, make_window, request.getfixturevalue(model), *size, prompt=prompt)
    cfg = window.trace.config
    assert window.trace.n_tokens >= words
    axes = 0
    for dock in window.docks:
        dock.show()
        dock.raise_()
        settle(qtbot, 250)
        assert not dock.showing_placeholder
        where = f"{dock.windowTitle()} at {size[0]}x{size[1]}"
        for view in dock.findChildren(pg.GraphicsView):
            if view.isVisible():
                axes += check_graphics_view(view, where)
        for heatmap in dock.findChildren(Heatmap):
            if heatmap.isVisible():
                assert heatmap.colorbar.isVisible(), f"{where}: a heatmap without its colour bar"
                assert heatmap.height() >= 140 and heatmap.width() >= 200, f"{where}: a squashed heatmap"
        check_labels(dock, where)
    assert axes >= 10  # the checks above really looked at the plots
    for dock in window.docks:  # nothing wider than its dock: no sideways scrolling
        area = dock.findChild(QScrollArea)
        if area is not None and dock.isVisible():
            assert area.widget().width() <= area.viewport().width() + 1, f"{dock.windowTitle()} scrolls sideways"

    attention = next(p for p in window.panels if hasattr(p, "statistics_table"))
    next(d for d in window.docks if d.panel is attention).raise_()
    settle(qtbot, 250)
    table = attention.statistics_table
    assert table.isVisible() and table.model().rowCount() == cfg.n_layers * cfg.n_heads
    viewport = table.viewport().rect()
    for row in range(3):  # the header and at least three whole rows are on screen
        assert viewport.contains(table.visualRect(table.model().index(row, 2))), "statistics rows hidden"
    overview_labels = attention.overview_plot.getAxis("top").label_rects()
    assert 2 <= len(overview_labels) <= cfg.n_heads
    value = table.model().index(0, 2)
    assert table.fontMetrics().horizontalAdvance(value.data()) <= table.visualRect(value).width(), "value cut"


def test_computing_state_follows_the_request_it_belongs_to(qtbot, make_window, twelve_heads, monkeypatch):
    window = make_window()
    with qtbot.waitSignal(window.trace_applied, timeout=60_000):
        window.open_checkpoint(str(twelve_heads))
    state = window.window_state
    assert not state.computing and not state.label.isVisible()
    shown = window.prompt.text()
    assert state.shown_text == shown and f"({state.shown_tokens} token" in window.windowTitle()

    gate = threading.Event()
    original = window.loaded.trace_ids

    def slow(ids, *args, **kwargs):
        gate.wait(30)
        return original(ids, *args, **kwargs)

    monkeypatch.setattr(window.loaded, "trace_ids", slow)
    window.set_prompt("The first new prompt")
    assert state.computing and state.requested_text == "The first new prompt"
    assert state.label.isVisible() and "computing" in state.label.text()
    assert "computing" in window.windowTitle() and state.shown_text == shown  # still the old trace
    window.set_prompt("The second new prompt")  # replaces the first while it runs
    first_ids = window.controller.latest_id
    gate.set()
    with qtbot.waitSignal(window.trace_applied, timeout=60_000):
        pass
    # the first request's result was stale and dropped; only the second one's clears the state
    assert window.trace.meta is not None and state.shown_text == "The second new prompt"
    assert state.shown_request == first_ids and not state.computing and not state.label.isVisible()
    assert "computing" not in window.windowTitle() and "The second new prompt" in window.windowTitle()

    with qtbot.waitSignal(window.controller.failed, timeout=30_000):
        window.prompt.edit.clear()  # typing it away: the empty prompt has its own state
    assert state.empty and "Empty prompt" in state.label.text() and "The second new prompt" in state.label.text()
    assert window.prompt.count.text() == "<b>0</b> tokens" and not state.computing


def test_placeholders_before_the_first_trace_and_the_model_ticked(qtbot, make_window, twelve_heads):
    window = make_window()
    assert all(dock.showing_placeholder for dock in window.docks)
    with qtbot.waitSignal(window.trace_applied, timeout=60_000):
        window.open_checkpoint(str(twelve_heads))
    assert not any(dock.showing_placeholder for dock in window.docks)
    window.menus.fill_models()
    checked = [a.text() for a in window.menus.models_menu.actions() if a.isChecked()]
    assert checked == ["twelve"]  # a checkpoint from disk, named and ticked


def test_a_model_that_cannot_read_the_prompt_asks_before_replacing_it(qtbot, window, monkeypatch):
    from explorer.ui.window import window_state

    window.set_prompt("my own carefully typed text")
    asked = []
    monkeypatch.setattr(window_state.QMessageBox, "question",
                        lambda *args: asked.append(args[2]) or window_state.QMessageBox.StandardButton.No)
    with qtbot.waitSignal(window.model_loaded, timeout=60_000):
        window.open_checkpoint("worked-example")
    assert asked and "cannot read" in asked[0]
    assert window.prompt.text() == "my own carefully typed text"  # "No" keeps it
