"""The patching panel's modes: attribution estimates (ringed, "estimate" in their tooltips), the exact
grid with its time estimate shown before it starts, exact patches of the top-k and of a clicked cell."""

from __future__ import annotations

import numpy as np
import pytest

from explorer.core.interventions.attribution import attribution_patching
from explorer.core.interventions.patching import activation_patching
from explorer.ui.panels.interventions import PatchingPanel
from explorer.ui.panels.interventions import patching as patching_module
from explorer.ui.panels.interventions.estimate_marks import ESTIMATE, EXACT
from tests.ui.test_interventions_ui import shown


@pytest.fixture
def ready(qtbot, window):
    """The patching panel with a corrupted prompt typed: (panel, clean ids, corrupted ids, target)."""
    panel = next(p for p in window.panels if isinstance(p, PatchingPanel))
    shown(qtbot, window, panel)
    clean = window.loaded.encode(window.prompt.text())[0]
    corrupt = list(clean)
    corrupt[1] = clean[0]
    panel.corrupt_edit.setText(window.loaded.tokenizer.decode(corrupt))
    assert panel.run_button.isEnabled()
    return panel, clean, corrupt, int(np.argmax(window.trace["logits"][-1]))


def run_to_end(qtbot, panel, action) -> list:
    """Start a run with ``action`` and collect what its worker yields, with the status line after the panel
    took each (a spy on the panel's own slot: the worker may yield before a test could connect to it)."""
    seen = []
    own = panel._on_update

    def spy(update) -> None:
        own(update)
        seen.append((update, panel.status.text()))

    panel._on_update = spy
    try:
        action()
        assert panel._worker is not None
        qtbot.waitUntil(lambda: panel._worker is None, timeout=60_000)  # its finished signal cleared it
    finally:
        del panel._on_update
    return seen


def test_estimate_mode_rings_its_cells_and_refines_them_exactly(qtbot, window, ready) -> None:
    panel, clean, corrupt, target = ready
    model = window.loaded.model
    panel.mode_box.setCurrentIndex(panel.mode_box.findData(patching_module.ESTIMATE))
    seen = run_to_end(qtbot, panel, panel.start)
    assert len(seen) == 1  # one estimate, no exact run
    expected = attribution_patching(model, clean, corrupt, target)
    np.testing.assert_allclose(panel.resid_map.matrix, expected.resid, atol=1e-5)
    np.testing.assert_allclose(panel.head_map.matrix, expected.heads, atol=1e-5)
    L, n = model.cfg.n_layers, len(clean)
    ringed = panel.resid_map.estimated
    assert ringed[:L].all() and ringed[L, n - 1] and not ringed[L, :n - 1].any()  # the final row: only the last
    assert panel.head_map.estimated.all() and panel.legend.isVisible()
    assert panel.head_map.marks.data.shape[0] == panel.head_map.estimated.size  # one ring per estimated cell
    assert ESTIMATE in panel.head_map.cell_text(0, 0)
    assert "Estimates" in panel.status.text() and "about" in panel.status.text()
    assert "about" in panel.mode_box.itemText(panel.mode_box.findData(patching_module.EXACT))
    assert panel.top_button.isEnabled()

    exact = activation_patching(model, clean, corrupt, target)
    panel.top_k.setValue(3)
    seen = run_to_end(qtbot, panel, panel.exact_top_k)
    ranked = sorted([(abs(v), ("resid", r, c)) for (r, c), v in np.ndenumerate(expected.resid)
                     if ringed[r, c]] + [(abs(v), ("head", r, c)) for (r, c), v in np.ndenumerate(expected.heads)],
                    key=lambda item: -item[0])
    top = [cell for _, cell in ranked[:3]]
    for kind, layer, index in top:
        heatmap, grid = (panel.resid_map, exact.resid) if kind == "resid" else (panel.head_map, exact.heads)
        assert not heatmap.estimated[layer, index]
        assert heatmap.matrix[layer, index] == pytest.approx(grid[layer, index], abs=1e-4)
        assert EXACT in heatmap.cell_text(layer, index)
    assert sum(len(update.cells) for update, _ in seen) == 3  # exactly those three (a batch per first position)
    left = int(panel.resid_map.estimated.sum() + panel.head_map.estimated.sum())
    assert left == int(ringed.sum()) + expected.heads.size - 3

    # click an estimated head: its exact value replaces the estimate (the window does not run anything)
    row, col = map(int, np.argwhere(panel.head_map.estimated)[0])
    prompt = window.prompt.text()
    run_to_end(qtbot, panel, lambda: panel.head_map.cell_clicked.emit(row, col))
    assert not panel.head_map.estimated[row, col]
    assert panel.head_map.matrix[row, col] == pytest.approx(exact.heads[row, col], abs=1e-4)
    assert window.prompt.text() == prompt


