"""The Attention panel on hybrid models (tiny random Qwen3.5-, LFM2- and Mamba-2-hybrid-shaped models, built in
memory): a recurrent layer's effective attention where an attention layer shows its pattern, the title naming the
kind of layer, a diverging colour map; the all-heads grid, the head statistics and the induction score read it;
long prompts through tiles."""

from __future__ import annotations

import numpy as np
import pytest
from hybrid_models import open_hybrid
from PySide6.QtCore import QPointF, Qt
from screen import exported

from explorer.core.analysis import attention as analysis
from explorer.core.analysis.effective_tiles import row_shares
from explorer.core.analysis.layer_maps import grid_maps
from explorer.core.mixers.effective import effective_block
from explorer.ui.window.docks import dock_of

pytest.importorskip("transformers")


def attention_panel(qtbot, window):
    panel = window.panel("attention")
    dock_of(panel).raise_()
    qtbot.waitUntil(lambda: panel.trace is window.trace and window.presenter.is_idle(), timeout=60_000)
    return panel


def click_tile(qtbot, panel, layer: int, head: int) -> None:
    """A left click on the tile of (layer, head) in the all-heads grid, as a user makes it."""
    scene = panel.overview_image.mapToScene(QPointF(*panel.geometry.tile_center(layer, head)))
    qtbot.mouseClick(panel.overview.viewport(), Qt.MouseButton.LeftButton, pos=panel.overview.mapFromScene(scene))
    qtbot.waitUntil(lambda: not panel.redraw_pending and panel.layer_head() == (layer, head))


def title(plot) -> str:
    return plot.titleLabel.full_text


def test_a_deltanet_layer_shows_its_effective_attention(qtbot, make_window):
    window = open_hybrid(qtbot, make_window, "qwen35")
    panel = attention_panel(qtbot, window)
    trace, n = window.trace, window.trace.n_tokens
    click_tile(qtbot, panel, 1, 2)
    expected = effective_block(trace, 1, [2])[0]
    np.testing.assert_allclose(panel.detail.matrix, expected, atol=1e-6)
    np.testing.assert_allclose(panel.detail.image.image, np.where(panel.detail.masked, panel.detail.levels[0],
                                                                  expected), atol=1e-6)
    assert "L1 H2: Gated DeltaNet" in title(panel.detail.plot)
    assert "effective attention (can be negative)" in title(panel.detail.plot)
    lo, hi = panel.detail.levels
    assert lo == pytest.approx(-hi) and hi > 0 and panel.detail.symmetric  # diverging: 0 in the middle
    assert (expected < 0).any()  # a real DeltaNet: some weights are negative
    assert panel.detail.masked[2, 3] and not panel.detail.masked[3, 2]  # later keys hatched
    assert "effective weight" in panel.detail.cell_text(5, 2)
    assert not panel.kind_buttons["scores"].isEnabled() and "Gated DeltaNet" in panel.kind_buttons["scores"].toolTip()
    np.testing.assert_allclose(panel.row_values, expected[n - 1], atol=1e-6)  # the last query's row as bars
    assert "Gated DeltaNet effective weight" in title(panel.row_plot.getPlotItem())
    np.testing.assert_allclose(exported(panel, "attention, selected head"), expected, atol=1e-6)

    click_tile(qtbot, panel, 3, 1)  # the attention layer: its pattern, the buttons back
    np.testing.assert_allclose(panel.detail.matrix, trace.head(3, 1, "pattern"), atol=1e-7)
    assert "L3 H1: attention pattern" in title(panel.detail.plot) and "full attention" in title(panel.detail.plot)
    assert panel.kind_buttons["scores"].isEnabled() and panel.detail.levels[0] == 0.0


def test_the_all_heads_grid_and_the_statistics_read_the_effective_attention(qtbot, make_window):
    window = open_hybrid(qtbot, make_window, "qwen35")
    panel = attention_panel(qtbot, window)
    trace, n = window.trace, window.trace.n_tokens
    geo = panel.geometry
    assert (geo.n_layers, geo.n_heads, geo.factor) == (4, 4, 1)
    for layer, head in ((0, 0), (2, 3)):
        x, y = geo.tile_origin(layer, head)
        shares = row_shares(effective_block(trace, layer, [head])[0])
        np.testing.assert_allclose(panel.mosaic[y:y + n, x:x + n], shares, atol=1e-6)
    x, y = geo.tile_origin(3, 2)
    np.testing.assert_allclose(panel.mosaic[y:y + n, x:x + n], trace.head(3, 2), atol=1e-6)
    assert "Gated DeltaNet" in panel.overview_text(0, 1, 5, 3) and "share of |effective weights|" in \
        panel.overview_text(0, 1, 5, 3)
    assert "Gated DeltaNet" in panel.info.text()

    panel.show_statistics(True)
    panel.set_statistic("induction")
    qtbot.waitUntil(lambda: window.presenter.is_idle() and panel.statistics.matrix.shape == (4, 4), timeout=30_000)
    values = panel.statistics.matrix
    ids = np.asarray(trace.token_ids)
    for layer, head in ((0, 1), (1, 3)):
        shares = row_shares(effective_block(trace, layer, [head])[0])
        assert values[layer, head] == pytest.approx(analysis.induction_score(shares, ids), abs=1e-6)
    assert values[3, 0] == pytest.approx(analysis.induction_score(trace.head(3, 0), ids), abs=1e-6)
    assert panel.statistics_table.model().rowCount() == 16
    # a head statistic's cell is a click away from its map
    panel.statistics.cell_clicked.emit(2, 1)
    qtbot.waitUntil(lambda: not panel.redraw_pending)
    assert "L2 H1: Gated DeltaNet" in title(panel.detail.plot)


