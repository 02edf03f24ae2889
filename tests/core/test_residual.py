"""Residual stream across depth: norms, sublayer contributions, cosines, logit lens (headless)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from explorer.core import worked_example
from explorer.core.config import ModelConfig
from explorer.core.model import Transformer
from explorer.core.analysis.residual import (LogitLens, boundary_labels, consecutive_cosine, cosine_rows,
                                    logit_lens, residual_norms, residual_stack, sublayer_contributions)
from explorer.core.trace import CaptureSpec, Trace, capture

IDS = [464, 2068, 7586, 21831, 18045, 625, 262, 16931, 3290, 13, 383, 2068]  # GPT-2 ids, one repeat


def _softmax64(logits: np.ndarray) -> np.ndarray:
    x = logits.astype(np.float64)
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.fixture(scope="module")
def gpt2_trace(tiny_gpt2):
    loaded, _ = tiny_gpt2
    return loaded.trace_ids(IDS, CaptureSpec.full())


def _tiny(spec: CaptureSpec | None = None, **overrides) -> Trace:
    cfg = ModelConfig(**{**dict(vocab_size=40, n_ctx=32, d_model=16, n_layers=3, n_heads=2, d_head=8, d_ff=32),
                         **overrides})
    torch.manual_seed(1)
    model = Transformer(cfg).eval()
    ids = [3, 7, 3, 11, 5, 3, 7]
    return capture(model, ids, [str(i) for i in ids], spec or CaptureSpec.full())[0]


def test_stack_and_norms_by_hand(gpt2_trace):
    trace = gpt2_trace
    L, n, d = trace.config.n_layers, trace.n_tokens, trace.config.d_model
    stack = residual_stack(trace)
    assert stack.shape == (L + 1, n, d) and stack.dtype == np.float32
    for layer in range(L):
        np.testing.assert_array_equal(stack[layer], trace[f"blocks.{layer}.resid_pre"])
    np.testing.assert_array_equal(stack[L], trace["resid_final"])
    norms = residual_norms(trace)
    assert norms.shape == (L + 1, n)
    for layer in range(L):
        np.testing.assert_allclose(norms[layer], np.linalg.norm(trace[f"blocks.{layer}.resid_pre"], axis=-1),
                                   rtol=1e-6)
    np.testing.assert_allclose(norms[L], np.linalg.norm(trace["resid_final"], axis=-1), rtol=1e-6)
    # boundary 0 is the embedding plus the learned positions
    np.testing.assert_allclose(stack[0], trace["embed"] + trace["pos_embed"], atol=1e-6)
    assert boundary_labels(L) == ["embed"] + [f"after {i}" for i in range(L)]


def test_sublayer_contributions_are_the_steps_of_a_pre_norm_stream(gpt2_trace):
    trace = gpt2_trace
    L = trace.config.n_layers
    contrib = sublayer_contributions(trace)
    assert set(contrib) == {"attn", "mlp"}
    assert contrib["attn"].shape == contrib["mlp"].shape == (L, trace.n_tokens)
    for layer in range(L):
        pre, mid = trace[f"blocks.{layer}.resid_pre"], trace[f"blocks.{layer}.resid_mid"]
        nxt = trace[f"blocks.{layer + 1}.resid_pre"] if layer + 1 < L else trace["resid_final"]
        np.testing.assert_allclose(mid - pre, trace[f"blocks.{layer}.attn.out"], atol=1e-5)
        np.testing.assert_allclose(nxt - mid, trace[f"blocks.{layer}.mlp.out"], atol=1e-5)
        np.testing.assert_allclose(contrib["attn"][layer], np.linalg.norm(mid - pre, axis=-1), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(contrib["mlp"][layer], np.linalg.norm(nxt - mid, axis=-1), rtol=1e-4, atol=1e-5)


def test_sublayer_contributions_of_an_attention_only_model_and_derived_outputs():
    model, tokenizer = worked_example.build()
    ids = tokenizer.encode(worked_example.PROMPT)
    trace, _ = capture(model, ids, tokenizer.displays(ids), CaptureSpec.full())
    contrib = sublayer_contributions(trace)
    np.testing.assert_array_equal(contrib["mlp"], np.zeros((1, 3), np.float32))
    out = trace["blocks.0.attn.out"]
    np.testing.assert_allclose(trace["resid_final"] - trace["blocks.0.resid_pre"], out, atol=1e-6)
    np.testing.assert_allclose(contrib["attn"][0], np.linalg.norm(out, axis=-1), rtol=1e-6)
    # a compact trace stores no sublayer outputs: they are derived by re-running the blocks
    compact = _tiny(CaptureSpec.compact())
    assert "blocks.0.attn.out" not in compact.stored_keys()
    full = _tiny()
    for key in ("attn", "mlp"):
        np.testing.assert_allclose(sublayer_contributions(compact)[key], sublayer_contributions(full)[key],
                                   rtol=1e-5, atol=1e-6)
    detached = Trace(compact.token_ids, compact.tokens, compact.config,
                     {k: compact[k] for k in compact.stored_keys()})
    with pytest.raises(KeyError):
        sublayer_contributions(detached)


def test_consecutive_cosine():
    a = np.array([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
    b = np.array([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0], [-2.0, 0.0, 0.0]])
    np.testing.assert_allclose(cosine_rows(a, a * 3.0), [1.0, 0.0, 1.0])  # identical directions: 1
    np.testing.assert_allclose(cosine_rows(a, b), [1.0, 0.0, -1.0])
    trace = _tiny()
    cos = consecutive_cosine(trace)
    stack = residual_stack(trace).astype(np.float64)
    assert cos.shape == (trace.config.n_layers, trace.n_tokens)
    for layer in range(trace.config.n_layers):
        for i in range(trace.n_tokens):
            x, y = stack[layer, i], stack[layer + 1, i]
            assert cos[layer, i] == pytest.approx(x @ y / (np.linalg.norm(x) * np.linalg.norm(y)), abs=1e-6)


def test_logit_lens_last_row_is_the_model_prediction(gpt2_trace):
    trace = gpt2_trace
    L, n = trace.config.n_layers, trace.n_tokens
    lens = logit_lens(trace, top=5)
    assert isinstance(lens, LogitLens) and lens.n_boundaries == L + 1
    assert lens.ids.shape == lens.probs.shape == lens.logits.shape == (L + 1, n, 5)
    assert lens.target_probs.shape == lens.target_ranks.shape == (L + 1, n - 1)
    logits = trace["logits"]
    probs = _softmax64(logits)
    np.testing.assert_array_equal(lens.ids[-1, :, 0], logits.argmax(-1))
    np.testing.assert_allclose(lens.probs[-1], np.take_along_axis(probs, lens.ids[-1], -1), atol=1e-5)
    np.testing.assert_allclose(lens.logits[-1], np.take_along_axis(logits, lens.ids[-1], -1), atol=1e-4)
    assert np.all(np.diff(lens.probs, axis=-1) <= 1e-7)  # most likely first
    # the real next token's probability and rank, by hand
    nxt = np.array(IDS[1:])
    np.testing.assert_allclose(lens.target_probs[-1], probs[np.arange(n - 1), nxt], atol=1e-5)
    ranks = (logits[:-1] > logits[np.arange(n - 1), nxt][:, None]).sum(-1)
    np.testing.assert_array_equal(lens.target_ranks[-1], ranks)
    entropy = -(probs * np.log(np.where(probs > 0, probs, 1.0))).sum(-1)
    np.testing.assert_allclose(lens.entropy[-1], entropy, rtol=1e-4, atol=1e-4)
    # intermediate rows: the same readout of the earlier streams
    model = trace._model
    with torch.no_grad():
        mid = model.final_logits(torch.from_numpy(np.array(trace["blocks.1.resid_pre"]))[None])[0].numpy()
    np.testing.assert_array_equal(lens.ids[1, :, 0], mid.argmax(-1))
    np.testing.assert_allclose(lens.target_probs[1], _softmax64(mid)[np.arange(n - 1), nxt], atol=1e-5)
    first = lens.first_correct_boundary()
    assert first.shape == (n - 1,) and np.all((first == -1) == (lens.target_ranks[-1] != 0))


def test_logit_lens_chunks_vocab_limit_and_no_model():
    trace = _tiny(n_layers=2, norm="rmsnorm", positions="rotary", activation="silu", gated_ffn=True)
    whole = logit_lens(trace, top=3)
    chunked = logit_lens(trace, top=3, chunk_elements=2 * trace.config.vocab_size)  # two positions a chunk
    for field in ("ids", "target_ranks"):
        np.testing.assert_array_equal(getattr(whole, field), getattr(chunked, field))
    for field in ("probs", "logits", "target_probs", "entropy"):  # matmul rounding may depend on the batch
        np.testing.assert_allclose(getattr(whole, field), getattr(chunked, field), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(whole.ids[-1, :, 0], trace["logits"].argmax(-1))
    limited = logit_lens(trace, top=50, vocab_size=10)
    assert limited.ids.shape[-1] == 10 and limited.ids.max() < 10
    np.testing.assert_allclose(limited.probs.sum(-1), 1.0, atol=1e-5)  # all of the 10 ids: the whole mass
    detached = Trace(trace.token_ids, trace.tokens, trace.config, {"resid_final": trace["resid_final"]})
    assert logit_lens(detached) is None


def test_logit_lens_post_norm_and_float16_storage():
    trace = _tiny(CaptureSpec.full(dtype="float16"), norm_placement="post", positions="sinusoidal")
    lens = logit_lens(trace, top=2)
    # the lens reads the float16-stored stream; the stored logits are float16-rounded too
    probs = _softmax64(trace["logits"])
    np.testing.assert_array_equal(lens.ids[-1, :, 0], trace["logits"].argmax(-1))
    np.testing.assert_allclose(lens.probs[-1], np.take_along_axis(probs, lens.ids[-1], -1), atol=5e-3)
    with torch.no_grad():
        exact = trace._model.final_logits(torch.from_numpy(trace["resid_final"].astype(np.float32))[None])[0]
    np.testing.assert_allclose(lens.probs[-1], np.take_along_axis(_softmax64(exact.numpy()), lens.ids[-1], -1),
                               atol=1e-5)
    assert residual_stack(trace).dtype == np.float32



def test_logit_lens_ranks_tied_logits_by_lower_id():
    trace = _tiny(tie_embeddings=False)
    with torch.no_grad():  # ids 3 and 5 get identical un-embedding rows, hence identical logits
        trace._model.unembed.weight[5] = trace._model.unembed.weight[3]
    lens = logit_lens(trace, top=40)
    with torch.no_grad():  # the stored logits predate the change: recompute what the lens reads
        logits = trace._model.final_logits(torch.from_numpy(np.array(trace["resid_final"]))[None])[0].numpy()
    nxt = trace.token_ids[1:]
    for i, t in enumerate(nxt):
        row = logits[i]
        want = np.count_nonzero(row > row[t]) + np.count_nonzero(row[:t] == row[t])
        assert lens.target_ranks[-1, i] == want
        order = lens.ids[-1, i].tolist()
        assert order.index(3) < order.index(5) and abs(order.index(3) - order.index(5)) == 1
    assert 5 in nxt.tolist() and 3 in nxt.tolist()
