"""The attention panel: overview mosaic, detail heatmap (pattern and scores), query-row bars,
head statistics and exports, on the worked example (1 layer, 1 head, bidirectional) and a tiny
random GPT-2 (3 layers, 4 heads, causal)."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
import pytest
from PySide6.QtCore import QPointF, Qt

import explorer.ui  # noqa: F401  (binds pyqtgraph to PySide6)
from explorer.core.analysis import attention as analysis
from explorer.core.checkpoint import load_checkpoint
from explorer.core.worked_example import PROMPT
from explorer.ui.panels.attention import AttentionPanel
from explorer.ui.panels.attention import views as attention_views
from explorer.ui.session.selection import Selection

GPT2_PROMPT = "The cat sat on the mat. The dog sat on the log. The cat sat on the mat"


@pytest.fixture(scope="module")
def gpt2_trace(tiny_gpt2):
    loaded, _ = tiny_gpt2
    trace = loaded.trace(GPT2_PROMPT)
    assert trace.n_tokens == 20 and trace.config.n_layers == 3 and trace.config.n_heads == 4
    return trace


@pytest.fixture(scope="module")
def worked_trace():
    return load_checkpoint("worked-example", device="cpu").trace(PROMPT)


def make_panel(qtbot, trace, show: bool = False) -> AttentionPanel:
    selection = Selection()
    panel = AttentionPanel(selection)
    qtbot.addWidget(panel)
    trace.materialize(panel.needed_keys(trace, panel.snapshot()))  # what the worker does before the GUI draws
    selection.clamp(trace.config.n_layers, trace.config.n_heads, trace.n_tokens)
    panel.set_trace(trace)
    if show:
        panel.resize(1200, 700)
        panel.show()
        qtbot.waitExposed(panel)
    return panel


def select(qtbot, panel: AttentionPanel, layer: int, head: int) -> None:
    """Select a head as the window does and let the panel's coalesced redraw run."""
    panel.selection.set_layer_head(layer, head)
    qtbot.waitUntil(lambda: not panel.redraw_pending)


def test_detail_shows_the_selected_heads_pattern(qtbot, gpt2_trace):
    panel = make_panel(qtbot, gpt2_trace)
    for layer, head in ((0, 0), (2, 3), (1, 2)):
        select(qtbot, panel, layer, head)
        pattern = gpt2_trace.head(layer, head, "pattern")
        np.testing.assert_array_equal(panel.detail.image.image, pattern)
        np.testing.assert_array_equal(panel.detail.matrix, pattern)
        assert panel.detail.levels == (0.0, pytest.approx(float(pattern.max())))
        assert f"L{layer} H{head}" in panel.detail.plot.titleLabel.text
    assert panel.detail.row_labels == list(gpt2_trace.tokens) == panel.detail.col_labels


def test_changing_layer_and_head_draws_the_detail_once(qtbot, gpt2_trace, monkeypatch):
    panel = make_panel(qtbot, gpt2_trace)
    calls = []
    original = panel.detail.set_data
    monkeypatch.setattr(panel.detail, "set_data", lambda *a, **k: (calls.append(1), original(*a, **k)))
    panel.selection.set_layer_head(2, 1)  # emits "layer" then "head"
    assert panel.redraw_pending and calls == []
    x, y = panel.geometry.tile_origin(2, 1)  # the outline moves at once
    assert panel.selected_outline.rect().contains(QPointF(x + 1, y + 1))
    qtbot.waitUntil(lambda: not panel.redraw_pending)
    assert len(calls) == 1
    np.testing.assert_array_equal(panel.detail.image.image, gpt2_trace.head(2, 1, "pattern"))


def test_worked_example_single_head(qtbot, worked_trace):
    panel = make_panel(qtbot, worked_trace)
    pattern = worked_trace.head(0, 0, "pattern")
    np.testing.assert_array_equal(panel.detail.image.image, pattern)
    assert not panel.detail.masked.any()  # bidirectional: nothing is masked
    assert panel.mosaic.shape == (3, 3) and panel.geometry.shape == (3, 3)
    np.testing.assert_allclose(panel.mosaic, pattern, rtol=1e-6)
    panel.set_kind("scores")
    scores = worked_trace.head(0, 0, "scores")
    np.testing.assert_array_equal(panel.detail.image.image, scores)
    assert not panel.detail.masked.any() and np.isfinite(scores).all()


