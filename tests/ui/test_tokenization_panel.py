"""The tokenization panel: chips, selection both ways, raw bytes, the alternate encoding."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import Qt

from explorer.core.tokenize.base import gpt2_tokenizer
from explorer.core.tokenize.display import PARTIAL_COLOUR, visible_whitespace
from explorer.ui.panels.tokenization import GPT2, TokenizationPanel
from explorer.ui.session.selection import Selection


@pytest.fixture
def make_panel(qtbot):
    def make(loaded, text):
        panel = TokenizationPanel(Selection())
        qtbot.addWidget(panel)
        panel.resize(700, 420)
        panel.show()
        qtbot.waitExposed(panel)
        panel.set_tokenizer(loaded.tokenizer)
        trace = loaded.trace(text)
        panel.set_trace(trace)
        return panel, trace

    return make


def test_chips_are_the_traces_tokens_and_ids(make_panel, tiny_loaded):
    panel, trace = make_panel(tiny_loaded, "Hello world,\n\tthe cat sat.")
    chips = panel.chips.chips
    assert [c.token_id for c in chips] == [int(i) for i in trace.token_ids]
    assert panel.chips.labels() == [visible_whitespace(t) for t in trace.tokens]
    assert any("·" in label for label in panel.chips.labels())  # " world" shows its space
    assert any("↵" in label for label in panel.chips.labels())
    assert f"<b>{trace.n_tokens}</b> tokens" in panel.count.text()
    assert "position 1" in chips[1].tooltip and f"id {chips[1].token_id}" in chips[1].tooltip


def test_clicking_a_chip_selects_that_token(qtbot, make_panel, tiny_loaded):
    panel, trace = make_panel(tiny_loaded, "one two three four")
    rect = panel.chips.chip_rect(2)
    qtbot.mouseClick(panel.chips, Qt.MouseButton.LeftButton, pos=rect.center())
    assert panel.selection.token == 2
    assert panel.chips.selected == 2
    vector, _, _ = panel.exportables()[0].data()
    assert vector.shape == (trace.config.vocab_size,)
    assert np.flatnonzero(vector).tolist() == [int(trace.token_ids[2])]


def test_a_selection_made_elsewhere_highlights_the_chip(make_panel, tiny_loaded):
    panel, trace = make_panel(tiny_loaded, "one two three four")
    panel.selection.set_token(3)
    assert panel.chips.selected == 3
    x, y = panel.spike.getData()
    assert list(x) == [int(trace.token_ids[3])] * 2 and list(y) == [0, 1]
    assert "token 3" in panel.plot.getPlotItem().titleLabel.text


def test_partial_utf8_tokens_show_their_bytes(make_panel, tiny_loaded):
    panel, trace = make_panel(tiny_loaded, "a 🦜 parrot")
    partial = [c for c in panel.chips.chips if c.partial]
    assert partial, "GPT-2 splits the parrot emoji's four bytes across tokens"
    for chip in partial:
        assert "\\x" in chip.label and chip.label.lstrip("·").startswith("\\x")
        assert chip.colour == PARTIAL_COLOUR
        assert "partial UTF-8" in chip.tooltip
    assert b"".join(c.data for c in panel.chips.chips).decode("utf-8") == "a 🦜 parrot"


def test_alternate_encoding_count_is_gpt2s(qtbot, make_panel, worked_loaded):
    text = "Today is sunday"
    panel, trace = make_panel(worked_loaded, text)
    assert panel.encoding.count() == 2
    panel.encoding.setCurrentIndex(panel.encoding.findData(GPT2))
    expected = gpt2_tokenizer().encode(text)
    assert f"<b>{len(expected)}</b> tokens" in panel.alt_count.text()
    assert [c.token_id for c in panel.chips.chips] == expected
    assert not panel.chips.interactive  # display only: clicking selects nothing
    qtbot.mouseClick(panel.chips, Qt.MouseButton.LeftButton, pos=panel.chips.chip_rect(0).center())
    assert panel.selection.token is None
    panel.encoding.setCurrentIndex(0)
    assert [c.token_id for c in panel.chips.chips] == [int(i) for i in trace.token_ids]


def test_a_gpt2_model_offers_no_duplicate_encoding(make_panel, tiny_loaded):
    panel, _ = make_panel(tiny_loaded, "hello")
    assert panel.encoding.count() == 1 and not panel.encoding.isEnabled()


def test_the_explanation_toggle(make_panel, tiny_loaded):
    panel, _ = make_panel(tiny_loaded, "hello")
    assert panel.explain_button.isVisible() and not panel.explain_text.isVisible()
    panel.explain_button.click()
    assert panel.explain_text.isVisible()
    assert "Tokenization" in panel.explain_text.toPlainText()


def test_a_legend_says_what_the_chip_colours_mean(make_panel, tiny_loaded):
    from explorer.core.tokenize.display import CHIP_COLOURS, SPECIAL_COLOUR

    panel, trace = make_panel(tiny_loaded, "Hello world")
    legend = panel.legend.text()
    assert panel.legend.isVisible()
    assert all(colour in legend for colour in (*CHIP_COLOURS, SPECIAL_COLOUR, PARTIAL_COLOUR))
    assert "alternate only to show where one token ends" in legend
    assert {c.colour for c in panel.chips.chips} <= set(CHIP_COLOURS)  # the colours the legend explains


def test_a_token_switch_keeps_the_baseline_and_range_and_a_zoomed_view_is_set_back(make_panel, tiny_loaded,
                                                                                  monkeypatch):
    panel, trace = make_panel(tiny_loaded, "one two three four")
    item = panel.plot.getPlotItem()
    vocab = trace.config.vocab_size
    panel.selection.set_token(1)
    x_range = item.getViewBox().viewRange()[0]
    calls = []
    monkeypatch.setattr(panel.baseline, "setData", lambda *a, **k: calls.append("baseline"))
    set_x = item.setXRange
    monkeypatch.setattr(item, "setXRange", lambda *a, **k: (calls.append("range"), set_x(*a, **k)))
    panel.selection.set_token(2)  # the same vocabulary: baseline and range kept
    assert calls == [] and item.getViewBox().viewRange()[0] == x_range
    assert list(panel.spike.getData()[0]) == [int(trace.token_ids[2])] * 2
    item.getViewBox().setXRange(3, 9, padding=0)  # the user zooms in: the next switch sets the range again
    panel.selection.set_token(3)
    assert calls == ["range"] and item.getViewBox().viewRange()[0] == x_range
    assert x_range == pytest.approx([-0.02 * (vocab - 1), (vocab - 1) * 1.02])


def test_set_x_range_sets_a_new_range_and_skips_only_the_one_it_set_still_shown(qtbot):
    import pyqtgraph as pg

    from explorer.ui.widgets.plots import set_x_range

    widget = pg.PlotWidget()
    qtbot.addWidget(widget)
    vb = widget.getViewBox()
    calls = []
    set_x = widget.getPlotItem().setXRange
    widget.getPlotItem().setXRange = lambda *a, **k: (calls.append(a), set_x(*a, **k))
    set_x_range(widget.getPlotItem(), 0, 10)
    set_x_range(widget.getPlotItem(), 0, 10)
    assert len(calls) == 1 and vb.viewRange()[0] == [0, 10]
    set_x_range(widget.getPlotItem(), 0, 12)  # another range
    set_x_range(widget.getPlotItem(), 0, 12, padding=0.1)  # another padding
    assert len(calls) == 3 and vb.viewRange()[0] == pytest.approx([-1.2, 13.2])
    vb.enableAutoRange(x=True)  # auto-ranging since: set again
    set_x_range(widget.getPlotItem(), 0, 12, padding=0.1)
    assert len(calls) == 4 and not vb.state["autoRange"][0]
