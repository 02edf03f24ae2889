"""The learner's matrices (core/analysis/inside_attention.py) and the token across layers (residual.py):
each against the forward pass itself (a real KV cache filled step by step, the layer's own output, a
softmax over the vocabulary by hand)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from explorer.core.analysis.inside_attention import head_qkv, heads_to_output, kv_cache_at, kv_head_of
from explorer.core.analysis.residual import boundary_labels, lens_columns, token_across_layers
from explorer.core.config import ModelConfig
from explorer.core.layers import KVCache
from explorer.core.model import Transformer
from explorer.core.trace import capture

IDS = [5, 17, 3, 40, 9, 22, 31, 8, 40, 9, 2, 11]


def _model(**extra) -> Transformer:
    torch.manual_seed(0)
    cfg = dict(vocab_size=64, n_ctx=32, d_model=32, n_layers=3, n_heads=4, d_head=8, d_ff=64)
    cfg.update(extra)
    return Transformer(ModelConfig(**cfg)).eval()


@pytest.fixture(scope="module", params=["gpt2", "llama-gqa"])
def traced(request):
    if request.param == "gpt2":
        model = _model()
    else:
        model = _model(arch="llama", norm="rmsnorm", positions="rotary", activation="silu", gated_ffn=True,
                       attn_bias=False, mlp_bias=False, n_kv_heads=2)
    trace, _ = capture(model, IDS, [f"t{i}" for i in IDS])
    return model, trace


def test_the_token_across_layers_is_the_softmax_at_every_boundary(traced):
    model, trace = traced
    position, token = 6, 40
    path = token_across_layers(trace, position, token)
    assert path.labels == tuple(boundary_labels(trace.config.n_layers)) and path.probs.shape == (4,)
    keys = [f"blocks.{layer}.resid_pre" for layer in range(trace.config.n_layers)] + ["resid_final"]
    for b, key in enumerate(keys):
        with torch.inference_mode():
            logits = model.final_logits(torch.as_tensor(trace[key][position])[None, None])[0, 0].double().numpy()
        p = np.exp(logits - logits.max())
        p /= p.sum()
        assert path.probs[b] == pytest.approx(p[token], rel=1e-5, abs=1e-7)
        assert path.ranks[b] == np.count_nonzero(logits > logits[token])
        assert path.logits[b] == pytest.approx(logits[token], rel=1e-5, abs=1e-5)
    final = trace["logits"][position].astype(np.float64)  # the last boundary is the model's own output
    assert path.probs[-1] == pytest.approx(np.exp(final[token] - final.max()) / np.exp(final - final.max()).sum(),
                                           rel=1e-5)
    # the real next token: the lens's own target probability and rank
    following = IDS[position + 1]
    block = lens_columns(trace, position, position + 1)
    same = token_across_layers(trace, position, following)
    np.testing.assert_allclose(same.probs, block.target_probs[:, 0], rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(same.ranks, block.target_ranks[:, 0])


def test_the_token_across_layers_refuses_what_is_not_there(traced):
    _model_, trace = traced
    with pytest.raises(ValueError, match="position"):
        token_across_layers(trace, len(IDS), 1)
    with pytest.raises(ValueError, match="vocabulary"):
        token_across_layers(trace, 0, 64)
    with pytest.raises(ValueError, match="vocabulary"):
        token_across_layers(trace, 0, 50, vocab_size=50)


def test_first_top_is_where_the_token_becomes_and_stays_the_top_prediction(traced):
    _model_, trace = traced
    top = int(np.argmax(trace["logits"][4]))
    path = token_across_layers(trace, 4, top)
    assert path.ranks[-1] == 0
    first = path.first_top()
    assert first is not None and (path.ranks[first:] == 0).all() and (first == 0 or path.ranks[first - 1] != 0)


def test_q_k_v_are_the_heads_rows_and_their_scores_the_scaled_products(traced):
    _model_, trace = traced
    cfg = trace.config
    for head in range(cfg.n_heads):
        m = head_qkv(trace, 1, head)
        g = kv_head_of(trace, 1, head)
        assert m.kv_head == g == head // (cfg.n_heads // (cfg.n_kv_heads or cfg.n_heads))
        assert m.q.shape == (len(IDS), cfg.d_head) and m.k.shape == m.v.shape == (len(IDS), cfg.d_head)
        np.testing.assert_array_equal(m.q, trace["blocks.1.attn.q"][head])
        np.testing.assert_array_equal(m.k, trace["blocks.1.attn.k"][g])
        by_hand = (m.q.astype(np.float64) @ m.k.T.astype(np.float64)) * m.scale
        causal = np.tril(np.ones((len(IDS), len(IDS)), bool))
        np.testing.assert_allclose(m.scores[causal], by_hand[causal], rtol=1e-5, atol=1e-5)
        assert np.isneginf(m.scores[~causal]).all()
        # the pattern is their softmax, and pattern @ V is the head's output
        pattern = trace.head(1, head)
        np.testing.assert_allclose(pattern @ m.v, trace["blocks.1.attn.z"][head], rtol=1e-4, atol=1e-5)


def test_the_heads_concatenated_times_w_o_is_what_the_layer_adds(traced):
    model, trace = traced
    got = heads_to_output(trace, 2)
    H, n, dv = got.z.shape
    assert got.concat.shape == (n, H * dv) and got.w_o_shape == (trace.config.d_model, H * dv)
    for h in range(H):  # head h's columns, side by side
        np.testing.assert_array_equal(got.concat[:, h * dv:(h + 1) * dv], trace["blocks.2.attn.z"][h])
    W = model.blocks[2].attn.W_O
    by_hand = got.concat.astype(np.float64) @ W.weight.detach().double().numpy().T
    if W.bias is not None:
        by_hand += W.bias.detach().double().numpy()
    np.testing.assert_allclose(got.out, by_hand, rtol=1e-4, atol=1e-5)
    assert got.matches and got.max_diff < 1e-4
    np.testing.assert_allclose(got.out, trace["blocks.2.attn.out"], rtol=1e-4, atol=1e-5)


def test_the_kv_cache_holds_what_a_real_generation_caches_step_by_step(traced):
    """A real KV cache filled as generation fills it (the prompt at once, then one token per step) holds,
    at every step and layer, exactly the rows ``kv_cache_at`` reads from the whole sequence's trace."""
    model, trace = traced
    n_prompt = 7
    cfg = trace.config
    cache = KVCache(cfg.n_layers)
    for step in range(len(IDS) - n_prompt + 1):
        fresh = IDS[:n_prompt] if step == 0 else [IDS[n_prompt + step - 1]]
        with torch.inference_mode():
            model(torch.tensor([fresh]), cache=cache, last_only=True)
        for layer in range(cfg.n_layers):
            for g in range(cfg.n_kv_heads or cfg.n_heads):
                got = kv_cache_at(trace, n_prompt, step, layer, g)
                assert got.length == n_prompt + step == cache.seen(layer)
                np.testing.assert_allclose(got.keys, cache.keys[layer][0, g].numpy(), rtol=1e-4, atol=1e-5)
                np.testing.assert_allclose(got.values, cache.values[layer][0, g].numpy(), rtol=1e-4, atol=1e-5)
        got = kv_cache_at(trace, n_prompt, step, 0)
        if step == 0:
            assert got.new.all() and got.reused == 0
        else:
            assert got.new.tolist() == [False] * (n_prompt + step - 1) + [True] and got.reused == n_prompt + step - 1
        Hkv = cfg.n_kv_heads or cfg.n_heads
        assert got.bytes_per_token == cfg.n_layers * 2 * Hkv * cfg.d_head * 4
        assert got.nbytes == got.bytes_per_token * got.length
    with pytest.raises(ValueError, match="step"):
        kv_cache_at(trace, n_prompt, len(IDS) - n_prompt + 1, 0)
