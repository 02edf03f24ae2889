"""Every trace source hands its trace to the presenter, and once it says ``drawn`` every panel on screen
shows that source's numbers: a prompt pass, a timeline step, a trace file, a remote trace (nnsight on this
machine) and a comparison with a second model. The numbers are checked against the trace made again
independently (the model run afresh, the file read again), through what the user reads: the plots'
exported data."""

from __future__ import annotations

import numpy as np
import pytest

from explorer.core.analysis.compare import compare_traces
from explorer.core.analysis.residual import residual_norms
from explorer.core.checkpoint import load_checkpoint
from explorer.core.interop import read_trace_safetensors, write_trace_safetensors
from explorer.ui.session.compare import b_trace
from explorer.ui.session.frame import COMPARISON, FILE, PROMPT, REMOTE, STEP
from tests.core.decoder_reference import build
from tests.ui.screen import every_panel_on_screen, exported

TEXT = "The quick brown fox jumps over the lazy dog because"


def drawn_from(qtbot, window, kind: str, start, timeout: int = 60_000):
    """Start a source (``start()``) and wait for the presenter's ``drawn`` of a frame of ``kind``."""
    with qtbot.waitSignal(window.presenter.drawn, timeout=timeout,
                          check_params_cb=lambda frame: frame.source.kind == kind) as blocker:
        start()
    return blocker.args[0]


def assert_every_panel_shows(window, frame, expected, atol: float = 1e-5) -> None:
    """Every panel on screen draws ``frame``'s trace, and what the attention and residual panels plot
    (their exported numbers) is ``expected``'s."""
    shown = window.presenter.shown_ids()
    assert {"tokenization", "attention", "residual"} <= set(shown), shown
    for panel_id in shown:
        assert window.panel(panel_id).trace is frame.trace, panel_id
        view = frame.views.get(panel_id)
        assert view is None or view.trace is frame.trace, panel_id
    assert list(frame.trace.token_ids) == list(expected.token_ids)
    layer, head = window.selection.layer, window.selection.head
    np.testing.assert_allclose(exported(window.panel("attention"), "attention, selected head"),
                               expected.head(layer, head, "pattern"), atol=atol)
    np.testing.assert_allclose(exported(window.panel("residual"), "residual norms"), residual_norms(expected),
                               rtol=1e-4, atol=atol)


@pytest.fixture
def on_screen(qtbot, window):
    every_panel_on_screen(qtbot, window)
    return window


def test_a_prompt_pass(qtbot, on_screen):
    window = on_screen
    frame = drawn_from(qtbot, window, PROMPT, lambda: window.session.set_prompt(TEXT))
    assert frame.source.text == TEXT and frame.trace is window.trace
    assert_every_panel_shows(window, frame, window.loaded.trace(TEXT))
    assert window.presenter.wait_until_idle(60) and window.presenter.is_idle()  # every view complete too
    assert not any(window.panel(p).computing() for p in window.presenter.shown_ids())


def test_a_timeline_step(qtbot, on_screen):
    window = on_screen
    ids = window.loaded.encode(TEXT)[0]
    timeline, n_prompt = window.session.timeline, 4
    # the whole sequence traced once, its last step cut from it
    frame = drawn_from(qtbot, window, STEP, lambda: timeline.start(TEXT, ids, n_prompt))
    assert frame.trace.n_tokens == len(ids) and timeline.full is not None
    frame = drawn_from(qtbot, window, STEP, lambda: timeline.set_step(3))
    assert frame.trace.n_tokens == n_prompt + 3 and frame.source.ids == tuple(ids[:n_prompt + 3])
    assert_every_panel_shows(window, frame, window.loaded.trace_ids(ids[:n_prompt + 3]))


def test_a_trace_file(qtbot, on_screen, tmp_path):
    window = on_screen
    written = window.loaded.trace(TEXT)
    path = write_trace_safetensors(written, tmp_path / "trace.safetensors", prompt=TEXT)
    frame = drawn_from(qtbot, window, FILE, lambda: window.open_trace_file(path))
    assert frame.source.label == str(path) and not frame.trace.has_model
    assert_every_panel_shows(window, frame, read_trace_safetensors(path))
    assert_every_panel_shows(window, frame, written)


def test_a_remote_trace(qtbot, on_screen, tmp_path):
    window = on_screen
    folder = tmp_path / "llama"
    build("LlamaConfig", "LlamaForCausalLM", num_hidden_layers=3, num_key_value_heads=2).save_pretrained(folder)
    window.prompt.set_text("5 17 99 3 50 42 42 7")
    dialog = window.remote_traces.open()
    dialog.model.setText(str(folder))
    dialog.remote.setChecked(False)  # nnsight on this machine (the network is not needed)
    dialog.estimate_button.click()
    qtbot.waitUntil(dialog.start_button.isEnabled, timeout=60_000)
    ids = list(dialog.job.ids)
    frame = drawn_from(qtbot, window, REMOTE, dialog.start_button.click, timeout=120_000)
    assert frame.source.label == f"nnsight: {folder}"
    assert_every_panel_shows(window, frame, load_checkpoint(folder, device="cpu").trace_ids(ids), atol=1e-4)


def test_a_comparison(qtbot, on_screen, tiny_checkpoint):
    window = on_screen
    compare = window.session.compare
    frame = drawn_from(qtbot, window, COMPARISON, lambda: compare.open(str(tiny_checkpoint)))
    assert frame.trace is window.trace and frame.extra is compare.result and window.compare_dock.isVisible()
    assert_every_panel_shows(window, frame, window.loaded.trace_ids(list(window.trace.token_ids)))
    # the comparison view shows this trace against the second model's trace of the same ids
    again = compare_traces(frame.trace, b_trace(frame.trace.token_ids, compare.other))
    view = window.compare_dock.view
    np.testing.assert_allclose(view.cos.matrix, again.resid_cos, atol=1e-5)
    np.testing.assert_allclose(view.js.matrix, again.head_js, atol=1e-6)
    # an edit while comparing: the prompt's frame, then the comparison's of that very trace
    frame = drawn_from(qtbot, window, COMPARISON, lambda: window.session.set_prompt(TEXT))
    assert frame.source.text == TEXT and frame.extra.a is frame.trace is window.trace
    assert_every_panel_shows(window, frame, window.loaded.trace(TEXT))
