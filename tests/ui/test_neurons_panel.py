"""The FFN neurons panel: the layer's activations heatmap (order, top K, zoom ticks, clicks), the
selected token's ranked neurons, the selected neuron's bars, histogram and vocabulary effect, the
attention-only note and the exports, on a tiny random GPT-2 (3 layers, d_ff = 256) and the worked
example (attention only)."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QPointF, Qt

import explorer.ui  # noqa: F401  (binds pyqtgraph to PySide6)
from explorer.core.analysis.neurons import (
    activation_histogram,
    neuron_order,
    neuron_vocab_effect,
    top_columns,
    top_neurons,
)
from explorer.core.display.tokens import quoted
from explorer.core.trace import CaptureSpec, Trace
from explorer.core.worked_example import PROMPT
from explorer.ui.panels.neurons import (
    DEFAULT_TOP_K,
    TOP_TOKEN_NEURONS,
    VOCAB_K,
    NeuronsPanel,
)
from explorer.ui.panels.neurons import views as neuron_views
from explorer.ui.session.selection import Selection

GPT2_PROMPT = "The cat sat on the mat. The dog sat on the log. The cat sat on the mat"


@pytest.fixture(scope="module")
def gpt2(tiny_gpt2):
    loaded, _ = tiny_gpt2
    trace = loaded.trace(GPT2_PROMPT)
    assert trace.n_tokens == 20 and trace.config.n_layers == 3 and trace.config.d_ff == 256
    return loaded, trace


def make_panel(qtbot, trace, tokenizer=None, layer: int = 0, show: bool = False) -> NeuronsPanel:
    selection = Selection()
    panel = NeuronsPanel(selection)
    qtbot.addWidget(panel)
    if tokenizer is not None:
        panel.set_tokenizer(tokenizer)
    selection.set_layer(layer)
    panel.prepare(trace, panel.snapshot())  # what the worker does before the GUI draws
    selection.clamp(trace.config.n_layers, trace.config.n_heads, trace.n_tokens)
    if show:
        panel.resize(1300, 850)
        panel.show()
        qtbot.waitExposed(panel)
    panel.set_trace(trace)
    return panel


def post_of(trace, layer: int) -> np.ndarray:
    return trace[f"blocks.{layer}.mlp.post"]


def test_heatmap_shows_the_layers_activations_in_the_chosen_order_and_subset(qtbot, gpt2):
    _, trace = gpt2
    panel = make_panel(qtbot, trace, layer=1)
    assert panel.title == "FFN neurons" and panel.explanation == "ffn"
    post = post_of(trace, 1)
    # the default: the 64 most active neurons, by index
    assert panel.top_k == DEFAULT_TOP_K and panel.order == "index"
    top_ids = top_columns(post, DEFAULT_TOP_K)[0]
    np.testing.assert_array_equal(panel.columns(), np.sort(top_ids))
    np.testing.assert_array_equal(panel.heatmap.matrix, post[:, np.sort(top_ids)])
    assert panel.heatmap.row_labels == list(trace.tokens)
    assert panel.heatmap.col_labels == [f"#{j}" for j in np.sort(top_ids)]
    assert panel.heatmap.levels == (pytest.approx(float(post.min())), pytest.approx(float(post.max())))

    for mode in ("max", "variance", "index"):
        panel.set_order(mode)
        assert panel.order_combo.currentData() == mode
        order = neuron_order(post, mode)
        panel.set_top_k(0)  # all d_ff neurons
        assert panel.top_k_spin.text() == "all"
        np.testing.assert_array_equal(panel.columns(), order)
        np.testing.assert_array_equal(panel.heatmap.matrix, post[:, order])
        assert panel.heatmap.matrix.shape == (20, 256)
        panel.set_top_k(16)
        ids = top_columns(post, 16)[0]
        assert set(panel.columns().tolist()) == set(ids.tolist())
        rank = np.argsort(order)
        np.testing.assert_array_equal(panel.columns(), ids[np.argsort(rank[ids], kind="stable")])
        np.testing.assert_array_equal(panel.heatmap.matrix, post[:, panel.columns()])
        if mode == "max":
            np.testing.assert_array_equal(panel.columns(), ids)  # top_columns' own order
            np.testing.assert_array_equal(panel.heatmap.matrix, top_columns(post, 16)[1])
    # the combo and the spin box drive the same code
    panel.order_combo.setCurrentIndex(panel.order_combo.findData("variance"))
    panel.top_k_spin.setValue(8)
    assert (panel.order, panel.top_k) == ("variance", 8)
    ids = top_columns(post, 8)[0]
    np.testing.assert_array_equal(panel.columns(), ids[np.argsort(np.argsort(neuron_order(post, "variance"))[ids])])
    panel.set_top_k(10_000)  # clamped to d_ff: everything
    assert panel.top_k_spin.value() == 256
    np.testing.assert_array_equal(panel.columns(), neuron_order(post, "variance"))


def test_tooltip_and_zoomed_neuron_ticks(qtbot, gpt2):
    _, trace = gpt2
    panel = make_panel(qtbot, trace, layer=0, show=True)
    panel.set_top_k(0)
    post = post_of(trace, 0)
    assert panel.heatmap.cell_text(3, 200) == f"token '\u00b7on' (3), neuron #200: {float(post[3, 200]):.6f}"
    panel.heatmap.plot.setXRange(100, 110, padding=0)
    ticks = panel.heatmap.plot.getAxis("bottom")._tickLevels[0]
    assert ticks and all(100 <= pos <= 111 for pos, _ in ticks)
    assert all(label == f"#{int(pos)}" for pos, label in ticks)  # index order: column j is neuron j
    assert len(ticks) >= 5  # zoomed in, the neuron ids are labelled one by one or nearly
    panel.reset_zoom.click()
    ticks = panel.heatmap.plot.getAxis("bottom")._tickLevels[0]
    assert ticks[0] == (0.5, "#0") and ticks[-1][0] > 128


def test_clicking_a_cell_selects_token_and_neuron(qtbot, gpt2):
    loaded, trace = gpt2
    panel = make_panel(qtbot, trace, loaded.tokenizer, layer=2, show=True)
    column = 5
    neuron = int(panel.columns()[column])

    def scene_point():  # the view's transform settles once the layout has run
        return panel.heatmap.image.mapToScene(QPointF(column + 0.5, 7.5))

    qtbot.waitUntil(lambda: panel.heatmap.cell_at(scene_point()) == (7, column))
    scene = scene_point()
    qtbot.mouseClick(panel.heatmap.viewport(), Qt.MouseButton.LeftButton, pos=panel.heatmap.mapFromScene(scene))
    qtbot.waitUntil(lambda: panel.selection.token == 7)
    assert panel.selected_neuron == neuron
    np.testing.assert_array_equal(panel.bar_values, post_of(trace, 2)[:, neuron])
    rect = panel.column_outline.rect()
    assert panel.column_outline.isVisible() and (rect.x(), rect.width()) == (column, 1)
    assert panel.row_outline.rect().y() == 7
    panel.heatmap.cell_clicked.emit(2, 9)
    assert panel.selection.token == 2 and panel.selected_neuron == int(panel.columns()[9])


def test_ranked_list_equals_top_neurons(qtbot, gpt2):
    _, trace = gpt2
    panel = make_panel(qtbot, trace, layer=1)
    post = post_of(trace, 1)
    for token in (None, 0, 11):
        if token is not None:
            panel.selection.set_token(token)
        i = 19 if token is None else token
        ids, values = top_neurons(post, i, TOP_TOKEN_NEURONS)
        shown_ids, shown_values = panel.ranked_neurons()
        np.testing.assert_array_equal(shown_ids, ids)
        np.testing.assert_array_equal(shown_values, values)
        assert panel.ranked.rowCount() == TOP_TOKEN_NEURONS
        table = [[panel.ranked.item(r, c).text() for c in range(3)] for r in range(panel.ranked.rowCount())]
        assert table == [[str(r + 1), f"#{j}", f"{v:.4f}"] for r, (j, v) in enumerate(zip(ids, values))]
        assert f"({i})" in panel.ranked_title.text()
    # the default neuron is the most active one at the (then) selected token: the last
    assert panel.selected_neuron == int(top_neurons(post, 19, 1)[0][0])
    # clicking a row selects that neuron
    ids = panel.ranked_neurons()[0]
    panel.ranked.setCurrentCell(3, 1)
    assert panel.selected_neuron == int(ids[3])
    np.testing.assert_array_equal(panel.bar_values, post[:, ids[3]])


def test_selecting_a_neuron_updates_bars_histogram_and_vocabulary(qtbot, gpt2):
    loaded, trace = gpt2
    panel = make_panel(qtbot, trace, loaded.tokenizer, layer=1)
    post = post_of(trace, 1)
    panel.selection.set_token(4)
    for neuron in (7, 200, 0):
        panel.select_neuron(neuron)
        assert panel.selected_neuron == neuron
        np.testing.assert_array_equal(panel.bar_values, post[:, neuron])
        np.testing.assert_array_equal(panel.bars.opts["height"], post[:, neuron])
        np.testing.assert_array_equal(panel.bars.opts["x"], np.arange(20) + 0.5)
        assert f"neuron #{neuron}" in panel.bars_plot.getPlotItem().titleLabel.text
        counts, edges = activation_histogram(post[:, neuron], bins=20)
        np.testing.assert_array_equal(panel.hist_bars.opts["height"], counts)
        np.testing.assert_array_equal(panel.hist_bars.opts["x0"], edges[:-1])
        assert panel.hist_marker.value() == pytest.approx(float(post[4, neuron]))

        expected = neuron_vocab_effect(trace, 1, neuron, VOCAB_K, vocab_size=loaded.tokenizer.vocab_size)
        for got, want in zip(panel.vocab_effect(), expected):
            np.testing.assert_array_equal(got, want)
        up_ids, up, down_ids, down = expected
        assert panel.vocab.rowCount() == VOCAB_K
        for r in range(VOCAB_K):
            assert panel.vocab.item(r, 0).text() == quoted(loaded.tokenizer.display(int(up_ids[r])), 40)  # was repr()
            assert panel.vocab.item(r, 1).text() == f"{up[r]:+.4f}"
            assert panel.vocab.item(r, 2).text() == quoted(loaded.tokenizer.display(int(down_ids[r])), 40)
            assert panel.vocab.item(r, 3).text() == f"{down[r]:+.4f}"
        assert f"neuron #{neuron}" in panel.vocab_title.text()
    assert "Direct path only" in panel.vocab_caption.text() and "un-embedding" in panel.vocab_caption.text()
    # the token selection moves the markers, not the neuron
    panel.selection.set_token(9)
    assert panel.selected_neuron == 0
    assert panel.hist_marker.value() == pytest.approx(float(post[9, 0]))
    with pytest.raises(IndexError):
        panel.select_neuron(256)


def test_without_a_tokenizer_vocabulary_shows_ids(qtbot, gpt2):
    _, trace = gpt2
    panel = make_panel(qtbot, trace, layer=0)
    panel.select_neuron(3)
    up_ids = neuron_vocab_effect(trace, 0, 3, VOCAB_K)[0]
    assert [panel.vocab.item(r, 0).text() for r in range(3)] == [f"#{i}" for i in up_ids[:3]]


def test_changing_the_layer_redraws(qtbot, gpt2):
    _, trace = gpt2
    panel = make_panel(qtbot, trace, layer=0)
    panel.set_top_k(0)
    panel.select_neuron(42)
    for layer in (2, 1, 0):
        panel.selection.set_layer(layer)
        post = post_of(trace, layer)
        assert panel.layer() == layer
        np.testing.assert_array_equal(panel.heatmap.matrix, post)
        assert panel.heatmap.plot.titleLabel.text.startswith(f"L{layer} ")
        # a neuron id means nothing in another layer: the new layer's most active one is shown
        neuron = int(top_neurons(post, 19, 1)[0][0])
        assert panel.selected_neuron == neuron
        np.testing.assert_array_equal(panel.bar_values, post[:, neuron])
        np.testing.assert_array_equal(panel.ranked_neurons()[0], top_neurons(post, 19, TOP_TOKEN_NEURONS)[0])
    panel.select_neuron(42)
    panel.set_trace(trace)  # a new trace keeps the neuron chosen on this layer
    assert panel.selected_neuron == 42


def test_prepare_leaves_show_trace_only_drawing(qtbot, gpt2, monkeypatch):
    loaded, trace = gpt2
    trace = loaded.trace(GPT2_PROMPT + " again")  # a fresh trace: nothing memoised yet
    selection = Selection()
    panel = NeuronsPanel(selection)
    qtbot.addWidget(panel)
    panel.set_tokenizer(loaded.tokenizer)
    selection.set_layer(2)
    panel.prepare(trace, panel.snapshot())
    calls = []
    for name in ("neuron_order", "top_columns", "neuron_vocab_effect"):
        original = getattr(neuron_views, name)
        monkeypatch.setattr(neuron_views, name,
                            lambda *a, _f=original, _n=name, **k: (calls.append(_n), _f(*a, **k))[1])
    panel.set_trace(trace)
    assert calls == []
    assert panel.vocab.rowCount() == VOCAB_K and panel.heatmap.matrix.shape == (trace.n_tokens, DEFAULT_TOP_K)
    panel.select_neuron(11)  # a new neuron: its vocabulary effect is computed on selection
    assert calls == ["neuron_vocab_effect"]


def test_attention_only_model_shows_a_note(qtbot, worked_loaded, gpt2):
    trace = worked_loaded.trace(PROMPT)
    assert not trace.config.has_ffn
    panel = make_panel(qtbot, trace, worked_loaded.tokenizer, show=True)
    assert panel.note.isVisible() and "this model has no ffn" in panel.note.text().lower()
    assert not panel.content.isVisible() and not panel.controls.isVisible()
    assert panel.needed_keys(trace, panel.snapshot()) == []
    for exportable in panel.exportables():
        values, rows, cols = exportable.data()
        assert values.size == 0 and not rows and not cols
    panel.selection.set_token(1)  # nothing to redraw, nothing breaks
    panel.set_tokenizer(gpt2[0].tokenizer)
    panel.set_trace(gpt2[1])  # a model with an FFN again: the plots come back
    assert not panel.note.isVisible() and panel.content.isVisible() and panel.controls.isVisible()
    np.testing.assert_array_equal(panel.heatmap.matrix, post_of(gpt2[1], 0)[:, panel.columns()])


def test_a_trace_without_ffn_activations_or_model(qtbot, gpt2):
    loaded, _ = gpt2
    stored = loaded.trace(GPT2_PROMPT, CaptureSpec.compact())
    bare = Trace(stored.token_ids, stored.tokens, stored.config, {k: stored[k] for k in stored.stored_keys()})
    panel = make_panel(qtbot, bare, show=True)
    assert panel.note.isVisible() and "not captured" in panel.note.text()
    # and one with the activations but no model: everything except the vocabulary effect
    full = loaded.trace(GPT2_PROMPT)
    loose = Trace(full.token_ids, full.tokens, full.config, {k: full[k] for k in full.stored_keys()})
    panel = make_panel(qtbot, loose, show=True)
    assert not panel.note.isVisible()
    np.testing.assert_array_equal(panel.heatmap.matrix, post_of(full, 0)[:, panel.columns()])
    assert panel.vocab_effect() is None and panel.vocab.rowCount() == 0
    assert "loaded model" in panel.vocab_title.text()


def test_exportables_have_labelled_data_of_the_right_shape(qtbot, gpt2):
    loaded, trace = gpt2
    panel = make_panel(qtbot, trace, loaded.tokenizer, layer=1)
    panel.selection.set_token(4)
    panel.set_order("max")
    panel.select_neuron(17)
    exports = {e.name: e for e in panel.exportables()}
    assert set(exports) == {"neuron activations", "selected token's top neurons", "selected neuron across tokens",
                            "selected neuron histogram", "selected neuron vocabulary effect",
                            "neuron top examples over the corpus", "neuron histogram over the corpus"}  # corpus: empty
    labels = [f"{i}:{t}" for i, t in enumerate(trace.tokens)]
    post = post_of(trace, 1)

    matrix, rows, cols = exports["neuron activations"].data()
    ids = top_columns(post, DEFAULT_TOP_K)[0]
    assert matrix.shape == (20, DEFAULT_TOP_K) and rows == labels and cols == [f"#{j}" for j in ids]
    np.testing.assert_array_equal(matrix, post[:, ids])
    assert exports["neuron activations"].item is panel.heatmap
    panel.set_top_k(0)
    matrix, rows, cols = exports["neuron activations"].data()
    assert matrix.shape == (20, 256) and len(cols) == 256

    values, rows, cols = exports["selected token's top neurons"].data()
    top_ids, top_values = top_neurons(post, 4, TOP_TOKEN_NEURONS)
    assert values.shape == (TOP_TOKEN_NEURONS,) and rows == [f"#{j}" for j in top_ids]
    np.testing.assert_array_equal(values, top_values)
    assert cols == ["L1 activation at 4: the"]

    values, rows, cols = exports["selected neuron across tokens"].data()
    assert values.shape == (20,) and rows == labels and cols == ["L1 neuron #17"]
    np.testing.assert_array_equal(values, post[:, 17])

    counts, rows, cols = exports["selected neuron histogram"].data()
    expected, edges = activation_histogram(post[:, 17], bins=20)
    np.testing.assert_array_equal(counts, expected)
    assert counts.shape == (20,) and len(rows) == 20 and counts.sum() == 20
    assert rows[0].startswith(f"[{edges[0]:.6g}, ") and rows[-1].endswith("]") and len(cols) == 1

    values, rows, cols = exports["selected neuron vocabulary effect"].data()
    up_ids, up, down_ids, down = neuron_vocab_effect(trace, 1, 17, VOCAB_K, vocab_size=loaded.tokenizer.vocab_size)
    assert values.shape == (2 * VOCAB_K,) and len(rows) == 2 * VOCAB_K and len(cols) == 1
    np.testing.assert_array_equal(values, np.concatenate([up, down]))
    assert rows[0] == f"promoted 1: {up_ids[0]}:{loaded.tokenizer.display(int(up_ids[0]))!r}"
    assert rows[VOCAB_K].startswith(f"suppressed 1: {down_ids[0]}:")
    assert "direct" in cols[0]
