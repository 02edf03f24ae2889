"""Hybrid models in the window (tiny random Qwen3.5-, Gemma-4-, LFM2-, Granite-4-, Nemotron-H- and
Falcon-H1-shaped models, built in memory): every panel draws every layer; the direct logit attribution shows the
recurrent layers', per-layer inputs' and soft cap's terms; the diagram lists the recurrent layers' boxes; patching
hatches the heads a recurrent layer does not have; the neurons panel says a block has no FFN; generation, the
timeline and the journey work; ``export --plots`` writes each layer's maps."""

from __future__ import annotations

import logging
import warnings

import numpy as np
import pytest
from hybrid_models import MODELS, PROMPT, build, open_hybrid
from PySide6.QtCore import QPoint, Qt
from screen import every_panel_on_screen, exported

from explorer.core.analysis.layer_maps import max_maps
from explorer.core.mixers.effective import effective_block
from explorer.ui.window.docks import dock_of

pytest.importorskip("transformers")


def raised(qtbot, window, panel_id: str):
    panel = window.panel(panel_id)
    dock_of(panel).raise_()
    qtbot.waitUntil(lambda: panel.trace is window.trace and window.presenter.is_idle(), timeout=60_000)
    return panel


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_panel_draws_every_layer_of_a_hybrid(qtbot, make_window, caplog, name):
    window = open_hybrid(qtbot, make_window, name)
    failed: list[str] = []
    window.presenter.failed.connect(failed.append)
    every_panel_on_screen(qtbot, window)
    cfg = window.trace.config
    with caplog.at_level(logging.ERROR):
        for layer in range(cfg.n_layers):
            for head in sorted({0, max_maps(cfg) - 1}):
                window.selection.set_layer_head(layer, head)
                qtbot.waitUntil(window.presenter.is_idle, timeout=60_000)
                assert not failed, (layer, head, failed)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], [r.getMessage() for r in caplog.records]
    shown = [p for p in window.panels if p.on_screen and p.applies_to(cfg)]
    assert len(shown) >= 8 and [p.title for p in shown if p.trace is not window.trace] == []


def test_dla_shows_the_recurrent_layers_terms_and_each_adds_up(qtbot, make_window):
    window = open_hybrid(qtbot, make_window, "qwen35")
    panel = raised(qtbot, window, "dla")
    matrix, rows, cols = panel.heatmap.matrix, panel.heatmap.row_labels, panel.heatmap.col_labels
    assert cols == ["H0", "H1", "H2", "H3", "recurrent", "FFN"] and rows == ["L0", "L1", "L2", "L3"]
    d = panel.result
    assert panel.heatmap.masked[0, :4].all() and not panel.heatmap.masked[3, :4].any()  # DeltaNet: no heads
    assert panel.heatmap.masked[3, 4] and not panel.heatmap.masked[:3, 4].any()  # attention: no recurrent term
    np.testing.assert_allclose(matrix[:3, 4], d.mixer[:3], rtol=1e-6)
    assert "no attention heads" in panel.heatmap.cell_text(1, 2) and "Gated DeltaNet" in panel.heatmap.cell_text(1, 2)
    assert "whole output of this Gated DeltaNet layer" in panel.heatmap.cell_text(0, 4)
    terms = np.nansum(matrix) + d.embed + d.attn_bias.sum() + d.norm_bias + d.unembed_bias
    assert terms == pytest.approx(d.logit, abs=1e-3)
    assert f"recurrent layers {d.mixer.sum():.3f}" in panel.info.text()
    assert np.isnan(exported(panel, "direct logit attribution")[0, 0])  # no head there: not a 0
    window.close()

    window = open_hybrid(qtbot, make_window, "gemma4")
    panel = raised(qtbot, window, "dla")
    d = panel.result
    assert panel.heatmap.col_labels[-1] == "per-layer input" and d.softcap == 30.0
    np.testing.assert_allclose(panel.heatmap.matrix[:, -1], d.per_layer, rtol=1e-6)
    text = panel.info.text()
    assert "before the soft cap" in text and "30\u00b7tanh" in text and "layer scalar" in text
    shown = float(window.trace["logits"][d.position][d.target])
    assert f"= {shown:.3f})" in text  # the capped logit the model shows
    terms = np.nansum(panel.heatmap.matrix) + d.embed + d.attn_bias.sum() + d.norm_bias + d.unembed_bias
    assert terms == pytest.approx(d.logit, abs=1e-3)


