"""The residual stream & logit lens panel: norms, sublayer bars, cosines and the lens grid show the
core's numbers; the lens is computed in ``prepare`` (the worker), not while drawing; the selected
token follows the shared selection. On a tiny random GPT-2 (3 layers, FFN) and the worked example
(1 layer, attention only)."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QPointF, Qt

import explorer.ui  # noqa: F401  (binds pyqtgraph to PySide6)
from explorer.core.analysis import residual as core
from explorer.core.checkpoint import load_checkpoint
from explorer.core.display.tokens import quoted
from explorer.core.worked_example import PROMPT
from explorer.ui.panels import panel_classes
from explorer.ui.panels.residual import ResidualPanel, visible_text
from explorer.ui.panels.residual import lens as residual_lens
from explorer.ui.session.selection import Selection

# " the the" and " dog dog": a random model with tied embeddings predicts the token it reads, so
# these positions' top predictions are the real next token
GPT2_PROMPT = "The cat sat on the the mat, and the dog dog sat on the log."


@pytest.fixture(scope="module")
def gpt2(tiny_gpt2):
    loaded, _ = tiny_gpt2
    trace = loaded.trace(GPT2_PROMPT)
    assert trace.n_tokens == 17 and trace.config.n_layers == 3 and trace.config.has_ffn
    return loaded, trace


@pytest.fixture(scope="module")
def worked():
    loaded = load_checkpoint("worked-example", device="cpu")
    return loaded, loaded.trace(PROMPT)


def make_panel(qtbot, loaded, trace, show: bool = False) -> ResidualPanel:
    """A panel fed as the window feeds it: tokenizer, then prepare (the worker), then the trace."""
    selection = Selection()
    panel = ResidualPanel(selection)
    qtbot.addWidget(panel)
    panel.set_tokenizer(loaded.tokenizer)
    panel.prepare(trace, panel.snapshot())
    selection.clamp(trace.config.n_layers, trace.config.n_heads, trace.n_tokens)
    if show:
        panel.resize(1300, 950)
        panel.show()
        qtbot.waitExposed(panel)
    panel.set_trace(trace)
    return panel


def test_registered():
    assert ResidualPanel in panel_classes()
    assert ResidualPanel.title == "Residual stream & logit lens" and ResidualPanel.explanation == "residual"


def test_norm_heatmap_and_cosine_equal_the_core(qtbot, gpt2):
    loaded, trace = gpt2
    panel = make_panel(qtbot, loaded, trace)
    norms = core.residual_norms(trace)
    assert norms.shape == (4, 17)
    np.testing.assert_array_equal(panel.norm_map.matrix, norms)
    np.testing.assert_array_equal(panel.norm_map.image.image, norms)
    assert panel.norm_map.row_labels == ["embed", "after 0", "after 1", "after 2"]
    assert panel.norm_map.col_labels == list(trace.tokens)
    assert panel.norm_map.levels == (0.0, pytest.approx(float(norms.max())))
    cosine = core.consecutive_cosine(trace)
    np.testing.assert_array_equal(panel.cosine_map.matrix, cosine)
    assert panel.cosine_map.row_labels == ["block 0", "block 1", "block 2"] and panel.cosine_map.levels[1] == 1.0
    assert panel.norm_map.cell_text(2, 1).startswith("after 1, '\u00b7cat' (1): \u2016x\u2016 = ")


def test_line_and_bars_follow_the_token_selection(qtbot, gpt2):
    loaded, trace = gpt2
    panel = make_panel(qtbot, loaded, trace)
    norms = core.residual_norms(trace)
    contributions = core.sublayer_contributions(trace)
    # no token selected: the last one
    assert panel.selected_token == 16
    np.testing.assert_array_equal(panel.norm_line.yData, norms[:, 16])
    np.testing.assert_array_equal(panel.attn_bars.opts["height"], contributions["attn"][:, 16])
    np.testing.assert_array_equal(panel.ffn_bars.opts["height"], contributions["mlp"][:, 16])
    # a selection made elsewhere (another panel, the token chips)
    panel.selection.set_token(5)
    np.testing.assert_array_equal(panel.norm_line.xData, np.arange(4))
    np.testing.assert_array_equal(panel.norm_line.yData, norms[:, 5])
    dots = panel.norm_dots.getData()  # the line's dots: the same points
    np.testing.assert_array_equal(dots[0], np.arange(4))
    np.testing.assert_array_equal(dots[1], norms[:, 5])
    x_range, y_range = panel.bars_plot.getViewBox().viewRange()
    panel.selection.set_token(6)  # the same blocks: the same x range, the y range from the new bars' heights
    np.testing.assert_array_equal(panel.attn_bars.opts["height"], contributions["attn"][:, 6])
    assert panel.bars_plot.getViewBox().viewRange()[0] == x_range == [-0.6, 2.6]
    top = max(contributions["attn"][:, 6].max(), contributions["mlp"][:, 6].max())
    assert panel.bars_plot.getViewBox().viewRange()[1][1] > top
    panel.selection.set_token(5)
    np.testing.assert_array_equal(panel.attn_bars.opts["height"], contributions["attn"][:, 5])
    np.testing.assert_array_equal(panel.ffn_bars.opts["height"], contributions["mlp"][:, 5])
    np.testing.assert_array_equal(panel.attn_bars.opts["x"], np.arange(3) - 0.2)
    np.testing.assert_array_equal(panel.ffn_bars.opts["x"], np.arange(3) + 0.2)
    assert "'\u00b7the' (5)" in panel.norm_plot.getPlotItem().titleLabel.text
    assert "'\u00b7the' (5)" in panel.bars_plot.getPlotItem().titleLabel.text
    assert panel.ffn_bars.isVisible()
    for heatmap in (panel.norm_map, panel.cosine_map, panel.lens_map):  # the selected column is outlined
        outline = panel._outlines[id(heatmap)]
        column = 5 - panel._lens_shown[0] if heatmap is panel.lens_map else 5  # the lens may show a window
        assert outline.isVisible() and outline.rect().x() == column and outline.rect().width() == 1
        assert outline.rect().height() == heatmap.matrix.shape[0]
    # the other tokens are drawn too, faintly, as one item
    y = panel.other_lines.yData
    assert np.isnan(y).sum() == 17 and np.allclose(y[~np.isnan(y)], norms.T.ravel())


def test_clicking_a_cell_selects_its_token(qtbot, gpt2):
    loaded, trace = gpt2
    panel = make_panel(qtbot, loaded, trace, show=True)
    scene = panel.lens_map.plot.vb.mapViewToScene(QPointF(9.5, 2.5))
    qtbot.mouseClick(panel.lens_map.viewport(), Qt.MouseButton.LeftButton,
                     pos=panel.lens_map.mapFromScene(scene))
    qtbot.waitUntil(lambda: panel.selection.token == 9)
    np.testing.assert_array_equal(panel.norm_line.yData, core.residual_norms(trace)[:, 9])
    panel.norm_map.cell_clicked.emit(0, 3)
    assert panel.selection.token == 3
    panel.cosine_map.cell_clicked.emit(1, 12)
    assert panel.selection.token == 12


def test_lens_grid(qtbot, gpt2):
    loaded, trace = gpt2
    panel = make_panel(qtbot, loaded, trace)
    lens = core.logit_lens(trace, top=5, vocab_size=loaded.tokenizer.vocab_size)
    top1 = lens.probs[..., 0]
    # colours are the top-1 probabilities, on fixed levels
    np.testing.assert_array_equal(panel.lens_map.matrix, top1)
    np.testing.assert_array_equal(panel.lens_map.image.image, top1)
    assert panel.lens_map.levels == (0.0, 1.0)
    assert panel.lens_map.row_labels == ["embed", "after 0", "after 1", "after 2"]
    # the last row is the model's own output: argmax of the logits, with the softmax probability
    logits = trace["logits"]
    final = logits.argmax(-1)
    np.testing.assert_array_equal(lens.ids[-1, :, 0], final)
    assert panel.lens_texts[-1] == [visible_text(loaded.tokenizer.display(int(i))) for i in final]
    z = logits.astype(np.float64)
    p = np.exp(z - z.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    np.testing.assert_allclose(panel.lens_map.matrix[-1], p.max(-1), rtol=1e-4)
    # every cell's text is its top prediction, whitespace visible
    for b in range(4):
        assert panel.lens_texts[b] == [visible_text(loaded.tokenizer.display(int(i))) for i in lens.ids[b, :, 0]]
    assert panel.lens_cells.isVisible() and panel.lens_cells.texts == panel.lens_texts
    assert visible_text(" the") == "\u00b7the" and visible_text("a\nb") == "a\u21b5b" and visible_text("") == "\u2205"
    # the real next token is marked where the top prediction is it
    hits = np.zeros((4, 17), dtype=bool)
    hits[:, :-1] = lens.ids[:, :-1, 0] == trace.token_ids[None, 1:]
    assert hits.any()  # " dog dog": position 10 reads " dog" and " dog" comes next
    np.testing.assert_array_equal(panel.next_token_hits, hits)
    np.testing.assert_array_equal(panel.lens_cells.bold, hits)
    marked = {(int(r.y()), int(r.x())) for r in
              (panel.lens_marks.path().toSubpathPolygons()[k].boundingRect()
               for k in range(len(panel.lens_marks.path().toSubpathPolygons())))}
    assert marked == {(int(b), int(i)) for b, i in zip(*np.nonzero(hits))}
    # the tooltip: top five with probabilities, and the real next token's probability and rank
    b, i = 1, 2
    text = panel.lens_map.cell_text(b, i)
    lines = text.splitlines()
    assert lines[0] == "after 0, '\u00b7sat' (2): predicts the next token"
    assert len(lines) == 7
    for k in range(5):
        assert lines[k + 1].startswith(f"  {k + 1}. {quoted(loaded.tokenizer.display(int(lens.ids[b, i, k])))}")
    rank = int(lens.target_ranks[b, i]) + 1
    assert lines[6].startswith("real next token '\u00b7on': ") and lines[6].endswith(f"rank {rank}")
    hb, hi = (int(v) for v in np.argwhere(hits)[0])
    assert panel.lens_map.cell_text(hb, hi).endswith("rank 1  \u2713 the top prediction")
    assert panel.lens_map.cell_text(0, 16).endswith("real next token: none (the last position)")


def test_large_lens_grid_is_colours_only(qtbot, gpt2, monkeypatch):
    loaded, trace = gpt2
    monkeypatch.setattr(residual_lens, "TEXT_MAX_TOKENS", 10)
    panel = make_panel(qtbot, loaded, trace)
    assert not panel.lens_cells.isVisible() and panel.lens_cells.texts == []
    assert panel.lens_map.matrix.shape == (4, 17)
    assert "hover for the tokens" in panel.lens_map.plot.titleLabel.text
    assert "predicts the next token" in panel.lens_map.cell_text(3, 12)  # the text is in the tooltip
    assert not panel.lens_marks.path().isEmpty()  # marks still drawn


def test_prepare_computes_the_lens_and_drawing_reuses_it(qtbot, gpt2, monkeypatch):
    loaded, _ = gpt2
    trace = loaded.trace(GPT2_PROMPT)  # a fresh trace: nothing memoised yet
    calls = []
    original = core.logit_lens

    def counting(*args, **kwargs):
        calls.append(kwargs)
        return original(*args, **kwargs)

    monkeypatch.setattr(core, "logit_lens", counting)
    selection = Selection()
    panel = ResidualPanel(selection)
    qtbot.addWidget(panel)
    panel.set_tokenizer(loaded.tokenizer)
    panel.prepare(trace, panel.snapshot())
    assert calls == [{"top": 5, "vocab_size": loaded.tokenizer.vocab_size}]
    panel.set_trace(trace)
    panel.selection.set_token(3)
    panel.set_trace(trace)
    assert len(calls) == 1  # drawing only read what prepare kept with the trace
    assert panel.lens.ids.shape == (4, 17, 5)


def test_attention_only_worked_example(qtbot, worked):
    loaded, trace = worked
    assert not trace.config.has_ffn and trace.config.n_layers == 1
    panel = make_panel(qtbot, loaded, trace)
    np.testing.assert_array_equal(panel.norm_map.matrix, core.residual_norms(trace))
    contributions = core.sublayer_contributions(trace)
    np.testing.assert_array_equal(panel.attn_bars.opts["height"], contributions["attn"][:, 2])
    assert not panel.ffn_bars.isVisible() and len(panel.ffn_bars.opts["height"]) == 0
    assert "no FFN" in panel.bars_plot.getPlotItem().titleLabel.text
    lens = core.logit_lens(trace, top=5, vocab_size=loaded.tokenizer.vocab_size)
    assert panel.lens.ids.shape == (2, 3, 4)  # a 4-token vocabulary: at most 4 predictions
    np.testing.assert_array_equal(panel.lens_map.matrix, lens.probs[..., 0])
    np.testing.assert_array_equal(lens.ids[-1, :, 0], trace["logits"].argmax(-1))
    assert panel.lens_texts[-1] == [loaded.tokenizer.display(int(i)) for i in lens.ids[-1, :, 0]]
    values, rows, cols = {e.name: e for e in panel.exportables()}["sublayer contributions"].data()
    assert values.shape == (1, 1) and rows == ["block 0"] and cols == ["attention"]
    panel.selection.set_token(0)
    np.testing.assert_array_equal(panel.attn_bars.opts["height"], contributions["attn"][:, 0])


def test_ids_without_a_tokenizer(qtbot, worked):
    loaded, trace = worked
    panel = ResidualPanel(Selection())
    qtbot.addWidget(panel)
    panel.set_trace(trace)  # no tokenizer, no prepare: drawn all the same
    assert panel.lens_texts[-1] == [f"#{int(i)}" for i in panel.lens.ids[-1, :, 0]]


def test_exportables(qtbot, gpt2):
    loaded, trace = gpt2
    panel = make_panel(qtbot, loaded, trace)
    panel.selection.set_token(4)
    exports = {e.name: e for e in panel.exportables()}
    assert set(exports) == {"residual norms", "residual norm of the selected token", "sublayer contributions",
                            "consecutive cosine", "logit lens top-1 probability", "logit lens top token ids",
                            "token across layers"}
    labels = [f"{i}:{t}" for i, t in enumerate(trace.tokens)]
    boundaries = ["embed", "after 0", "after 1", "after 2"]
    norms = core.residual_norms(trace)

    values, rows, cols = exports["residual norms"].data()
    np.testing.assert_array_equal(values, norms)
    assert rows == boundaries and cols == labels and exports["residual norms"].item is panel.norm_map

    values, rows, cols = exports["residual norm of the selected token"].data()
    np.testing.assert_array_equal(values, norms[:, 4])
    assert rows == boundaries and cols == ["norm of 4: the"]

    contributions = core.sublayer_contributions(trace)
    values, rows, cols = exports["sublayer contributions"].data()
    np.testing.assert_array_equal(values, np.stack([contributions["attn"][:, 4], contributions["mlp"][:, 4]], 1))
    assert values.shape == (3, 2) and rows == ["block 0", "block 1", "block 2"] and cols == ["attention", "FFN"]

    values, rows, cols = exports["consecutive cosine"].data()
    np.testing.assert_array_equal(values, core.consecutive_cosine(trace))
    assert values.shape == (3, 17) and cols == labels

    lens = core.logit_lens(trace, top=5, vocab_size=loaded.tokenizer.vocab_size)
    values, rows, cols = exports["logit lens top-1 probability"].data()
    np.testing.assert_array_equal(values, lens.probs[..., 0])
    assert values.shape == (4, 17) and rows == boundaries and cols == labels
    values, rows, cols = exports["logit lens top token ids"].data()
    np.testing.assert_array_equal(values, lens.ids[..., 0])
    assert values.dtype == np.int64 and rows == boundaries and cols == labels

    # the token across layers beside the lens: the top prediction at the selected position, every boundary
    path = core.token_across_layers(trace, 4, int(np.argmax(trace["logits"][4])), loaded.tokenizer.vocab_size)
    values, rows, cols = exports["token across layers"].data()
    np.testing.assert_allclose(values[:, 0], path.probs, rtol=1e-6)
    np.testing.assert_array_equal(values[:, 1], path.ranks + 1)
    assert rows == boundaries and cols == ["probability", "rank"]

    # both lens exports reachable from the lens's right-click menu: the probabilities' actions at the
    # top, the ids' in a submenu
    menu = panel.lens_map.plot.getViewBox().menu
    texts = [a.text() for a in menu.actions()]
    assert texts[:4] == ["Export PNG\u2026", "Export SVG\u2026", "Export data as CSV\u2026", "Export data as NPY\u2026"]
    assert "Top token ids" in texts
    assert [a.text() for a in panel.lens_ids_menu.actions()] == texts[:6]  # the four exports, Copy image, Copy data


def test_exports_render(qtbot, gpt2, tmp_path):
    from explorer.ui.export import export_data, export_png

    loaded, trace = gpt2
    panel = make_panel(qtbot, loaded, trace, show=True)
    for exportable in panel.exportables():
        path = export_png(exportable.item, tmp_path / f"{exportable.name}.png")
        assert path.stat().st_size > 0
        export_data(exportable, tmp_path / f"{exportable.name}.csv")
    header = (tmp_path / "logit lens top token ids.csv").read_text().splitlines()[1]
    assert header.startswith("embed,")


def test_one_token_and_a_trace_without_its_model(qtbot, gpt2):
    loaded, trace = gpt2
    single = loaded.trace("Hello")
    assert single.n_tokens == 1
    panel = make_panel(qtbot, loaded, single)
    assert panel.lens_map.matrix.shape == (4, 1) and not panel.next_token_hits.any()
    assert panel.lens_map.cell_text(3, 0).endswith("real next token: none (the last position)")
    np.testing.assert_array_equal(panel.norm_line.yData, core.residual_norms(single)[:, 0])

    # a saved trace with the stream but neither the model nor the sublayer outputs: norms and
    # cosines still drawn, the lens and the bars say what is missing
    from explorer.core.trace import Trace

    keys = [f"blocks.{layer}.resid_pre" for layer in range(3)] + ["resid_final", "logits"]
    bare = Trace(trace.token_ids, trace.tokens, trace.config, {k: trace[k] for k in keys})
    panel.prepare(bare, panel.snapshot())
    panel.set_trace(bare)
    np.testing.assert_array_equal(panel.norm_map.matrix, core.residual_norms(trace))
    np.testing.assert_array_equal(panel.cosine_map.matrix, core.consecutive_cosine(trace))
    assert panel.lens is None and panel.lens_map.matrix.size == 0
    assert "needs the loaded model" in panel.lens_map.plot.titleLabel.text
    assert panel.contributions is None and len(panel.attn_bars.opts["height"]) == 0
    assert "not captured" in panel.bars_plot.getPlotItem().titleLabel.text
    for exportable in panel.exportables():
        exportable.data()  # every export still answers


def test_depths_are_kept_per_count_read_only_and_equal_a_fresh_arange():
    from explorer.ui.panels.residual.cells import depths

    for n in (1, 4, 13, 4):
        x = depths(n)
        np.testing.assert_array_equal(x, np.arange(n, dtype=np.float64))
        assert x.dtype == np.float64 and not x.flags.writeable and depths(n) is x
    assert depths(5).shape == (5,)  # another count: its own array, never another's


def test_visible_text_is_kept_per_text_and_equals_short():
    from explorer.core.display.tokens import short
    from explorer.ui.panels.residual.cells import CELL_CHARS

    for text in (" the", "a\nb", "", "\t\x00x", " a very long token indeed", " the"):
        assert visible_text(text) == short(text, CELL_CHARS)
        assert visible_text(text, 4) == short(text, 4)  # another width: its own entry
    assert visible_text.cache_info().hits > 0
