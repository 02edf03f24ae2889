"""State follows the model and the prompt: after a model switch and after a prompt edit, no view shows
values computed for the previous model or prompt without saying so."""

from __future__ import annotations

import numpy as np

from explorer.core.display.labels import token_labels
from explorer.core.display.tokens import quoted, vocab_quoted
from explorer.ui.generation.pane import MODEL_CHANGED, PROMPT_CHANGED
from explorer.ui.panels.interventions import DLAPanel, PatchingPanel
from explorer.ui.panels.interventions.dla import dla_target
from explorer.ui.panels.interventions.patching import STALE_PROMPT

PROMPT = "The cat sat on the mat, and the dog sat on the log."


def raised(qtbot, window, panel) -> None:
    next(d for d in window.docks if d.panel is panel).raise_()
    qtbot.waitUntil(lambda: panel.trace is window.trace and not panel.computing(), timeout=30_000)


def switch_model(qtbot, window, checkpoint) -> None:
    """Open another checkpoint and wait for its first trace."""
    with qtbot.waitSignal(window.model_loaded, timeout=30_000):
        window.open_checkpoint(str(checkpoint))
    loaded = window.loaded
    qtbot.waitUntil(lambda: window.controller.is_idle() and window.trace is not None
                    and window.trace.config.n_layers == loaded.config.n_layers, timeout=30_000)


def type_prompt(qtbot, window, text: str) -> None:
    """Edit the main prompt as a user does (the text box's own signal), and wait for its trace."""
    with qtbot.waitSignal(window.trace_applied, timeout=30_000):
        window.prompt.edit.setPlainText(text)
    qtbot.waitUntil(lambda: window.controller.is_idle(), timeout=30_000)


def run_patching(qtbot, window, panel) -> None:
    clean = window.loaded.encode(window.prompt.text())[0]
    corrupt_ids = list(clean)
    corrupt_ids[1] = clean[0]
    panel.corrupt_edit.setText(window.loaded.tokenizer.decode(corrupt_ids))
    panel.start()
    qtbot.waitUntil(lambda: panel._worker is None and panel.result is not None, timeout=60_000)
    assert "clean" in panel.status.text() and panel.head_map.matrix.size


def test_patching_grids_are_cleared_by_another_model_and_say_so_under_another_prompt(
        qtbot, window, other_checkpoint) -> None:
    panel = next(p for p in window.panels if isinstance(p, PatchingPanel))
    raised(qtbot, window, panel)
    run_patching(qtbot, window, panel)
    done = panel.status.text()
    old_prompt = window.prompt.text()
    type_prompt(qtbot, window, PROMPT)
    assert panel.status.text() == STALE_PROMPT.format(clean=quoted(old_prompt, 40), corrupt=quoted(panel._corrupt_text, 40))
    type_prompt(qtbot, window, old_prompt)  # back to the prompt the grids are for
    assert panel.status.text() == done
    switch_model(qtbot, window, other_checkpoint)
    raised(qtbot, window, panel)
    assert panel.result is None and panel.resid_map.matrix.size == 0 and panel.head_map.matrix.size == 0
    assert "clean" not in panel.status.text() and "new model" in panel.status.text()
    assert panel._grid_data("resid")[0].size == 0  # nothing of the old model to export either


def test_a_patching_cell_changes_the_generation_prompt_with_the_main_one(qtbot, window) -> None:
    panel = next(p for p in window.panels if isinstance(p, PatchingPanel))
    raised(qtbot, window, panel)
    run_patching(qtbot, window, panel)
    with qtbot.waitSignal(window.trace_applied, timeout=30_000):
        panel.resid_map.cell_clicked.emit(1, 1)
    assert window.prompt.text() == panel._corrupt_text
    assert window.generation.prompt_edit.toPlainText() == panel._corrupt_text


def generated(qtbot, pane, n: int = 5) -> None:
    pane.max_new.setValue(n)
    pane.greedy.setChecked(True)
    with qtbot.waitSignal(pane.generation_finished, timeout=60_000):
        assert pane.generate()
    pane.select_step(2)
    assert pane.step_spin.value() == 2 and "Stopped" in pane.status.text() and pane.text_view.n_tokens