def test_scores_view_flags_masked_cells(qtbot, gpt2_trace):
    panel = make_panel(qtbot, gpt2_trace)
    select(qtbot, panel, 1, 3)
    panel.set_kind("scores")
    assert panel.kind_buttons["scores"].isChecked()
    scores = gpt2_trace.head(1, 3, "scores")
    mask = np.isneginf(scores)
    assert mask.any() and mask.sum() == 20 * 19 // 2
    np.testing.assert_array_equal(panel.detail.matrix, scores)
    np.testing.assert_array_equal(panel.detail.masked, mask)
    np.testing.assert_array_equal(panel.detail.overlay_mask(), mask)  # the hatch covers exactly them
    np.testing.assert_array_equal(panel.detail.image.image[~mask], scores[~mask])
    lo, hi = panel.detail.levels
    assert lo == -hi and hi == pytest.approx(float(np.abs(scores[~mask]).max()))
    assert panel.detail.symmetric and panel.detail.colorbar.colorMap().name != "viridis"
    assert panel.detail.cell_text(0, 5) == "query 'The' (0) \u2192 key '\u00b7mat' (5): masked (future token)"
    assert panel.detail.cell_text(5, 1).startswith("query '\u00b7mat' (5) \u2192 key '\u00b7cat' (1): scaled score ")
    # the selection follows: another head keeps the scores view
    select(qtbot, panel, 1, 0)
    np.testing.assert_array_equal(panel.detail.matrix, gpt2_trace.head(1, 0, "scores"))
    panel.set_kind("pattern")
    np.testing.assert_array_equal(panel.detail.image.image, gpt2_trace.head(1, 0, "pattern"))
    value = float(gpt2_trace.head(1, 0, "pattern")[3, 2])
    assert panel.detail.cell_text(3, 2) == f"query '\u00b7on' (3) \u2192 key '\u00b7sat' (2): pattern {value:.6f}"


def test_overview_is_one_tiled_image(qtbot, gpt2_trace):
    panel = make_panel(qtbot, gpt2_trace)
    images = [item for item in panel.overview.scene().items() if isinstance(item, pg.ImageItem)]
    assert images == [panel.overview_image]
    geo = panel.geometry
    assert (geo.n_layers, geo.n_heads, geo.tile, geo.factor) == (3, 4, 20, 1)
    assert panel.overview_image.image.shape == geo.shape == (3 * 21 - 1, 4 * 21 - 1)
    for layer in range(3):
        for head in range(4):
            x, y = geo.tile_origin(layer, head)
            np.testing.assert_allclose(panel.mosaic[y:y + 20, x:x + 20], gpt2_trace.head(layer, head, "pattern"),
                                       rtol=1e-5, atol=1e-7)
    assert np.isnan(panel.mosaic[20, :]).all() and np.isnan(panel.mosaic[:, 20]).all()  # gaps
    ticks = panel.overview_plot.getAxis("left")._tickLevels[0]
    assert [label for _, label in ticks] == ["L0", "L1", "L2"]
    assert [label for _, label in panel.overview_plot.getAxis("top")._tickLevels[0]] == ["H0", "H1", "H2", "H3"]


def test_clicking_a_tile_selects_its_head(qtbot, gpt2_trace):
    panel = make_panel(qtbot, gpt2_trace, show=True)
    geo = panel.geometry
    for layer, head in ((2, 1), (0, 3), (1, 0)):
        scene = panel.overview_image.mapToScene(QPointF(*geo.tile_center(layer, head)))
        assert panel.head_at_scene(scene) == (layer, head)
    gap = panel.overview_image.mapToScene(QPointF(20.5, 5.0))
    assert panel.head_at_scene(gap) is None

    scene = panel.overview_image.mapToScene(QPointF(*geo.tile_center(2, 1)))
    view_pos = panel.overview.mapFromScene(scene)
    qtbot.mouseClick(panel.overview.viewport(), Qt.MouseButton.LeftButton, pos=view_pos)
    qtbot.waitUntil(lambda: (panel.selection.layer, panel.selection.head) == (2, 1) and not panel.redraw_pending)
    np.testing.assert_array_equal(panel.detail.image.image, gpt2_trace.head(2, 1, "pattern"))
    x, y = geo.tile_origin(2, 1)
    assert panel.selected_outline.rect().contains(QPointF(x + 10, y + 10))
    assert not panel.selected_outline.rect().contains(QPointF(*geo.tile_center(1, 1)))
    text = panel.overview_text(2, 1, 4, 3)
    assert text.startswith("L2 H1: query '\u00b7the' (4) \u2192 key '\u00b7on' (3): weight ")


