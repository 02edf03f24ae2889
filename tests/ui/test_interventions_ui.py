"""Interventions in the app: right-click a head off, the strip, marks, What changed and DLA panels."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QPointF
from PySide6.QtWidgets import QMenu

import explorer.ui  # noqa: F401  (binds pyqtgraph to PySide6)
from explorer.core.analysis.changes import compare_runs
from explorer.core.analysis.dla import direct_logit_attribution
from explorer.core.interventions.spec import Intervention
from explorer.core.trace import CaptureSpec
from explorer.ui.panels import panel_classes
from explorer.ui.panels.interventions import DLAPanel, WhatChangedPanel
from explorer.ui.session.selection import Selection
from explorer.ui.session.frame import PROMPT, Source
from explorer.ui.session.session import Session
from explorer.ui.session.workers import TraceRequest, TraceResult

PROMPT = "The cat sat on the mat, and the dog sat on the log."


def shown(qtbot, window, panel) -> None:
    """Bring ``panel``'s dock to the front and wait until it shows the window's trace (hidden panels
    are drawn when shown)."""
    next(d for d in window.docks if d.panel is panel).raise_()
    qtbot.waitUntil(lambda: panel.trace is window.trace, timeout=30_000)


def fed(qtbot, cls, loaded, trace, baseline=None):
    """``panel`` of ``cls`` showing ``trace``; ``baseline``: its run without interventions (the Session's)."""
    selection = Selection()
    panel = cls(selection)
    qtbot.addWidget(panel)
    if baseline is not None:
        session = Session()
        session.presenter.present(TraceResult(TraceRequest(0, None, ""), trace, 0.0, baseline=baseline), Source(PROMPT))
        panel.session = session
    panel.set_tokenizer(loaded.tokenizer)
    selection.clamp(trace.config.n_layers, trace.config.n_heads, trace.n_tokens)
    panel.prepare(trace, panel.snapshot())
    panel.set_trace(trace)
    return panel


def test_what_changed_panel_shows_both_runs(qtbot, tiny_loaded) -> None:
    assert WhatChangedPanel in panel_classes() and DLAPanel in panel_classes()
    ids = tiny_loaded.encode(PROMPT)[0]
    ivs = [Intervention("attn", 0), Intervention("head", 1, 1, "mean")]
    trace = tiny_loaded.trace_ids(ids, interventions=ivs)
    baseline = tiny_loaded.trace_ids(ids, CaptureSpec.compact())
    panel = fed(qtbot, WhatChangedPanel, tiny_loaded, trace, baseline)
    expected = compare_runs(baseline["logits"], trace["logits"], trace.token_ids, -1, 10)
    np.testing.assert_array_equal(panel.result.ids, expected.ids)
    np.testing.assert_allclose(panel.before_bars.opts["width"], expected.p_before)
    np.testing.assert_allclose(panel.after_bars.opts["width"], expected.p_after)
    np.testing.assert_allclose(panel.delta_bars.opts["height"], expected.next_delta)
    assert np.abs(expected.next_delta).max() > 1e-3
    assert "attn 0 zero" in panel.info.text() and "head 1.1 mean" in panel.info.text()
    data, rows, cols = panel._delta_data()
    assert data.shape == (trace.n_tokens - 1, 3) and cols[-1] == "change"
    panel.selection.set_token(3)
    assert panel.result.position == 3
    clean = fed(qtbot, WhatChangedPanel, tiny_loaded, baseline)
    assert clean.result is None and "No interventions" in clean.info.text()


def test_dla_panel_shows_the_core_attribution(qtbot, tiny_loaded) -> None:
    trace = tiny_loaded.trace(PROMPT)
    panel = fed(qtbot, DLAPanel, tiny_loaded, trace)
    last = trace.n_tokens - 1
    d = direct_logit_attribution(trace, int(np.argmax(trace["logits"][last])), last)
    np.testing.assert_allclose(panel.heatmap.matrix[:, :2], d.heads, atol=1e-6)
    np.testing.assert_allclose(panel.heatmap.matrix[:, 2], d.mlp, atol=1e-6)
    assert panel.heatmap.col_labels == ["H0", "H1", "FFN"]
    panel.selection.set_token(2)  # the token that follows position 2 in the prompt
    assert panel.result is None and np.isnan(panel.heatmap.matrix).all()  # in the background: the old token's is gone
    assert "computing" in panel.info.text()
    qtbot.waitUntil(lambda: panel.result is not None, timeout=10_000)
    assert panel.result.target == int(trace.token_ids[3]) and panel.result.position == 2
    d2 = direct_logit_attribution(trace, int(trace.token_ids[3]), 2)
    np.testing.assert_allclose(panel.heatmap.matrix[:, :2], d2.heads, atol=1e-6)
    panel.heatmap.cell_clicked.emit(1, 0)
    assert (panel.selection.layer, panel.selection.head) == (1, 0)


def test_right_click_switches_a_head_off_and_every_run_follows(qtbot, window, monkeypatch) -> None:
    attention = next(p for p in window.panels if p.title.startswith("Attention"))
    state = window.interventions
    assert window.intervention_strip.hint.isVisible() or not window.isVisible()
    next(d for d in window.docks if d.panel is attention).raise_()  # drawn once on screen (progressive views)
    qtbot.waitUntil(lambda: attention.geometry is not None, timeout=30_000)
    x, y = attention.geometry.tile_center(1, 0)
    scene = attention.overview_image.mapToScene(QPointF(x, y))
    shown: list[QMenu] = []
    monkeypatch.setattr(QMenu, "popup", lambda menu, *a, **k: shown.append(menu))

    class Click:
        def scenePos(self):  # noqa: N802 - pyqtgraph's event API
            return scene

        def screenPos(self):  # noqa: N802
            return QPointF(10, 10)

        def acceptedItem(self):  # noqa: N802
            return None

    attention.overview_plot.getViewBox().raiseContextMenu(Click())
    texts = [a.text() for a in shown[-1].actions()]
    assert texts[:2] == ["Switch off head 1.0 (zero)", "Mean-ablate head 1.0"]
    with qtbot.waitSignal(window.trace_applied, timeout=30_000):
        shown[-1].actions()[0].trigger()
    assert [iv.key for iv in state.active()] == [("head", 1, 0, "zero", None)]
    trace = window.trace
    assert [iv.key for iv in trace.interventions] == [("head", 1, 0, "zero", None)]
    assert not trace["blocks.1.attn.z"][0].any()
    assert attention._intervention_marks[0].count == 1      # a cross over the tile
    assert [b.text() for b in window.intervention_strip.toggles] == ["head 1.0 zero"]
    what = next(p for p in window.panels if isinstance(p, WhatChangedPanel))
    next(d for d in window.docks if d.panel is what).raise_()  # a hidden panel is drawn when shown
    qtbot.waitUntil(lambda: what.result is not None, timeout=30_000)
    assert "head 1.0 zero" in what.info.text()
    next(d for d in window.docks if d.panel is attention).raise_()
    # the overview is drawn again for the new trace once raised: read the tile's place after that
    qtbot.waitUntil(lambda: attention.trace is window.trace and attention.geometry is not None, timeout=30_000)
    scene = attention.overview_image.mapToScene(QPointF(*attention.geometry.tile_center(1, 0)))
    # the menu now offers Clear; the strip's toggle turns it off and the next trace is clean again
    attention.overview_plot.getViewBox().raiseContextMenu(Click())
    assert "Clear head 1.0" in [a.text() for a in shown[-1].actions()]
    with qtbot.waitSignal(window.trace_applied, timeout=30_000):
        window.intervention_strip.toggles[0].setChecked(False)
    assert window.trace.interventions == () and attention._intervention_marks[0].count == 0
    assert window.trace["blocks.1.attn.z"][0].any()
    with qtbot.waitSignal(window.trace_applied, timeout=30_000):
        window.intervention_strip.clear_button.click()
    assert state.entries == []


@pytest.mark.parametrize("where", ["neuron", "residual"])
def test_neuron_and_residual_menus(qtbot, window, where) -> None:
    from explorer.ui.interventions.menu import component_actions

    panel = next(p for p in window.panels if where in p.title.lower())
    shown(qtbot, window, panel)
    if where == "neuron":
        qtbot.waitUntil(lambda: panel.columns().size > 0, timeout=30_000)
    if where == "neuron":
        found = ("neuron", panel.layer(), int(panel.columns()[0]), None, "neuron")
    else:
        found = ("resid", 1, None, (2,), "cell")
    with qtbot.waitSignal(window.trace_applied, timeout=30_000):
        component_actions(panel, found, None)[1].trigger()  # mean-ablate
    iv = window.trace.interventions[0]
    assert iv.mode == "mean" and iv.value is not None
    assert panel._intervention_marks[0].count >= 1
    if where == "neuron":
        post = window.trace[f"blocks.{iv.layer}.mlp.post"][:, iv.index]
        np.testing.assert_allclose(post, np.full_like(post, float(iv.value)), atol=1e-6)
    else:
        np.testing.assert_allclose(window.trace["blocks.1.resid_pre"][2], iv.value, atol=1e-6)


def test_patching_view_fills_its_grids_and_inspects_a_patch(qtbot, window) -> None:
    from explorer.core.interventions.patching import activation_patching
    from explorer.ui.panels.interventions import PatchingPanel

    panel = next(p for p in window.panels if isinstance(p, PatchingPanel))
    shown(qtbot, window, panel)
    clean = window.loaded.encode(window.prompt.text())[0]
    corrupt_ids = list(clean)
    corrupt_ids[1] = clean[0]
    corrupt = window.loaded.tokenizer.decode(corrupt_ids)
    assert window.loaded.tokenizer.encode(corrupt) == corrupt_ids
    panel.corrupt_edit.setText(corrupt)
    assert panel.run_button.isEnabled()
    panel.start()  # (a spy connected after start could miss yields already queued: the progress bar shows them)
    qtbot.waitUntil(lambda: panel._worker is None and panel.result is not None, timeout=60_000)
    target = int(np.argmax(window.trace["logits"][-1]))
    expected = activation_patching(window.loaded.model, clean, corrupt_ids, target, batch_size=16)
    np.testing.assert_allclose(panel.resid_map.matrix, expected.resid, atol=1e-4)
    np.testing.assert_allclose(panel.head_map.matrix, expected.heads, atol=1e-4)
    assert panel.progress.maximum() > 0 and panel.progress.value() == panel.progress.maximum()
    assert "Done:" in panel.status.text()
    L = window.loaded.config.n_layers
    with qtbot.waitSignal(window.trace_applied, timeout=30_000):
        panel.resid_map.cell_clicked.emit(1, 1)  # patch the stream entering block 1 at position 1
    assert window.prompt.text() == corrupt
    qtbot.waitUntil(lambda: window.controller.is_idle() and window.trace.interventions != (), timeout=30_000)
    iv = window.trace.interventions[0]
    assert iv.key == ("resid", 1, None, "patch", (1,)) and L == 2
    np.testing.assert_allclose(window.trace["blocks.1.resid_pre"][1],
                               np.asarray(expected.clean[("resid_pre", 1)][1]), atol=1e-6)
    data, rows, cols = panel._grid_data("resid")
    assert data.shape == (L + 1, len(clean)) and rows[-1] == "final"


def test_what_changed_shows_where_the_stream_moved(qtbot, tiny_loaded) -> None:
    from explorer.core.analysis.changes import stream_difference

    ids = tiny_loaded.encode(PROMPT)[0]
    trace = tiny_loaded.trace_ids(ids, interventions=[Intervention("resid", 1, None, "zero", (4,))])
    baseline = tiny_loaded.trace_ids(ids, CaptureSpec.compact())
    panel = fed(qtbot, WhatChangedPanel, tiny_loaded, trace, baseline)
    diff = stream_difference(trace, baseline)
    np.testing.assert_allclose(panel.stream_map.matrix, diff)
    assert not diff[:1].any() and not diff[1:, :4].any()  # before the layer and before the position: nothing
    assert diff[1, 4] == pytest.approx(1.0) and diff[2:, 5:].max() > 0  # zeroed there; later ones follow


def test_the_generation_pane_generates_with_the_interventions(qtbot, window, tmp_path) -> None:
    import json

    from explorer.core.generation.generate import generate
    from explorer.core.generation.sampling import SamplingParams

    pane = window.generation
    pane.set_prompt(PROMPT)
    pane.max_new.setValue(6)
    pane.greedy.setChecked(True)
    with qtbot.waitSignal(window.trace_applied, timeout=30_000):
        window.interventions.set(Intervention("attn", 0))
    with qtbot.waitSignal(pane.generation_finished, timeout=60_000):
        assert pane.generate()
    ids = window.loaded.encode(PROMPT)[0]
    params = SamplingParams(temperature=0.0, max_new_tokens=6)
    steered = generate(window.loaded, ids, params, interventions=[Intervention("attn", 0)]).token_ids
    assert pane.result.token_ids == steered
    assert [iv.key for iv in pane.result.interventions] == [("attn", 0, None, "zero", None)]
    pane.export_transcript(tmp_path / "t.json")
    saved = json.loads((tmp_path / "t.json").read_text())
    assert saved["interventions"] == [{"target": "attn", "layer": 0, "mode": "zero"}]