def assert_cleared(pane, why: str) -> None:
    assert pane.steps == [] and pane.result is None and pane.text_view.n_tokens == 0
    assert pane.status.text() == why and "Stopped" not in pane.status.text()
    assert pane.step_spin.value() == 0 and pane.step_spin.maximum() == 0
    assert pane.chart.values.size == 0


def test_the_generation_pane_clears_its_continuation_for_a_new_prompt_or_model(
        qtbot, window, other_checkpoint) -> None:
    pane = window.generation
    generated(qtbot, pane)
    type_prompt(qtbot, window, PROMPT)
    assert pane.prompt_edit.toPlainText() == PROMPT
    assert_cleared(pane, PROMPT_CHANGED)
    generated(qtbot, pane)
    pane.click_token(1)  # a clicked token becomes the window's trace: the continuation stays
    qtbot.waitUntil(lambda: window.controller.is_idle(), timeout=30_000)
    assert pane.prompt_edit.toPlainText() == PROMPT and len(pane.steps) == 5
    switch_model(qtbot, window, other_checkpoint)
    assert_cleared(pane, MODEL_CHANGED)


def test_max_new_tokens_follows_the_context_cap_and_leaves_the_worked_examples(
        qtbot, make_window, worked_loaded, tiny_loaded) -> None:
    from explorer.ui.generation import GenerationPane
    from explorer.ui.session.selection import Selection

    pane = GenerationPane(Selection())
    qtbot.addWidget(pane)
    assert pane.max_new.value() == 64
    pane.set_model(worked_loaded)
    assert worked_loaded.config.n_ctx == 16 and pane.max_new.value() == 16 and pane.max_new.maximum() == 16
    pane.set_model(tiny_loaded)  # a 64-token context: the 64 chosen before come back, not the cap of 16
    assert pane.max_new.maximum() == 64 and pane.max_new.value() == 64
    pane.max_new.setValue(10)
    pane.set_model(worked_loaded)
    pane.set_model(tiny_loaded)
    assert pane.max_new.value() == 10


def test_the_dla_target_follows_the_model_and_the_prompt(qtbot, window, other_checkpoint) -> None:
    panel = next(p for p in window.panels if isinstance(p, DLAPanel))

    def check() -> None:
        raised(qtbot, window, panel)
        qtbot.waitUntil(lambda: panel.result is not None, timeout=30_000)
        trace, cfg = window.trace, window.trace.config
        last = trace.n_tokens - 1
        assert panel.result.position == last and panel.result.target == dla_target(trace, last)
        assert panel.heatmap.matrix.shape == (cfg.n_layers, cfg.n_heads + 1)
        assert vocab_quoted(window.loaded.tokenizer, panel.result.target) in panel.info.text()

    check()
    type_prompt(qtbot, window, PROMPT)
    check()
    switch_model(qtbot, window, other_checkpoint)
    check()


def test_every_panel_shows_the_current_trace_after_a_model_switch_and_a_prompt_edit(
        qtbot, window, other_checkpoint) -> None:
    """Each panel's exported data (what its plots show) has the current trace's tokens, layers and heads."""
    def check() -> None:
        trace, cfg = window.trace, window.trace.config
        labels = token_labels(trace.tokens)
        for panel in [d.panel for d in window.docks if not d.isHidden()]:  # not those that do not apply
            raised(qtbot, window, panel)
            for exportable in panel.exportables():
                data, rows, cols = exportable.data()
                data = np.asarray(data)
                for names in (rows or [], cols or []):
                    positions = [n.split(":")[0] for n in names]
                    if names and all(p.isdigit() for p in positions) and \
                            [int(p) for p in positions] == list(range(int(positions[0]), int(positions[0]) + len(names))):
                        # a token axis (not vocabulary ids): this prompt's tokens, at their positions
                        assert set(names) <= set(labels), (panel.title, exportable.name, names[:4], labels[:4])
                    layers = {int(n[1:]) for n in names if n[:1] == "L" and n[1:].isdigit()}
                    heads = {int(n[1:]) for n in names if n[:1] == "H" and n[1:].isdigit()}
                    assert all(x < cfg.n_layers for x in layers), (panel.title, exportable.name, layers)
                    assert all(x < cfg.n_heads for x in heads), (panel.title, exportable.name, heads)

    switch_model(qtbot, window, other_checkpoint)
    check()
    type_prompt(qtbot, window, PROMPT)
    check()