def test_query_row_bars_follow_the_token_selection(qtbot, gpt2_trace):
    panel = make_panel(qtbot, gpt2_trace)
    select(qtbot, panel, 2, 2)
    pattern = gpt2_trace.head(2, 2, "pattern")
    np.testing.assert_array_equal(panel.row_bars.opts["height"], pattern[19])  # no token: the last one
    panel.selection.set_token(7)
    np.testing.assert_array_equal(panel.row_values, pattern[7])
    np.testing.assert_array_equal(panel.row_bars.opts["height"], pattern[7])
    np.testing.assert_array_equal(panel.row_bars.opts["x"], np.arange(20) + 0.5)
    assert "'\u00b7The' (7)" in panel.row_plot.getPlotItem().titleLabel.text
    ticks = panel.row_plot.getAxis("bottom")._tickLevels[0]
    assert ticks[0] == (0.5, "The") and len(ticks) == 20
    panel.detail.cell_clicked.emit(11, 3)  # clicking a cell selects its query row
    assert panel.selection.token == 11
    np.testing.assert_array_equal(panel.row_bars.opts["height"], pattern[11])
    panel.set_kind("scores")
    scores = gpt2_trace.head(2, 2, "scores")
    np.testing.assert_array_equal(panel.row_values, scores[11])
    np.testing.assert_array_equal(panel.row_bars.opts["height"], np.where(np.isneginf(scores[11]), 0, scores[11]))


def test_statistics_equal_head_statistics(qtbot, gpt2_trace):
    panel = make_panel(qtbot, gpt2_trace)
    assert not panel.statistics.isVisibleTo(panel)
    panel.show_statistics(True)
    assert panel.stats_toggle.isChecked() and panel.statistics.isVisibleTo(panel)
    for name in analysis.STATISTICS:
        panel.set_statistic(name)
        assert panel.stat_box.currentData() == name
        expected = analysis.head_statistics(gpt2_trace, name)
        np.testing.assert_array_equal(panel.statistics.matrix, expected)
        assert panel.statistics.row_labels == ["L0", "L1", "L2"]
        assert panel.statistics.col_labels == ["H0", "H1", "H2", "H3"]
        assert panel.statistics.value_name == analysis.STATISTIC_LABELS[name]
        assert len(panel.statistic_cells.texts) == 3 and len(panel.statistic_cells.texts[0]) == 4
        table = panel.statistics_table
        assert table.model().rowCount() == 12
        shown = [float(table.model().index(r, 2).data()) for r in range(12) if table.model().index(r, 2).data() != "\u2013"]
        assert shown == sorted(shown, reverse=True)  # sorted by value, highest first
        layer, head = table.head_at(0)
        finite = np.where(np.isfinite(expected), expected, -np.inf)
        assert expected[layer, head] == finite.max()
        assert table.model().index(0, 2).data() == f"{expected[layer, head]:.4f}"
    assert panel.statistic == "induction"  # the last one set
    value = analysis.head_statistics(gpt2_trace, "induction")[1, 2]
    assert panel.statistics.cell_text(1, 2) == f"L1 H2: induction score {value:.6f}"
    assert panel.overview_text(1, 2, 1, 0).endswith(f"\ninduction score: {value:.6f}")
    panel.statistics.cell_clicked.emit(2, 3)  # a statistics cell selects its head too
    assert (panel.selection.layer, panel.selection.head) == (2, 3)
    table = panel.statistics_table
    table.sortByColumn(0, Qt.SortOrder.AscendingOrder)  # by layer, then the rows are in head order
    assert [table.head_at(r) for r in range(4)] == [(0, 0), (0, 1), (0, 2), (0, 3)]
    table.head_clicked.emit(*table.head_at(5))  # a table row selects its head
    assert (panel.selection.layer, panel.selection.head) == (1, 1)
    panel.stat_box.setCurrentIndex(panel.stat_box.findData("previous_token"))
    np.testing.assert_array_equal(panel.statistics.matrix, analysis.head_statistics(gpt2_trace, "previous_token"))


