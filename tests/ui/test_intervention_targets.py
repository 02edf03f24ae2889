"""Right-click ablation through the real event path: mouse events at a tile of the all-heads grid and
at a column of the FFN heatmap open a menu; choosing "Switch off" reruns the trace with it off and the
drawing carries the mark."""

from __future__ import annotations

from PySide6.QtCore import QPointF

from tests.ui.right_click import right_click_menu


def raised(qtbot, window, panel) -> None:
    next(d for d in window.docks if d.panel is panel).raise_()
    qtbot.waitUntil(lambda: panel.trace is window.trace, timeout=30_000)


def test_right_click_a_tile_of_the_all_heads_grid_switches_that_head_off(qtbot, window) -> None:
    attention = next(p for p in window.panels if p.title.startswith("Attention"))
    raised(qtbot, window, attention)
    qtbot.waitUntil(lambda: attention.geometry is not None, timeout=30_000)

    def scene():  # tile 1.0 where the overview is drawn now (it may still be laid out or ranging)
        return attention.overview_image.mapToScene(QPointF(*attention.geometry.tile_center(1, 0)))

    with qtbot.waitSignal(window.trace_applied, timeout=30_000):
        texts = right_click_menu(qtbot, attention.overview, scene, choose="Switch off head 1.0")
    assert texts[:2] == ["Switch off head 1.0 (zero)", "Mean-ablate head 1.0"]
    assert "Export PNG\u2026" in texts and "Copy data" in texts  # the export entries share the menu
    trace = window.trace
    assert [iv.key for iv in trace.interventions] == [("head", 1, 0, "zero", None)]
    assert not trace["blocks.1.attn.z"][0].any() and trace["blocks.1.attn.z"][1].any()  # [H, n, d_head]
    qtbot.waitUntil(lambda: attention.geometry is not None, timeout=30_000)
    marks = attention.tile_marks()
    assert marks == [attention.geometry.tile_center(1, 0)]
    # the same tile now offers Clear, and clearing reruns the clean trace and removes the mark
    with qtbot.waitSignal(window.trace_applied, timeout=30_000):
        texts = right_click_menu(qtbot, attention.overview, scene, choose="Clear head 1.0")
    assert "Clear head 1.0" in texts
    assert window.trace.interventions == () and attention.tile_marks() == []


def test_right_click_a_neuron_column_of_the_ffn_heatmap_switches_that_neuron_off(qtbot, window) -> None:
    panel = next(p for p in window.panels if "neuron" in p.title.lower())
    raised(qtbot, window, panel)
    qtbot.waitUntil(lambda: panel.columns().size > 0, timeout=30_000)
    panel.set_top_k(8)  # the 8 most active of 64: switched off, a neuron would fall out of them
    assert panel.columns().size == 8
    column = 3
    neuron = int(panel.columns()[column])
    layer = panel.layer()
    scene = panel.heatmap.plot.vb.mapViewToScene(QPointF(column + 0.5, 1.5))
    with qtbot.waitSignal(window.trace_applied, timeout=30_000):
        texts = right_click_menu(qtbot, panel.heatmap, scene, choose=f"Switch off neuron {layer}:{neuron}")
    assert texts[0] == f"Switch off neuron {layer}:{neuron} (zero)"
    trace = window.trace
    assert [iv.key for iv in trace.interventions] == [("neuron", layer, neuron, "zero", None)]
    assert not trace[f"blocks.{layer}.mlp.post"][:, neuron].any()
    qtbot.waitUntil(lambda: panel.trace is window.trace, timeout=30_000)
    assert neuron in panel.columns()  # still shown, though it no longer fires at all
    where = list(panel.columns()).index(neuron)
    rows = trace.n_tokens
    assert sorted(panel.column_marks()) == [(where + 0.5, r + 0.5) for r in range(rows)]


def test_the_dla_map_offers_its_heads_and_its_ffns(qtbot, window) -> None:
    from explorer.ui.panels.interventions import DLAPanel

    panel = next(p for p in window.panels if isinstance(p, DLAPanel))
    raised(qtbot, window, panel)
    qtbot.waitUntil(lambda: panel.result is not None, timeout=30_000)
    vb = panel.heatmap.plot.vb
    texts = right_click_menu(qtbot, panel.heatmap, vb.mapViewToScene(QPointF(2.5, 1.5)))  # layer 1's FFN column
    assert texts[:2] == ["Switch off FFN 1 (zero)", "Mean-ablate FFN 1"]
    with qtbot.waitSignal(window.trace_applied, timeout=30_000):
        right_click_menu(qtbot, panel.heatmap, vb.mapViewToScene(QPointF(1.5, 0.5)), choose="Switch off head 0.1")
    assert [iv.key for iv in window.trace.interventions] == [("head", 0, 1, "zero", None)]
    qtbot.waitUntil(lambda: panel.trace is window.trace and panel.result is not None, timeout=30_000)
    assert panel.result.heads[0, 1] == 0  # a head switched off writes nothing
    assert panel._intervention_marks[0].points == [(1.5, 0.5)]
    assert panel._intervention_marks[1].points == []


def test_right_click_a_cell_of_the_residual_norms_switches_the_stream_off_there(qtbot, window) -> None:
    panel = next(p for p in window.panels if "residual" in p.title.lower())
    raised(qtbot, window, panel)
    qtbot.waitUntil(lambda: panel.norm_map.matrix.size > 0, timeout=30_000)
    # the stream entering block 1, position 2 (read again until the plot just raised is laid out)
    scene = lambda: panel.norm_map.plot.vb.mapViewToScene(QPointF(2.5, 1.5))  # noqa: E731
    with qtbot.waitSignal(window.trace_applied, timeout=30_000):
        texts = right_click_menu(qtbot, panel.norm_map, scene, choose="Switch off the residual stream")
    assert texts[0].startswith("Switch off the residual stream") and texts[0].endswith("at position 2 (zero)")
    assert [iv.key for iv in window.trace.interventions] == [("resid", 1, None, "zero", (2,))]
    assert not window.trace["blocks.1.resid_pre"][2].any()
    qtbot.waitUntil(lambda: panel.trace is window.trace, timeout=30_000)
    assert panel._intervention_marks[0].points == [(2.5, 1.5)]
