"""Our GPT-2 forward pass against the reference implementation (transformers) on the same weights."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from explorer.core.trace import KINDS, CaptureSpec, capture

PROMPT = "The quick brown fox jumps over the lazy dog. The quick brown fox"
TOL = 1e-4


@pytest.fixture(scope="module")
def traced(tiny_gpt2):
    loaded, reference = tiny_gpt2
    ids = loaded.tokenizer.encode(PROMPT)
    trace = loaded.trace_ids(ids, CaptureSpec.full())
    with torch.no_grad():
        ref = reference(torch.tensor([ids]), output_attentions=True, output_hidden_states=True)
    return loaded, trace, ref


def test_logits_match_reference(traced):
    _, trace, ref = traced
    assert np.abs(trace["logits"] - ref.logits[0].numpy()).max() < TOL


def test_every_attention_pattern_matches_reference(traced):
    loaded, trace, ref = traced
    for layer in range(loaded.config.n_layers):
        ours = trace[f"blocks.{layer}.attn.pattern"]
        assert ours.shape == ref.attentions[layer][0].shape
        assert np.abs(ours - ref.attentions[layer][0].numpy()).max() < TOL
        for head in range(loaded.config.n_heads):
            assert np.abs(trace.head(layer, head) - ours[head]).max() < 1e-6


def test_hidden_states_match_reference(traced):
    loaded, trace, ref = traced
    L = loaded.config.n_layers
    for layer in range(L):
        assert np.abs(trace[f"blocks.{layer}.resid_pre"] - ref.hidden_states[layer][0].numpy()).max() < TOL
    # transformers' last hidden state is after the final LayerNorm; ours is before it
    with torch.no_grad():
        normed = loaded.model.ln_final(torch.from_numpy(np.array(trace["resid_final"])))
    assert np.abs(normed.numpy() - ref.hidden_states[L][0].numpy()).max() < TOL


def test_capture_does_not_change_the_logits(tiny_gpt2):
    loaded, _ = tiny_gpt2
    ids = torch.tensor([loaded.tokenizer.encode(PROMPT)])
    with torch.inference_mode():
        plain = loaded.model(ids)
    _, captured = capture(loaded.model, ids[0].tolist(), ["t"] * ids.shape[1], CaptureSpec.full())
    assert np.array_equal(plain[0].numpy(), captured)
    # recording every pattern takes the explicit path instead of the fused kernel: same math, float rounding
    _, everything = capture(loaded.model, ids[0].tolist(), ["t"] * ids.shape[1], CaptureSpec.everything())
    assert np.abs(plain[0].numpy() - everything).max() < 1e-5


def test_derived_values_equal_stored_ones(tiny_gpt2):
    """A compact trace (residual stream, q, k) re-derives everything the full capture stored."""
    loaded, _ = tiny_gpt2
    ids = loaded.tokenizer.encode(PROMPT)
    full = loaded.trace_ids(ids, CaptureSpec.everything())
    compact = loaded.trace_ids(ids, CaptureSpec.compact())
    assert compact.nbytes < full.nbytes / 3
    assert set(full.stored_keys()) <= set(compact.keys())
    for key in full.stored_keys():
        np.testing.assert_allclose(compact[key], full[key], atol=1e-6, rtol=0, err_msg=key)


def test_stored_and_derived_scores_agree_and_mask_is_neg_inf(tiny_gpt2):
    loaded, _ = tiny_gpt2
    ids = loaded.tokenizer.encode(PROMPT)
    full = loaded.trace_ids(ids, CaptureSpec.everything())
    for layer in range(loaded.config.n_layers):
        scores = full[f"blocks.{layer}.attn.scores"]
        upper = np.triu(np.ones(scores.shape[-2:], dtype=bool), 1)
        assert np.isneginf(scores[:, upper]).all() and np.isfinite(scores[:, ~upper]).all()
        for head in range(loaded.config.n_heads):
            derived = loaded.trace_ids(ids, CaptureSpec.compact()).head(layer, head, "scores")
            np.testing.assert_allclose(derived, scores[head], atol=1e-6)


def test_capture_selection_by_layer_kind_and_dtype(tiny_gpt2):
    loaded, _ = tiny_gpt2
    ids = loaded.tokenizer.encode(PROMPT)
    spec = CaptureSpec(kinds=frozenset({"qkv", "mlp"}), layers=frozenset({1}), dtype="float16")
    trace = loaded.trace_ids(ids, spec)
    assert sorted(trace.stored_keys()) == sorted(
        f"blocks.1.{s}" for s in ("attn.q", "attn.k", "attn.v", "mlp.pre", "mlp.post", "mlp.out"))
    assert all(trace[k].dtype == np.float16 for k in trace.stored_keys())
    assert trace.head(1, 0).shape == (len(ids), len(ids))
    with pytest.raises(KeyError):
        trace["blocks.0.attn.q"]  # layer 0 was not captured and has no stored input to rerun


def test_trace_arrays_are_read_only(traced):
    _, trace, _ = traced
    for key in ("logits", "blocks.0.attn.q", "blocks.0.attn.pattern"):
        with pytest.raises(ValueError):
            trace[key][0, 0] = 1.0


def test_estimated_bytes_equal_actual_bytes(tiny_gpt2):
    from explorer.core.trace import estimate_nbytes

    loaded, _ = tiny_gpt2
    ids = loaded.tokenizer.encode(PROMPT)
    for spec in (CaptureSpec.full(), CaptureSpec.compact(), CaptureSpec(kinds=frozenset(KINDS), dtype="float16")):
        trace = loaded.trace_ids(ids, spec)
        assert estimate_nbytes(loaded.config, len(ids), spec) == trace.nbytes - trace.token_ids.nbytes


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_matches_cpu(tiny_gpt2_dir):
    from explorer.core.checkpoint import load_checkpoint

    cpu = load_checkpoint(tiny_gpt2_dir, device="cpu")
    gpu = load_checkpoint(tiny_gpt2_dir, device="cuda")
    ids = cpu.tokenizer.encode(PROMPT)
    a, b = cpu.trace_ids(ids), gpu.trace_ids(ids)
    np.testing.assert_allclose(a["logits"], b["logits"], atol=1e-3)
    np.testing.assert_allclose(a.head(2, 1), b.head(2, 1), atol=1e-4)


def test_memo_computes_once_per_trace(traced):
    _, trace, _ = traced
    calls = []
    first = trace.memo(("test", 1), lambda: calls.append(1) or np.arange(3))
    again = trace.memo(("test", 1), lambda: calls.append(1) or np.arange(5))
    assert first is again and calls == [1]


def test_last_only_logits_and_context_guard(tiny_gpt2):
    from explorer.core.errors import PromptError

    loaded, _ = tiny_gpt2
    ids = torch.tensor([loaded.tokenizer.encode(PROMPT)])
    with torch.inference_mode():
        full = loaded.model(ids)
        last = loaded.model(ids, last_only=True)
        assert last.shape == (1, 1, full.shape[-1])
        np.testing.assert_allclose(last[0, 0].numpy(), full[0, -1].numpy(), atol=1e-5)
        with pytest.raises(PromptError, match="context of 128"):
            loaded.model(torch.zeros(1, 129, dtype=torch.long))