def test_exact_mode_shows_its_time_before_the_exact_runs(qtbot, window, ready) -> None:
    panel, clean, corrupt, target = ready
    panel.mode_box.setCurrentIndex(panel.mode_box.findData(patching_module.EXACT))
    seen = run_to_end(qtbot, panel, panel.start)
    first, status = seen[0]
    assert hasattr(first, "exact_runs")  # the estimate comes first, and the status gives the exact grid's time
    assert "The exact full grid" in status and "about" in status and "Running it now" in status
    assert all(hasattr(update, "cells") for update, _ in seen[1:]) and len(seen) > 1
    exact = activation_patching(window.loaded.model, clean, corrupt, target, batch_size=16)
    np.testing.assert_allclose(panel.resid_map.matrix, exact.resid, atol=1e-4)
    np.testing.assert_allclose(panel.head_map.matrix, exact.heads, atol=1e-4)
    assert not panel.resid_map.estimated.any() and not panel.head_map.estimated.any()
    assert not panel.legend.isVisible() and "Done:" in panel.status.text()
    assert first.exact_runs == panel.result.runs


def test_a_large_grid_starts_in_estimate_mode(qtbot, window, ready, monkeypatch) -> None:
    panel = ready[0]
    assert panel.mode_box.currentData() == patching_module.EXACT  # the tiny model's grid is small
    monkeypatch.setattr(patching_module, "LARGE_GRID", 10)
    panel.draw(panel.prepare(window.trace, panel.snapshot()))
    assert panel.mode_box.currentData() == patching_module.ESTIMATE


def test_run_patching_between_a_model_change_and_its_first_run_says_to_wait(qtbot, window, ready,
                                                                            other_checkpoint) -> None:
    """Issue 34: Run clicked after another model loaded but before its first run reached the panel raised
    'ValueError: 50 column labels for 0 columns' (the old trace's tokens over the new model's empty grid)."""
    from PySide6.QtCore import Qt
    from PySide6.QtTest import QTest

    panel = ready[0]
    clicked = []

    def click_run(_loaded) -> None:  # connected after the panel: the new model is set, its trace not yet shown
        if panel.run_button.isEnabled():
            QTest.mouseClick(panel.run_button, Qt.MouseButton.LeftButton)
        clicked.append(panel.status.text())

    window.session.model_loaded.connect(click_run)
    with qtbot.waitSignal(window.trace_applied, timeout=60_000):
        window.open_checkpoint(str(other_checkpoint))
    window.session.model_loaded.disconnect(click_run)
    assert clicked and "has not run on this model yet" in clicked[0] and not panel.cancel_button.isEnabled()
    panel.corrupt_edit.setText("")  # an empty corrupted prompt: a line in the panel, no grid of 0 columns
    QTest.mouseClick(panel.run_button, Qt.MouseButton.LeftButton)
    assert "has 0 tokens" in panel.status.text() and not panel.cancel_button.isEnabled()