def test_a_convolutions_channels_and_a_mamba_layers_heads(qtbot, make_window):
    window = open_hybrid(qtbot, make_window, "lfm2")
    panel = attention_panel(qtbot, window)
    trace = window.trace
    assert window.layer_head.head.maximum() == 31  # 32 channels: every one can be chosen
    assert panel.geometry.n_heads == 4 and grid_maps(trace.config, 0) == 4  # the grid: as many as the attention heads
    window.selection.set_layer_head(0, 20)
    qtbot.waitUntil(lambda: not panel.redraw_pending and window.presenter.is_idle())
    expected = effective_block(trace, 0, [20])[0]
    np.testing.assert_allclose(panel.detail.matrix, expected, atol=1e-6)
    assert "L0 channel 20: short convolution" in title(panel.detail.plot)
    assert np.count_nonzero(np.tril(expected, -3)) == 0  # a band three tokens wide
    window.selection.set_layer(1)  # an attention layer of 4 heads: the head is clamped to its last
    qtbot.waitUntil(lambda: not panel.redraw_pending)
    assert panel.layer_head() == (1, 3) and "L1 H3: attention pattern" in title(panel.detail.plot)
    window.close()

    window = open_hybrid(qtbot, make_window, "granite")
    panel = attention_panel(qtbot, window)
    click_tile(qtbot, panel, 0, 5)
    np.testing.assert_allclose(panel.detail.matrix, effective_block(window.trace, 0, [5])[0], atol=1e-6)
    assert "L0 H5: Mamba-2" in title(panel.detail.plot)


def test_a_long_prompts_recurrent_head_is_drawn_from_tiles(qtbot, make_window):
    words = "the cat sat on the mat and the dog lay on the rug while".split()
    prompt = " ".join(words[i % len(words)] for i in range(560))
    window = open_hybrid(qtbot, make_window, "qwen35", prompt)
    panel = attention_panel(qtbot, window)
    trace, n = window.trace, window.trace.n_tokens
    assert n > 512
    window.selection.set_layer_head(0, 1)
    view = panel.long_detail
    qtbot.waitUntil(lambda: window.presenter.is_idle() and view.layer == 0 and view.head == 1
                    and view.kind == "effective", timeout=60_000)
    assert panel.detail_stack.currentWidget() is view
    assert "L0 H1: Gated DeltaNet" in title(view.plot)
    view.plot.setRange(xRange=(100, 160), yRange=(200, 260), padding=0)  # zoom in: exact tiles
    qtbot.waitUntil(lambda: view.tile_rect is not None, timeout=10_000)
    r0, r1, c0, c1 = view.tile_rect
    exact = effective_block(trace, 0, [1], (r0, r1), (c0, c1))[0]
    later = np.arange(c0, c1)[None, :] > np.arange(r0, r1)[:, None]
    np.testing.assert_allclose(np.where(later, 0.0, view.tile_values), exact, atol=1e-6)
    assert np.isnan(view.tile_values[later]).all()
    qtbot.waitUntil(lambda: panel.row_values.shape == (n,) and window.presenter.is_idle(), timeout=30_000)
    np.testing.assert_allclose(panel.row_values, effective_block(trace, 0, [1], (n - 1, n))[0, 0], atol=1e-6)


def test_only_attention_heads_are_offered_to_switch_off_and_what_changed_follows(qtbot, make_window):
    from right_click import right_click_menu

    window = open_hybrid(qtbot, make_window, "qwen35")
    panel = attention_panel(qtbot, window)

    def tile(layer: int, head: int):
        return lambda: panel.overview_image.mapToScene(QPointF(*panel.geometry.tile_center(layer, head)))

    texts = right_click_menu(qtbot, panel.overview, tile(0, 1))  # a DeltaNet head: nothing to switch off
    assert not any(t.startswith(("Switch off", "Mean-ablate")) for t in texts) and "Copy data" in texts
    with qtbot.waitSignal(window.trace_applied, timeout=60_000):
        right_click_menu(qtbot, panel.overview, tile(3, 1), choose="Switch off head 3.1")
    trace = window.trace
    assert [iv.key for iv in trace.interventions] == [("head", 3, 1, "zero", None)]
    assert not trace["blocks.3.attn.z"][1].any() and trace["blocks.3.attn.z"][0].any()
    changed = window.panel("what_changed")
    dock_of(changed).raise_()
    qtbot.waitUntil(lambda: changed.trace is window.trace and window.presenter.is_idle(), timeout=60_000)
    baseline = window.session.baseline_of(trace)
    assert baseline is not None and not np.allclose(trace["logits"][-1], baseline["logits"][-1])
    np.testing.assert_array_equal(trace["blocks.3.resid_pre"], baseline["blocks.3.resid_pre"])  # only layer 3 on
    assert np.abs(exported(changed, "what changed: residual stream difference")).max() > 0  # what the panel draws