def test_the_diagram_lists_a_recurrent_layers_boxes(qtbot, make_window):
    window = open_hybrid(qtbot, make_window, "qwen35")
    panel = raised(qtbot, window, "diagram")
    qtbot.waitUntil(lambda: panel.view is not None and panel.view.layer == 0)
    mixers = [b for b in panel.view.diagram.block(0) if b.kind == "mixer"]
    assert mixers, [b.kind for b in panel.view.diagram.block(0)]
    item = panel.scene.items_by_id[mixers[0].id]
    assert "DeltaNet" in item.title_item.text() + " ".join(i.text() for i in item.line_items)
    t = window.trace.n_tokens - 1
    row = effective_block(window.trace, 0, [0], (t, t + 1), (0, t + 1))[0, 0]
    assert item.summary_item.text().startswith(f"head 0: most weight on #{int(np.argmax(np.abs(row)))}")
    assert "attn.scores" not in " ".join(b.id for b in panel.view.diagram.block(0))  # no attention box there
    window.selection.set_layer(3)  # the attention layer: its scores box
    qtbot.waitUntil(lambda: panel.view.layer == 3 and window.presenter.is_idle())
    assert "L3.attn.scores" in panel.scene.items_by_id
    point = panel.graphics.mapFromScene(panel.scene.items_by_id["L3.attn.scores"].sceneBoundingRect().center())
    window.selection.set_layer(0)
    qtbot.waitUntil(lambda: panel.view.layer == 0 and mixers[0].id in panel.scene.items_by_id)
    item = panel.scene.items_by_id[mixers[0].id]
    panel.graphics.ensureVisible(item)
    point = panel.graphics.mapFromScene(item.sceneBoundingRect().center())
    qtbot.mouseClick(panel.graphics.viewport(), Qt.MouseButton.LeftButton, pos=QPoint(point.x(), point.y()))
    attention = window.panel("attention")  # the box opens the layer's effective attention
    qtbot.waitUntil(lambda: not dock_of(attention).visibleRegion().isEmpty() and attention.trace is window.trace
                    and window.presenter.is_idle(), timeout=30_000)
    assert "L0 H0: Gated DeltaNet" in attention.detail.plot.titleLabel.full_text


def test_patching_hatches_the_heads_a_recurrent_layer_has_not(qtbot, make_window):
    window = open_hybrid(qtbot, make_window, "qwen35")
    panel = raised(qtbot, window, "patching")
    panel.corrupt_edit.setText("the dog sat on the mat and the cat sat on the mat again")
    qtbot.mouseClick(panel.run_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: panel.result is not None and panel.cancel_button.isEnabled() is False, timeout=60_000)
    grid = panel.head_map
    assert grid.masked[:3].all() and not grid.masked[3].any()
    assert not grid.estimated[:3].any()  # no ring on a cell that is no head
    assert "Gated DeltaNet" in grid.cell_text(0, 1) and "residual stream" in grid.cell_text(0, 1)
    assert np.isfinite(grid.matrix[3]).all()


def test_a_block_without_an_ffn_says_so_in_the_neurons_panel(qtbot, make_window):
    window = open_hybrid(qtbot, make_window, "nemotron")
    panel = raised(qtbot, window, "neurons")
    window.selection.set_layer(0)  # Nemotron-H's Mamba-2 block: no FFN
    qtbot.waitUntil(lambda: window.presenter.is_idle() and "has no FFN" in panel.note.text(), timeout=30_000)
    assert "Mamba-2" in panel.note.text() and panel.heatmap.matrix.size == 0
    window.selection.set_layer(1)  # its FFN block: neurons
    qtbot.waitUntil(lambda: window.presenter.is_idle() and panel.heatmap.matrix.shape[0] == window.trace.n_tokens,
                    timeout=30_000)
    np.testing.assert_allclose(panel.heatmap.matrix, window.trace["blocks.1.mlp.post"][:, panel.shown_columns()])


def test_generation_the_timeline_and_the_journey_on_a_hybrid(qtbot, make_window):
    window = open_hybrid(qtbot, make_window, "qwen35")
    pane = window.generation
    pane.max_new.setValue(4)
    pane.greedy.setChecked(True)
    with qtbot.waitSignal(pane.generation_finished, timeout=60_000):
        qtbot.mouseClick(pane.generate_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(window.presenter.is_idle, timeout=60_000)
    n = len(window.loaded.tokenizer.encode(PROMPT))
    assert window.trace.n_tokens == n + 4
    window.session.timeline.set_step(1)
    qtbot.waitUntil(lambda: window.presenter.is_idle() and window.trace.n_tokens == n + 1, timeout=60_000)
    journey = raised(qtbot, window, "journey")
    qtbot.waitUntil(lambda: journey.view is not None and journey.view.journey is not None, timeout=60_000)
    reads = journey.view.journey.attention  # [L, H, position]: a DeltaNet row's shares, the attention row
    assert reads.shape[:2] == (4, 4) and np.allclose(np.nansum(reads, -1), 1.0, atol=1e-5)


def test_export_plots_writes_each_layers_maps(qtbot, tmp_path):
    from explorer.core.checkpoint.in_memory import from_transformers
    from explorer.core.tokenize.base import gpt2_tokenizer
    from explorer.ui.offscreen import render_plots

    loaded = from_transformers(build("qwen35"), gpt2_tokenizer(), device="cpu")
    trace = loaded.trace(PROMPT)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a panel that cannot render says so as a warning
        written = render_plots(loaded, trace, tmp_path)
    names = {p.name for p in written}
    assert {f"L{layer}_H{head}.png" for layer in range(4) for head in range(4)} <= names
    assert {"attention_all_heads.png", "dla.png", "attention_selected_head.png"} & names
    np.testing.assert_allclose(np.load(tmp_path / "attention" / "L1_H2.npy"), effective_block(trace, 1, [2])[0],
                               atol=1e-6)
    np.testing.assert_allclose(np.load(tmp_path / "attention" / "L3_H0.npy"), trace.head(3, 0), atol=1e-7)