def test_undefined_statistic_is_not_a_colour(qtbot, tiny_gpt2):
    trace = tiny_gpt2[0].trace("one two three four")  # no token repeats: induction is undefined
    panel = make_panel(qtbot, trace)
    panel.set_statistic("induction")
    panel.show_statistics(True)
    assert np.isnan(panel.statistics.matrix).all()
    assert panel.statistics.overlay_mask().all()  # hatched like masked cells
    assert panel.statistics.cell_text(0, 0) == "L0 H0: induction score undefined (no repeated tokens)"


def test_exportables_have_labelled_data(qtbot, gpt2_trace):
    panel = make_panel(qtbot, gpt2_trace)
    select(qtbot, panel, 1, 1)
    panel.selection.set_token(4)
    exports = {e.name: e for e in panel.exportables()}
    assert set(exports) == {"attention, all heads", "attention, selected head", "attention, selected query row",
                            "head statistics", "head statistics table"}
    labels = [f"{i}:{t}" for i, t in enumerate(gpt2_trace.tokens)]

    stack, rows, cols = exports["attention, all heads"].data()
    assert stack.shape == (3 * 4 * 20, 20) and len(rows) == 240 and cols == labels
    assert rows[0] == "L0 H0 0:The" and rows[20 * 6 + 3] == "L1 H2 3: on"
    np.testing.assert_allclose(stack[20 * 6:20 * 7], gpt2_trace.head(1, 2, "pattern"), rtol=1e-5, atol=1e-7)

    matrix, rows, cols = exports["attention, selected head"].data()
    np.testing.assert_array_equal(matrix, gpt2_trace.head(1, 1, "pattern"))
    assert rows == cols == labels

    vector, rows, cols = exports["attention, selected query row"].data()
    np.testing.assert_array_equal(vector, gpt2_trace.head(1, 1, "pattern")[4])
    assert vector.shape == (20,) and rows == labels and cols == ["pattern from query 4: the"]

    values, rows, cols = exports["head statistics"].data()
    np.testing.assert_array_equal(values, analysis.head_statistics(gpt2_trace, panel.statistic))
    assert values.shape == (3, 4) and rows == ["L0", "L1", "L2"] and cols == ["H0", "H1", "H2", "H3"]
    panel.show_statistics(True)
    column, rows, cols = exports["head statistics table"].data()  # the table's rows, in its order
    expected = analysis.head_statistics(gpt2_trace, panel.statistic)
    assert column.shape == (12,) and len(rows) == 12 and cols == [analysis.STATISTIC_LABELS[panel.statistic]]
    for value, row in zip(column, rows, strict=True):
        layer, head = (int(part[1:]) for part in row.split())
        np.testing.assert_equal(value, expected[layer, head])

    panel.set_kind("scores")
    matrix, _, _ = exports["attention, selected head"].data()
    np.testing.assert_array_equal(matrix, gpt2_trace.head(1, 1, "scores"))
    assert exports["attention, selected head"].item is panel.detail


def test_needed_keys_and_the_long_prompt_path(qtbot, gpt2_trace, monkeypatch):
    panel = make_panel(qtbot, gpt2_trace)
    assert panel.needed_keys(gpt2_trace, panel.snapshot()) == [f"blocks.{layer}.attn.pattern" for layer in range(3)]
    exact = panel.mosaic.copy()

    # a prompt too long to keep every layer's patterns: nothing precomputed, heads drawn one by one
    monkeypatch.setattr(attention_views, "LAYER_PATTERN_BUDGET", 0)
    assert panel.needed_keys(gpt2_trace, panel.snapshot()) == []
    panel.set_trace(gpt2_trace)
    np.testing.assert_allclose(panel.mosaic, exact, rtol=1e-5, atol=1e-7, equal_nan=True)

    # and long prompts are block-averaged in the overview, never in the detail
    monkeypatch.setattr(attention_views, "MAX_TILE", 8)
    panel.set_trace(gpt2_trace)
    geo = panel.geometry
    assert geo.factor == 3 and geo.tile == 7 and panel.mosaic.shape == (3 * 8 - 1, 4 * 8 - 1)
    x, y = geo.tile_origin(2, 3)
    assert panel.mosaic[y, x] == pytest.approx(float(gpt2_trace.head(2, 3, "pattern")[:3, :3].mean()), rel=1e-5)
    assert "averaged over 3\u00d73-token blocks" in panel.info.text()
    assert panel.overview_text(2, 3, 3, 0).startswith("L2 H3: queries 3\u20135 \u2192 keys 0\u20132: mean weight")
    select(qtbot, panel, 2, 3)
    np.testing.assert_array_equal(panel.detail.image.image, gpt2_trace.head(2, 3, "pattern"))


