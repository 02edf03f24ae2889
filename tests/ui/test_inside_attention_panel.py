"""For learners (issue 42): the selected head's Q, K and V as matrices over the prompt, the heads concatenated
and projected by W_O, and the KV cache growing step by step during a generation's timeline; each map the
core's numbers (core/analysis/inside_attention.py), drawn in the window."""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QPointF, Qt
from PySide6.QtTest import QTest

from explorer.core.analysis.inside_attention import head_qkv, heads_to_output, kv_cache_at
from explorer.ui.panels.inside_attention import TABS

PROMPT = "When Mary and John went to the store, John gave a drink to"


def shown(qtbot, window):
    window.raise_panel("inside_attention")
    panel = window.panel("inside_attention")
    qtbot.waitUntil(lambda: panel.trace is window.trace and panel.view is not None
                    and panel.view.trace is window.trace and window.presenter.is_idle(), timeout=60_000)
    return panel


def test_q_k_v_and_the_heads_times_w_o_are_the_models(qtbot, window):
    with qtbot.waitSignal(window.presenter.drawn, timeout=30_000):
        window.set_prompt(PROMPT)
    window.selection.set_layer_head(1, 1)
    panel = shown(qtbot, window)
    qtbot.waitUntil(lambda: panel.view.layer == 1 and panel.view.head == 1, timeout=30_000)
    trace = window.trace
    want = head_qkv(trace, 1, 1)
    np.testing.assert_array_equal(panel.q_map.matrix, want.q)  # rows = tokens, columns = the head's dimensions
    np.testing.assert_array_equal(panel.k_map.matrix, want.k)
    np.testing.assert_array_equal(panel.v_map.matrix, want.v)
    assert panel.q_map.matrix.shape == (trace.n_tokens, trace.config.d_head)
    assert panel.q_map.row_labels[3].startswith("3:")
    heads = heads_to_output(trace, 1)
    np.testing.assert_array_equal(panel.concat_map.matrix, heads.concat)
    np.testing.assert_allclose(panel.out_map.matrix, trace["blocks.1.attn.out"], rtol=1e-4, atol=1e-5)
    assert "the layer's attention output" in panel.heads_note.text()
    assert [panel.tabs.tabText(i) for i in range(panel.tabs.count())] == list(TABS)
    # a click on a row selects its token
    q = panel.q_map
    point = q.mapFromScene(q.plot.vb.mapViewToScene(QPointF(0.5, 4.5)))
    QTest.mouseClick(q.viewport(), Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, point)
    assert window.selection.token == 4


def test_the_kv_cache_grows_one_row_a_step(qtbot, window):
    with qtbot.waitSignal(window.presenter.drawn, timeout=30_000):
        window.set_prompt(PROMPT)
    pane, timeline = window.generation, window.session.timeline
    pane.greedy.setChecked(True)
    pane.max_new.setValue(3)
    with qtbot.waitSignal(pane.generation_finished, timeout=60_000):
        assert pane.generate()
    qtbot.waitUntil(lambda: timeline.full is not None and window.presenter.is_idle(), timeout=60_000)
    panel = shown(qtbot, window)
    panel.tabs.setCurrentIndex(2)
    n_prompt = timeline.n_prompt
    for t in (0, 1, 2):
        timeline.set_step(t)
        qtbot.waitUntil(lambda t=t: timeline.step == t and panel.view is not None
                        and panel.view.trace is window.trace and window.presenter.is_idle(), timeout=60_000)
        cache = panel.view.cache
        assert cache.step == t and cache.length == n_prompt + t == panel.cache_k.matrix.shape[0]
        want = kv_cache_at(timeline.full.trace, n_prompt, t, window.selection.layer, cache.kv_head)
        np.testing.assert_array_equal(panel.cache_k.matrix, want.keys)
        if t == 0:
            assert "nothing reused" in panel.cache_note.text()
        else:
            assert f"{n_prompt + t - 1} read back from the cache" in panel.cache_note.text()
            assert cache.new.tolist() == [False] * (n_prompt + t - 1) + [True]


