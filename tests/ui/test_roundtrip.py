"""From a notebook to the app and back: explorer.show on an in-memory transformers model, and a
trace exported as safetensors reopened in the window without its model."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import explorer
from explorer.core.interop import write_trace_safetensors
from explorer.ui.window.docks import dock_of

PROMPT = "Hello world, the model in my notebook"


@pytest.fixture(scope="module")
def hf_gpt2():
    """A small random transformers GPT-2 with GPT-2's own tokenizer object (built in memory)."""
    transformers = pytest.importorskip("transformers")
    from gpt2_files import transformers_gpt2_tokenizer  # tests/gpt2_files.py

    torch.manual_seed(0)
    config = transformers.GPT2Config(n_embd=32, n_layer=2, n_head=2, n_positions=64, vocab_size=50257,
                                     attn_implementation="eager")
    return transformers.GPT2LMHeadModel(config).eval(), transformers_gpt2_tokenizer()


def test_show_opens_an_in_memory_transformers_model_and_traces_it_exactly(qtbot, settings, hf_gpt2):
    model, tokenizer = hf_gpt2
    window = explorer.show(model, tokenizer, prompt=PROMPT, block=False, device="cpu", settings=settings)
    qtbot.addWidget(window)
    qtbot.waitUntil(lambda: window.trace is not None, timeout=60_000)
    trace = window.trace
    ids = tokenizer(PROMPT)["input_ids"]
    assert trace.token_ids.tolist() == ids and window.prompt.text() == PROMPT
    with torch.no_grad():
        out = model(torch.tensor([ids]), output_hidden_states=True)
    np.testing.assert_allclose(trace["logits"], out.logits[0].numpy(), atol=1e-4, rtol=0)
    for layer in range(2):  # the residual stream entering each block is transformers' hidden state
        np.testing.assert_allclose(trace[f"blocks.{layer}.resid_pre"], out.hidden_states[layer][0].numpy(),
                                   atol=1e-5, rtol=0)
    assert window.source.startswith("memory:") and window.loaded.source == "in-memory transformers model"
    assert window.source not in window.recent.entries() and window.recent.last != window.source  # nothing to reopen
    window.close()


def test_a_trace_reopens_in_the_window_without_its_model(qtbot, window, tmp_path, other_checkpoint):
    original = window.trace
    path = write_trace_safetensors(original, tmp_path / "trace.safetensors", prompt=window.prompt.text())
    with qtbot.waitSignal(window.trace_applied, timeout=30_000):
        window.open_trace_file(path)
    shown = window.trace
    assert shown is not original and not shown.has_model
    assert shown.tokens == original.tokens
    np.testing.assert_array_equal(shown.head(1, 1), original.head(1, 1))
    np.testing.assert_array_equal(shown["blocks.1.mlp.post"], original["blocks.1.mlp.post"])
    assert window.loaded is None and window.prompt.edit.isReadOnly()
    assert "model is not loaded" in window.prompt.notice.text() and "trace.safetensors" in window.windowTitle()
    assert "(trace file)" in window.status.fields["model"].text()
    assert window.status.fields["params"].text() == "weights not loaded"
    assert window.controller.request("more text") == 0  # nothing to run it with
    residual = window.panel("residual")
    neurons = window.panel("neurons")
    for panel in (residual, neurons):  # a hidden tab is drawn when it is shown (progressive panels)
        dock_of(panel).raise_()
        qtbot.waitUntil(lambda panel=panel: panel.trace is shown, timeout=30_000)
    # opening a model again makes the prompt editable
    with qtbot.waitSignal(window.trace_applied, timeout=30_000):
        window.open_checkpoint(str(other_checkpoint))
    assert not window.prompt.edit.isReadOnly() and window.trace.has_model


def test_a_foreign_file_is_refused_with_a_message(qtbot, window, tmp_path, monkeypatch):
    from explorer.ui.window import open_trace

    shown = []
    monkeypatch.setattr(open_trace.QMessageBox, "critical", lambda parent, title, text: shown.append(text))
    bad = tmp_path / "not-a-trace.safetensors"
    bad.write_bytes(b"nonsense")
    before = window.trace
    window.open_trace_file(bad)
    qtbot.waitUntil(lambda: bool(shown), timeout=10_000)
    assert "cannot read not-a-trace.safetensors" in shown[0] and window.trace is before