def test_a_new_trace_with_fewer_heads(qtbot, gpt2_trace, worked_trace):
    panel = make_panel(qtbot, gpt2_trace)
    select(qtbot, panel, 2, 3)
    panel.selection.set_token(15)
    panel.set_trace(worked_trace)  # drawn even before the window clamps the selection
    np.testing.assert_array_equal(panel.detail.image.image, worked_trace.head(0, 0, "pattern"))
    np.testing.assert_array_equal(panel.row_values, worked_trace.head(0, 0, "pattern")[2])


def test_sliding_window_and_soft_cap_are_named_where_they_show(qtbot, tmp_path):
    """A Gemma-2-shaped model: the window's masked cells say so, the titles name scale, cap and window."""
    pytest.importorskip("transformers")
    from transformers import Gemma2Config, Gemma2ForCausalLM

    config = Gemma2Config(vocab_size=100, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                          num_attention_heads=2, num_key_value_heads=1, head_dim=16, sliding_window=3,
                          query_pre_attn_scalar=16, attn_logit_softcapping=50.0, attn_implementation="eager")
    Gemma2ForCausalLM(config).save_pretrained(tmp_path)
    trace = load_checkpoint(tmp_path, device="cpu").trace_ids(list(range(10, 18)))
    panel = make_panel(qtbot, trace)
    select(qtbot, panel, 0, 1)
    panel.set_kind("scores")
    masked = panel.detail.masked
    assert masked[7, :5].all() and not masked[7, 5:].any()  # the last query sees its 3 latest keys
    assert panel.detail.cell_text(7, 2).endswith("masked (outside the sliding window)")
    assert panel.detail.cell_text(2, 7).endswith("masked (future token)")
    title = panel.detail.plot.titleLabel.text
    assert "capped at \u00b150" in title and "sliding window 3" in title and "\u00d70.25" in title
    assert "outside its window" in panel.row_plot.getPlotItem().titleLabel.text
    select(qtbot, panel, 1, 1)  # a global layer
    assert "sliding window" not in panel.detail.plot.titleLabel.text and not panel.detail.masked[7, :7].any()


def test_the_mosaic_starts_under_its_column_labels_until_zoomed(qtbot, gpt2_trace):
    """A view taller than the mosaic (the aspect is locked) keeps the spare room below the tiles, not
    between the column labels and the first row; after a zoom or pan a resize leaves the view alone."""
    panel = make_panel(qtbot, gpt2_trace, show=True)
    rows, cols = panel.geometry.shape
    vb = panel.overview_plot.vb
    for size in ((400, 900), (1200, 700), (300, 1000)):  # tall and wide overview areas
        panel.resize(*size)
        qtbot.waitUntil(lambda: vb.width() > 1, timeout=5_000)
        qtbot.waitUntil(lambda: abs(vb.viewRange()[1][0] - (-1)) < 1e-6, timeout=5_000)
        (x0, x1), (y0, y1) = vb.viewRange()
        assert y1 >= rows + 1 - 1e-6 and x0 <= -1 + 1e-6 and x1 >= cols + 1 - 1e-6  # all of it shown
        assert abs((x1 - x0) / vb.width() - (y1 - y0) / vb.height()) < 1e-6 * (x1 - x0)  # square cells
    vb.sigRangeChangedManually.emit([True, True])  # the user zoomed
    vb.setRange(xRange=(2, 10), yRange=(5, 13), padding=0)
    zoomed = vb.viewRange()
    panel.resize(500, 800)
    qtbot.waitUntil(lambda: vb.width() > 1, timeout=5_000)
    y0, y1 = vb.viewRange()[1]
    assert y0 != pytest.approx(-1, abs=0.5)  # not sent back to the top-left fit:
    assert (y0 + y1) / 2 == pytest.approx(sum(zoomed[1]) / 2, abs=0.5)  # pyqtgraph keeps the zoomed centre
    panel.selection.set_layer_head(1, 1)  # a selection change does not fit it again either
    assert vb.viewRange()[1][0] == pytest.approx(y0)