def test_every_map_title_is_whole_in_a_laptop_window(qtbot, laptop_window):
    """At 1280x800 the three maps side by side are narrow: their titles were elided to 'Q, head …' and
    'keys in the ca…' (the head's number and the word 'cache' lost); each title now fits its map."""
    window = laptop_window
    with qtbot.waitSignal(window.presenter.drawn, timeout=30_000):
        window.set_prompt(PROMPT)
    window.selection.set_layer_head(12, 1)
    panel = shown(qtbot, window)
    qtbot.waitUntil(lambda: panel.view.layer == 12, timeout=30_000)
    pane, timeline = window.generation, window.session.timeline
    pane.greedy.setChecked(True)
    pane.max_new.setValue(2)
    with qtbot.waitSignal(pane.generation_finished, timeout=60_000):
        assert pane.generate()
    qtbot.waitUntil(lambda: timeline.full is not None and window.presenter.is_idle(), timeout=60_000)
    timeline.set_step(1)
    qtbot.waitUntil(lambda: timeline.step == 1 and panel.view.cache is not None and window.presenter.is_idle(),
                    timeout=60_000)
    maps = ([panel.q_map, panel.k_map, panel.v_map, panel.scores_map], [panel.concat_map, panel.out_map],
            [panel.cache_k, panel.cache_v])
    for index, tab in enumerate(maps):
        panel.tabs.setCurrentIndex(index)
        qtbot.waitUntil(lambda tab=tab: all(m.isVisible() and m.plot.titleLabel.rect().width() >= 40 for m in tab))
        for m in tab:
            title = m.plot.titleLabel
            assert not title.is_elided(), f"{title.text!r} elided in a {title.rect().width():.0f} px wide map"
    assert panel.qkv_note.text().startswith("Head 12.1:")  # the head the maps show: the line above them


def test_a_long_prompts_maps_prepared_on_the_worker_are_the_models(qtbot):
    """Beyond NOW_TOKENS the maps reach the heatmaps prepared off the GUI thread: the same values, diverging maps
    centred on 0, the masked scores hatched and nothing else."""
    import torch

    from explorer.core.config import ModelConfig
    from explorer.core.model import Transformer
    from explorer.core.trace import capture
    from explorer.ui.panels.inside_attention import NOW_TOKENS, InsideAttentionPanel
    from explorer.ui.session.selection import Selection

    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=64, n_ctx=1024, d_model=32, n_layers=2, n_heads=4, d_head=8,
                                    d_ff=64)).eval()
    n = NOW_TOKENS + 88
    ids = [(7 * i + 3) % 64 for i in range(n)]
    trace, _ = capture(model, ids, [f"t{i}" for i in ids])
    selection = Selection()
    panel = InsideAttentionPanel(selection)
    qtbot.addWidget(panel)
    selection.clamp(trace.config.n_layers, trace.config.n_heads, trace.n_tokens)
    selection.set_layer_head(1, 2)
    panel.set_trace(trace)
    qtbot.waitUntil(lambda: panel.view is not None and panel.view.trace is trace and panel.view.head == 2,
                    timeout=30_000)
    want = head_qkv(trace, 1, 2)
    np.testing.assert_array_equal(panel.q_map.matrix, want.q)
    np.testing.assert_array_equal(panel.scores_map.matrix, want.scores)
    np.testing.assert_array_equal(panel.concat_map.matrix, heads_to_output(trace, 1).concat)
    low, high = panel.q_map.levels
    assert low == -high == -float(np.abs(want.q).max())
    finite = np.isfinite(want.scores)
    assert panel.scores_map.levels == (float(want.scores[finite].min()), float(want.scores[finite].max()))
    np.testing.assert_array_equal(panel.scores_map.overlay_mask(), ~finite)
    assert panel.scores_map.overlay_mask().sum() == n * (n - 1) // 2  # the later keys of every query
