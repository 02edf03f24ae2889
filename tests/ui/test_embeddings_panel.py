"""The embeddings & positions panel shows the trace's own numbers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import explorer.ui  # noqa: F401
from explorer.core.checkpoint import load_checkpoint
from explorer.core.config import ModelConfig
from explorer.core.display.tokens import quoted
from explorer.core.model import Transformer
from explorer.core.trace import CaptureSpec, capture
from explorer.core.analysis.vectors import cosine_similarity_matrix, nearest_vocab_neighbours, sinusoid_curves
from explorer.ui.panels.embeddings import EmbeddingsPanel
from explorer.ui.session.selection import Selection

PROMPT = "The quick brown fox jumps over the lazy dog while the cat sleeps on a mat"


@pytest.fixture
def gpt2_trace(tiny_gpt2):
    loaded, _ = tiny_gpt2
    return loaded, loaded.trace(PROMPT)


def _panel(qtbot, trace, display=None):
    selection = Selection()
    panel = EmbeddingsPanel(selection)
    qtbot.addWidget(panel)
    panel.resize(1000, 800)
    if display is not None:
        panel.set_vocabulary_display(display)
    panel.set_trace(trace)
    settle(qtbot, panel)
    return panel, selection


def settle(qtbot, panel):
    """Wait for the panel's background views (neighbours of a large vocabulary) by condition, not time."""
    qtbot.waitUntil(lambda: not panel.computing(), timeout=60_000)


def _toy_trace(positions):
    cfg = ModelConfig(vocab_size=40, n_ctx=32, d_model=16, n_layers=1, n_heads=2, d_head=8, d_ff=32,
                      positions=positions)
    torch.manual_seed(0)
    model = Transformer(cfg).eval()
    ids = [5, 9, 5, 2, 31]
    trace, _ = capture(model, ids, [f"t{i}" for i in ids], CaptureSpec.full())
    return trace


def test_heatmaps_hold_the_trace_arrays(qtbot, gpt2_trace):
    loaded, trace = gpt2_trace
    panel, _ = _panel(qtbot, trace, loaded.tokenizer.display)
    assert panel.title == "Embeddings & positions" and panel.explanation == "embeddings"
    np.testing.assert_array_equal(panel.embed_map.matrix, trace["embed"])
    np.testing.assert_array_equal(panel.pos_map.matrix, trace["pos_embed"])
    np.testing.assert_array_equal(panel.sum_map.matrix, trace["blocks.0.resid_pre"])
    np.testing.assert_allclose(panel.sum_map.matrix, trace["embed"] + trace["pos_embed"], atol=1e-6)
    assert panel.embed_map.row_labels[3] == "3: fox"
    assert panel.pos_map.isVisibleTo(panel) and not panel.pos_note.isVisibleTo(panel)
    lo, hi = panel.embed_map.levels
    assert lo == -hi  # signed values on a diverging map centred on 0
    names = [e.name for e in panel.exportables()]
    assert names == ["token_embeddings", "positions", "embedding_sum", "cosine_similarity",
                     "nearest_neighbours", "position_curves"]
    matrix, rows, cols = panel.exportables()[1].data()
    np.testing.assert_array_equal(matrix, trace["pos_embed"])
    assert len(rows) == trace.n_tokens and len(cols) == trace.config.d_model


def test_cosine_matrix_for_each_space(qtbot, gpt2_trace):
    loaded, trace = gpt2_trace
    panel, _ = _panel(qtbot, trace)
    expected = {"token embeddings": trace["embed"], "positions": trace["pos_embed"],
                "sum (enters block 0)": trace["blocks.0.resid_pre"]}
    assert [panel.space_combo.itemText(i) for i in range(panel.space_combo.count())] == list(expected)
    for i, (name, vectors) in enumerate(expected.items()):
        panel.space_combo.setCurrentIndex(i)
        np.testing.assert_allclose(panel.cosine_map.matrix, cosine_similarity_matrix(vectors), atol=1e-6)
    # the two " the" tokens share a token embedding, not a position
    panel.space_combo.setCurrentIndex(0)
    assert panel.cosine_map.matrix[6, 10] == pytest.approx(1.0, abs=1e-5)


@pytest.mark.parametrize("background", [False, True])
def test_neighbours_follow_the_selected_token(qtbot, gpt2_trace, monkeypatch, background):
    from explorer.ui.panels import embeddings

    if background:  # as with a real vocabulary: computed in the background, waited for by condition
        monkeypatch.setattr(embeddings, "NEIGHBOURS_NOW_MACS", 0)
    loaded, trace = gpt2_trace
    panel, selection = _panel(qtbot, trace, loaded.tokenizer.display)
    n = trace.n_tokens
    ids, cos = nearest_vocab_neighbours(trace, n - 1, 10)  # default: the last token
    rows = panel.neighbour_rows()
    assert [r[0] for r in rows] == ids.tolist()
    assert [r[1] for r in rows] == [loaded.tokenizer.display(int(i)) for i in ids]
    np.testing.assert_allclose([r[2] for r in rows], cos, atol=1e-6)
    assert int(trace.token_ids[n - 1]) not in ids
    assert panel.neighbours.rowCount() == 10
    assert panel.neighbours.item(0, 0).text() == quoted(loaded.tokenizer.display(int(ids[0])), 40)  # was repr()

    selection.set_token(3)
    settle(qtbot, panel)
    ids3, _ = nearest_vocab_neighbours(trace, 3, 10)
    assert [r[0] for r in panel.neighbour_rows()] == ids3.tolist()
    assert "3:\u00b7fox" in panel.neighbours_title.text()


