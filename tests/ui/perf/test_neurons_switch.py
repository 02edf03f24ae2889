"""A layer switch in the FFN neurons panel whose layer is not scanned yet (large n × d_ff) computes it
in the background: the heatmap says "computing…" and shows nothing of the old layer, then draws the
new layer's exact values; a token switch keeps the heatmap's image item and updates the table's items."""

from __future__ import annotations

import numpy as np
import pytest

import explorer.ui  # noqa: F401  (binds pyqtgraph to PySide6)
from explorer.core.analysis.neurons import top_neurons
from explorer.ui.panels.neurons import detail as neurons_detail
from explorer.ui.panels.neurons import panel as neurons_panel

from tests.ui.test_neurons_panel import GPT2_PROMPT, make_panel


@pytest.fixture(scope="module")
def gpt2(tiny_gpt2):
    loaded, _ = tiny_gpt2
    return loaded, loaded.trace(GPT2_PROMPT)


def test_a_layer_not_scanned_yet_is_computed_in_the_background_then_drawn_exactly(qtbot, gpt2, monkeypatch):
    loaded, trace = gpt2
    monkeypatch.setattr(neurons_panel, "LAYER_NOW_ELEMENTS", 0)  # every layer "large"
    panel = make_panel(qtbot, trace, loaded.tokenizer, layer=0, show=True)
    assert trace.memo_get(("neurons.layer", 2)) is None
    image = panel.heatmap.image
    panel.selection.set_layer(2)
    assert panel.computing() and not image.isVisible()
    assert "L2" in panel.heatmap.plot.titleLabel.text and "computing" in panel.heatmap.plot.titleLabel.text
    qtbot.waitUntil(lambda: not panel.computing())
    assert panel.heatmap.image is image and image.isVisible()
    post = np.asarray(trace["blocks.2.mlp.post"], dtype=np.float32)
    np.testing.assert_array_equal(panel.heatmap.matrix, post[:, panel._columns])
    assert "computing" not in panel.heatmap.plot.titleLabel.text
    panel.selection.set_layer(0)  # scanned already: drawn at once
    assert not panel.computing() and image.isVisible()
    np.testing.assert_array_equal(panel.heatmap.matrix,
                                  np.asarray(trace["blocks.0.mlp.post"], dtype=np.float32)[:, panel._columns])


def test_a_token_switch_keeps_the_image_item_and_the_ranked_tables_items(qtbot, gpt2):
    loaded, trace = gpt2
    panel = make_panel(qtbot, trace, loaded.tokenizer, layer=1, show=True)
    image, first = panel.heatmap.image, panel.ranked.item(0, 1)
    heights = panel.bars.opts["height"]
    panel.selection.set_token(4)
    assert panel.heatmap.image is image and panel.ranked.item(0, 1) is first
    assert panel.bars.opts["height"] is heights  # the same neuron's bars stay; the selected one's outline moves
    post = np.asarray(trace["blocks.1.mlp.post"], dtype=np.float32)
    mark = panel.detail.bar_mark.opts
    assert list(mark["x"]) == [4.5] and list(mark["height"]) == [post[4, panel.selected_neuron]]
    np.testing.assert_array_equal(heights, post[:, panel.selected_neuron])
    ids, values = top_neurons(np.asarray(trace["blocks.1.mlp.post"], dtype=np.float32), 4, panel.ranked.rowCount())
    assert [panel.ranked.item(r, 1).text() for r in range(len(ids))] == [f"#{j}" for j in ids.tolist()]
    assert [panel.ranked.item(r, 2).text() for r in range(len(ids))] == [f"{v:.4f}" for v in values.tolist()]


def test_a_layer_switch_with_the_same_d_ff_leaves_the_top_k_box_alone(qtbot, gpt2, counter):
    """setMaximum with the same value re-lays out the whole panel (a repaint of the dock): skipped."""
    loaded, trace = gpt2
    panel = make_panel(qtbot, trace, loaded.tokenizer, layer=0, show=True)
    spin, d_ff = panel.top_k_spin, trace.config.d_ff
    assert spin.maximum() == d_ff and spin.value() == min(panel.top_k, d_ff)
    calls = counter.calls(spin, "setMaximum")
    panel.selection.set_layer(1)
    assert calls == [] and spin.maximum() == d_ff and spin.value() == min(panel.top_k, d_ff)
    post = np.asarray(trace["blocks.1.mlp.post"], dtype=np.float32)
    np.testing.assert_array_equal(panel.heatmap.matrix, post[:, panel._columns])  # the new layer all the same


