"""Numbers a learner reads must not mislead: the patching grid warns at a tiny clean-corrupted gap,
greedy tokens are coloured by the model's probability (not 1 after the controls), ranks count from 1,
"Analysing the prompt…" never stays for ever, What changed shows small probabilities as numbers and
bars, the candidate chart's axis shrinks to small probabilities."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

import explorer.ui  # noqa: F401
from explorer.core.analysis.changes import compare_runs
from explorer.core.errors import TokenizerError
from explorer.core.interventions.patching import gap_warning
from explorer.core.interventions.spec import Intervention
from explorer.core.trace import CaptureSpec
from explorer.ui.generation import GenerationPane, prob_colour
from explorer.ui.generation.candidate_chart import nice_limit
from explorer.ui.panels.interventions import PatchingPanel, WhatChangedPanel
from explorer.ui.panels.interventions.what_changed import prob_text
from explorer.ui.session.selection import Selection

PROMPT = "The cat sat on the mat, and the dog sat on the log."


def fed(qtbot, cls, loaded, trace):
    panel = cls(Selection())
    qtbot.addWidget(panel)
    panel.set_tokenizer(loaded.tokenizer)
    panel.selection.clamp(trace.config.n_layers, trace.config.n_heads, trace.n_tokens)
    panel.prepare(trace, panel.snapshot())
    panel.set_trace(trace)
    return panel


def test_the_patching_grid_warns_when_the_gap_is_tiny(qtbot, tiny_loaded):
    assert gap_warning(1.0, 0.97) is not None and "0.030 logits" in gap_warning(1.0, 0.97)
    assert gap_warning(3.0, -1.0) is None
    panel = fed(qtbot, PatchingPanel, tiny_loaded, tiny_loaded.trace(PROMPT))
    panel._target, panel._distractor = 5, None
    result = SimpleNamespace(cancelled=False, runs=10, batches=1, skipped=0, seconds=0.1, clean_metric=1.0,
                             corrupt_metric=0.97)
    panel._on_result(result)
    assert panel.status.text().startswith("⚠ Careful") and "mostly noise" in panel.status.text()
    panel._on_result(SimpleNamespace(**{**vars(result), "corrupt_metric": -2.0}))
    assert "Careful" not in panel.status.text() and "Done:" in panel.status.text()


def test_patch_command_warns_on_a_tiny_gap(tiny_checkpoint, tmp_path, capsys, monkeypatch):
    from explorer.cli import main
    from explorer.core.interventions import patching

    monkeypatch.setattr(patching, "SMALL_GAP", 1e9)  # every gap is "tiny": the warning's path
    assert main(["patch", "-c", str(tiny_checkpoint), "--device", "cpu", "--clean", "The cat sat",
                 "--corrupt", "The dog sat", "--target", " on", "-o", str(tmp_path / "p")]) == 0
    err = capsys.readouterr().err
    assert "warning: the clean and corrupted runs differ by only" in err


def test_greedy_tokens_are_coloured_by_the_models_probability_and_ranks_count_from_1(qtbot, tiny_loaded):
    pane = GenerationPane(Selection())
    qtbot.addWidget(pane)
    pane.resize(480, 860)
    pane.show()
    pane.set_model(tiny_loaded)
    pane.set_prompt("Hello world")
    pane.max_new.setValue(5)
    pane.random_seed.setChecked(False)
    pane.greedy.setChecked(True)
    with qtbot.waitSignal(pane.generation_finished, timeout=60_000) as blocker:
        assert pane.generate()
    steps = blocker.args[0].steps
    assert all(s.prob == 1.0 and s.rank == 0 for s in steps)  # after greedy: 1 for every token
    for step, fmt in zip(steps, pane.text_view.formats):
        logits = np.asarray(step.scores.logits, dtype=np.float64)
        own = np.exp(logits[step.token_id] - logits.max()) / np.exp(logits - logits.max()).sum()
        assert step.model_prob == pytest.approx(own)
        assert fmt.background().color() == prob_colour(own)
    assert min(s.model_prob for s in steps) < 0.5  # a random model is unsure: not the colour of p = 1
    assert prob_colour(min(s.model_prob for s in steps)) != prob_colour(1.0)
    tip = pane.tooltip_for(0)
    assert "rank 1 under the controls" in tip and "rank 0" not in tip
    pane.select_step(0)
    qtbot.waitUntil(lambda: "(rank 1)" in pane.info.text(), timeout=10_000)
    pane.stop()


def test_analysing_never_stays_with_an_empty_prompt_or_a_failing_one(qtbot, make_window, tiny_checkpoint,
                                                                     monkeypatch):
    from explorer.ui.window.loading import LoadingChrome

    monkeypatch.setattr(LoadingChrome, "prompt_for", lambda self, loaded, current: "")
    window = make_window()
    with qtbot.waitSignal(window.model_loaded, timeout=30_000):
        window.open_checkpoint(str(tiny_checkpoint))
    texts = lambda: [d.placeholder.text() for d in window.docks if hasattr(d, "placeholder")]  # noqa: E731
    qtbot.waitUntil(lambda: all("Type a prompt" in t for t in texts()), timeout=10_000)

    from explorer.core.loaded import LoadedModel

    def no_tokenizer(self, text):
        raise TokenizerError("this checkpoint has no tokenizer: give token ids")

    monkeypatch.setattr(LoadedModel, "encode", no_tokenizer)
    with qtbot.waitSignal(window.controller.failed, timeout=30_000):
        window.prompt.set_text("hello there")
        window.controller.request("hello there")
    qtbot.waitUntil(lambda: all("could not be analysed" in t and "no tokenizer" in t for t in texts()),
                    timeout=10_000)
    assert not any("Analysing" in t for t in texts())


def test_what_changed_on_a_flat_distribution_shows_numbers_and_bars(qtbot, tiny_loaded, monkeypatch):
    from explorer.ui.panels.interventions import what_changed
    from explorer.ui.session.frame import PROMPT, Source
    from explorer.ui.session.session import Session
    from explorer.ui.session.workers import TraceRequest, TraceResult

    assert prob_text(0.25) == "0.250" and prob_text(2e-5) == "2.0e-05" and prob_text(0.0) == "0.000"
    ids = tiny_loaded.encode(PROMPT)[0]
    trace = tiny_loaded.trace_ids(ids, interventions=[Intervention("attn", 0)])
    baseline = tiny_loaded.trace_ids(ids, CaptureSpec.compact())
    flat = np.zeros_like(baseline["logits"])  # every token 1 / V, with and without
    monkeypatch.setattr(what_changed, "comparison", lambda t, b, p: compare_runs(
        flat, flat, t.token_ids, t.n_tokens - 1 if p is None else p, 10))
    session = Session()  # the baseline is the Session's, as in the window
    session.presenter.present(TraceResult(TraceRequest(0, None, ""), trace, 0.0, baseline=baseline), Source(PROMPT))
    panel = WhatChangedPanel(Selection())
    qtbot.addWidget(panel)
    panel.session = session
    panel.set_tokenizer(tiny_loaded.tokenizer)
    panel.selection.clamp(trace.config.n_layers, trace.config.n_heads, trace.n_tokens)
    panel.prepare(trace, panel.snapshot())
    panel.set_trace(trace)
    ticks = panel.candidates.getAxis("left")._tickLevels[0]
    assert all("0.000\u21920.000" not in label for _, label in ticks)
    assert any("e-05" in label for _, label in ticks)
    x_range = panel.candidates.getViewBox().viewRange()[0]
    assert x_range[1] < 1.0 and x_range[1] >= float(panel.result.p_after.max())


def test_the_candidate_axis_shrinks_to_small_probabilities():
    assert nice_limit(0.4) == 0.5 and nice_limit(0.015) == 0.02
    for value in (0.004, 2e-4, 2e-5, 7e-7):
        limit = nice_limit(value)
        assert value < limit <= 5 * value * 1.06  # the longest bar is at least a fifth of the axis