def test_a_token_switch_rewrites_the_neighbours_in_place(qtbot, gpt2_trace, monkeypatch):
    """The same rows and items, blank while computing (never another token's), the columns not re-measured."""
    from explorer.ui.panels import embeddings

    monkeypatch.setattr(embeddings, "NEIGHBOURS_NOW_MACS", 0)  # in the background, as with a real vocabulary
    loaded, trace = gpt2_trace
    panel, selection = _panel(qtbot, trace, loaded.tokenizer.display)
    table = panel.neighbours
    first, widths = table.item(0, 0), [table.columnWidth(c) for c in (1, 2)]
    changes = []
    table.model().rowsRemoved.connect(lambda *a: changes.append(a))
    table.model().rowsInserted.connect(lambda *a: changes.append(a))
    table.horizontalHeader().sectionResized.connect(lambda *a: changes.append(a))
    selection.set_token(3)
    assert panel.computing() and all(table.item(r, c).text() == "" for r in range(10) for c in range(3))
    settle(qtbot, panel)
    assert changes == [] and table.item(0, 0) is first and [table.columnWidth(c) for c in (1, 2)] == widths
    ids, cos = nearest_vocab_neighbours(trace, 3, 10)
    assert [table.item(r, 1).text() for r in range(10)] == [str(i) for i in ids.tolist()]
    assert [table.item(r, 2).text() for r in range(10)] == [f"{c:.4f}" for c in cos.tolist()]


def test_clicking_a_row_selects_the_token(qtbot, gpt2_trace):
    _, trace = gpt2_trace
    panel, selection = _panel(qtbot, trace)
    panel.sum_map.cell_clicked.emit(5, 17)
    assert selection.token == 5
    panel.cosine_map.cell_clicked.emit(2, 9)
    assert selection.token == 2


def test_vocabulary_display_falls_back_to_ids(qtbot, gpt2_trace):
    _, trace = gpt2_trace
    panel, _ = _panel(qtbot, trace)
    assert all(text == f"#{i}" for i, text, _ in panel.neighbour_rows())


@pytest.mark.parametrize("positions", ["rotary", "none"])
def test_no_added_positions_show_a_note(qtbot, positions):
    trace = _toy_trace(positions)
    panel, _ = _panel(qtbot, trace)
    assert "pos_embed" not in trace
    assert not panel.pos_map.isVisibleTo(panel) and panel.pos_note.isVisibleTo(panel)
    assert "nothing is added here" in panel.pos_note.text()
    if positions == "rotary":
        assert panel.pos_note.text() == "Rotary positions rotate Q and K inside attention; nothing is added here."
    np.testing.assert_array_equal(panel.sum_map.matrix, trace["embed"])
    assert "positions" not in [panel.space_combo.itemText(i) for i in range(panel.space_combo.count())]
    assert not panel.curves_box.isVisibleTo(panel)


def test_alibi_model_says_where_its_positions_are(qtbot):
    """BLOOM adds nothing here (ALiBi acts on the scores) and normalises the embedding before block 0."""
    cfg = ModelConfig(vocab_size=40, n_ctx=32, d_model=16, n_layers=1, n_heads=2, d_head=8, d_ff=32,
                      positions="none", alibi=True, embed_norm=True)
    torch.manual_seed(0)
    ids = [5, 9, 5, 2, 31]
    trace, _ = capture(Transformer(cfg).eval(), ids, [f"t{i}" for i in ids], CaptureSpec.full())
    panel, _ = _panel(qtbot, trace)
    assert "ALiBi" in panel.pos_note.text() and "invisible" not in panel.pos_note.text()
    assert "LayerNorm" in panel.sum_map.plot.titleLabel.text
    np.testing.assert_array_equal(panel.sum_map.matrix, trace["blocks.0.resid_pre"])
    assert not np.allclose(panel.sum_map.matrix, trace["embed"])  # the normalised embedding enters block 0


def test_worked_example_has_no_positions(qtbot):
    loaded = load_checkpoint("worked-example", device="cpu")
    trace = loaded.trace("Today is sunday")
    panel, _ = _panel(qtbot, trace, loaded.tokenizer.display)
    assert panel.pos_note.isVisibleTo(panel)
    np.testing.assert_array_equal(panel.embed_map.matrix, trace["embed"])


def test_sinusoid_curves_for_chosen_dimensions(qtbot):
    trace = _toy_trace("sinusoidal")
    panel, _ = _panel(qtbot, trace)
    assert panel.curves_box.isVisibleTo(panel) and panel.pos_map.isVisibleTo(panel)
    panel.dims_edit.setText("1, 4-5")
    panel.dims_edit.editingFinished.emit()
    values, rows, cols = panel.exportables()[-1].data()
    assert cols == ["dim 1", "dim 4", "dim 5"] and len(rows) == trace.config.n_ctx
    np.testing.assert_allclose(values, sinusoid_curves(np.arange(32), [1, 4, 5], 16))
    np.testing.assert_allclose(values[: trace.n_tokens], trace["pos_embed"][:, [1, 4, 5]], atol=1e-6)
    assert len(panel.curves_plot.getPlotItem().listDataItems()) == 3