def test_a_layer_switch_refills_the_vocabulary_table_in_place(qtbot, gpt2, monkeypatch):
    """The vocabulary effect computed in the background: the table keeps its rows and items (blank meanwhile,
    never another neuron's), its number columns keep their widths."""
    from explorer.ui.panels.neurons import detail

    loaded, trace = gpt2
    monkeypatch.setattr(detail, "VOCAB_NOW_MACS", 0)  # every vocabulary effect in the background
    panel = make_panel(qtbot, trace, loaded.tokenizer, layer=0, show=True)
    qtbot.waitUntil(lambda: not panel.computing() and panel.vocab_effect() is not None)
    table = panel.vocab
    first, widths = table.item(0, 0), [table.columnWidth(c) for c in (1, 3)]
    removed = []
    table.model().rowsRemoved.connect(lambda *a: removed.append(a))
    table.model().rowsInserted.connect(lambda *a: removed.append(a))
    panel.selection.set_layer(2)
    if panel.vocab_effect() is None:  # computing: blank rows, not the old neuron's
        assert all(table.item(r, c).text() == "" for r in range(table.rowCount()) for c in range(4))
        assert "computing" in panel.vocab_title.text()
    qtbot.waitUntil(lambda: not panel.computing() and panel.vocab_effect() is not None)
    assert removed == [] and table.item(0, 0) is first and [table.columnWidth(c) for c in (1, 3)] == widths
    up_ids, up, down_ids, down = panel.vocab_effect()
    assert [table.item(r, 1).text() for r in range(len(up))] == [f"{v:+.4f}" for v in up.tolist()]
    assert [table.item(r, 3).text() for r in range(len(down))] == [f"{v:+.4f}" for v in down.tolist()]
    assert "computing" not in panel.vocab_title.text() and "L2" in panel.vocab_title.text()


def test_a_layer_switch_on_the_same_tokens_keeps_the_limits_the_bars_x_range_and_their_ticks(qtbot, gpt2, counter):
    """pyqtgraph's setLimits, setXRange and the thinning of the bars' token labels: skipped when they
    would set what is there already; the new layer's bars and heatmap are drawn all the same."""
    loaded, trace = gpt2
    panel = make_panel(qtbot, trace, loaded.tokenizer, layer=0, show=True)
    detail, vb = panel.detail, panel.heatmap.plot.vb
    limits, x_range = dict(vb.state["limits"]), detail.bars_plot.getViewBox().viewRange()[0]
    ticks = detail.bars_plot.getAxis("bottom")._tickLevels
    limits_set, range_set = counter.calls(vb, "setLimits"), counter.calls(detail.bars_plot, "setXRange")
    ticks_made = counter.calls(neurons_detail, "thinned_ticks")
    panel.selection.set_layer(1)
    assert (limits_set, range_set, ticks_made) == ([], [], [])
    assert dict(vb.state["limits"]) == limits and detail.bars_plot.getViewBox().viewRange()[0] == x_range
    assert detail.bars_plot.getAxis("bottom")._tickLevels == ticks
    post = np.asarray(trace["blocks.1.mlp.post"], dtype=np.float32)
    np.testing.assert_array_equal(panel.heatmap.matrix, post[:, panel._columns])
    np.testing.assert_array_equal(panel.bars.opts["height"], post[:, panel.selected_neuron])


def test_the_neuron_bars_share_one_no_pen_and_draw_the_pixels_a_pen_per_bar_drew(qtbot, gpt2):
    import pyqtgraph as pg

    from explorer.ui.panels.neurons.widgets import BAR_NEGATIVE, BAR_POSITIVE

    loaded, trace = gpt2
    panel = make_panel(qtbot, trace, loaded.tokenizer, layer=1, show=True)
    panel.selection.set_layer(2)
    post = np.asarray(trace["blocks.2.mlp.post"], dtype=np.float32)
    values = post[:, panel.selected_neuron]
    np.testing.assert_array_equal(panel.bars.opts["height"], values)
    assert panel.bars.opts["pens"] is None and [b is BAR_NEGATIVE for b in panel.bars.opts["brushes"]] == \
        [bool(v < 0) for v in values.tolist()]

    def pixels(**pen):  # the same bars in a plot of their own, drawn with the given pen option(s)
        widget = pg.PlotWidget()
        qtbot.addWidget(widget)
        widget.resize(500, 240)
        n = values.size
        brushes = [BAR_NEGATIVE if v < 0 else BAR_POSITIVE for v in values.tolist()]
        widget.addItem(pg.BarGraphItem(x=np.arange(n) + 0.5, height=values, width=0.8, brushes=brushes, **pen))
        widget.setXRange(0, n, padding=0.01)
        widget.setYRange(float(values.min()), float(values.max()), padding=0.05)
        image = widget.grab().toImage()
        return np.array(image.constBits()).copy()

    assert np.array_equal(pixels(pens=None, pen=neurons_detail.NO_PEN), pixels(pens=[pg.mkPen(None)] * values.size))


def test_a_token_switch_lays_no_plot_out_again(qtbot, gpt2, counter):
    """A token switch changes numbers, not sizes: the heatmap and the bars (and their axes) ask for no new
    layout (the ranked tables' rows do change)."""
    from PySide6.QtCore import QEvent
    from PySide6.QtWidgets import QApplication, QWidget

    loaded, trace = gpt2
    panel = make_panel(qtbot, trace, loaded.tokenizer, layer=1, show=True)
    qtbot.waitUntil(lambda: not panel.computing())
    QApplication.processEvents()
    plots = [panel.heatmap, panel.detail.bars_plot]
    layouts = [counter.events(widget, QEvent.Type.LayoutRequest)
               for plot in plots for widget in [plot, *plot.findChildren(QWidget)]]
    panel.selection.set_token(5)
    QApplication.processEvents()
    assert sum(len(seen) for seen in layouts) == 0
    post = np.asarray(trace["blocks.1.mlp.post"], dtype=np.float32)
    assert list(panel.detail.bar_mark.opts["height"]) == [post[5, panel.selected_neuron]]  # the switch was drawn
