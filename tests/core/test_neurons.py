"""FFN neuron helpers: ranking, orders, histogram, vocabulary effect (headless)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from explorer.core import worked_example
from explorer.core.config import ModelConfig
from explorer.core.model import Transformer
from explorer.core.analysis.neurons import (activation_histogram, neuron_order, neuron_output_direction, neuron_vocab_effect,
                                   top_columns, top_neurons)
from explorer.core.trace import CaptureSpec, Trace, capture

POST = np.array([[0.5, -0.17, 2.0, 0.0, 2.0],
                 [1.0, -3.00, 0.1, 0.2, 0.0],
                 [0.0, 0.00, 0.3, 4.0, 0.0]], dtype=np.float32)


def test_top_neurons_by_value_and_abs():
    ids, acts = top_neurons(POST, 0, k=3)
    assert ids.tolist() == [2, 4, 0]  # 2 and 4 tie at 2.0: lower id first
    np.testing.assert_allclose(acts, [2.0, 2.0, 0.5])
    assert ids.dtype == np.int64 and acts.dtype == np.float32
    ids, acts = top_neurons(POST, 1, k=2, by="abs")
    assert ids.tolist() == [1, 0]
    np.testing.assert_allclose(acts, [-3.0, 1.0])  # the sign is kept
    ids, _ = top_neurons(POST, 1, k=2)  # by value: the strongly negative neuron is not "active"
    assert ids.tolist() == [0, 3]
    ids, _ = top_neurons(POST, -1, k=99)
    assert ids.tolist() == [3, 2, 0, 1, 4]
    assert top_neurons(POST, 0, k=0)[0].size == 0
    with pytest.raises(IndexError):
        top_neurons(POST, 3)
    with pytest.raises(ValueError):
        top_neurons(POST, 0, by="magnitude")


def test_top_neurons_matches_a_full_sort_on_random_data():
    rng = np.random.default_rng(0)
    post = rng.normal(size=(4, 3072)).astype(np.float32)
    ids, acts = top_neurons(post, 2, k=20)
    assert ids.tolist() == np.argsort(-post[2], kind="stable")[:20].tolist()
    np.testing.assert_array_equal(acts, post[2, ids])


def test_neuron_orders():
    assert neuron_order(POST, "index").tolist() == [0, 1, 2, 3, 4]
    # max over tokens: [1.0, 0.0, 2.0, 4.0, 2.0]
    assert neuron_order(POST, "max").tolist() == [3, 2, 4, 0, 1]
    var = POST.astype(np.float64).var(axis=0)
    assert neuron_order(POST, "variance").tolist() == np.argsort(-var, kind="stable").tolist()
    order = neuron_order(POST, "variance")
    assert sorted(order.tolist()) == list(range(5))
    with pytest.raises(ValueError):
        neuron_order(POST, "random")
    with pytest.raises(ValueError):
        neuron_order(POST[0], "max")


def test_top_columns_keeps_the_most_active_neurons():
    ids, cols = top_columns(POST, 2)
    assert ids.tolist() == [3, 2]
    np.testing.assert_array_equal(cols, POST[:, [3, 2]])
    ids, cols = top_columns(POST, 50)
    assert ids.tolist() == neuron_order(POST, "max").tolist() and cols.shape == (3, 5)


def test_activation_histogram():
    values = np.array([0.0, 0.1, 0.2, 0.9, 1.0, np.nan, np.inf])
    counts, edges = activation_histogram(values, bins=2)
    assert counts.tolist() == [3, 2] and counts.sum() == 5  # NaN and inf left out
    np.testing.assert_allclose(edges, [0.0, 0.5, 1.0])
    counts, edges = activation_histogram(POST, bins=10, value_range=(-1.0, 1.0))
    assert counts.sum() == np.count_nonzero((POST >= -1) & (POST <= 1)) and len(edges) == 11
    counts, _ = activation_histogram(np.array([]), bins=4)
    assert counts.tolist() == [0, 0, 0, 0]
    with pytest.raises(ValueError):
        activation_histogram(values, bins=0)


def _tiny(**overrides) -> tuple[Transformer, Trace]:
    cfg = ModelConfig(**{**dict(vocab_size=40, n_ctx=16, d_model=8, n_layers=2, n_heads=2, d_head=4, d_ff=16),
                         **overrides})
    torch.manual_seed(0)
    model = Transformer(cfg).eval()
    with torch.no_grad():  # a non-trivial final norm scale, so that folding it in shows
        if model.ln_final is not None:
            model.ln_final.weight.copy_(torch.linspace(0.5, 2.0, cfg.d_model))
    ids = [3, 7, 3, 11, 5]
    trace, _ = capture(model, ids, [str(i) for i in ids], CaptureSpec.full())
    return model, trace


def test_neuron_vocab_effect_is_the_unembedding_of_the_output_direction():
    model, trace = _tiny()
    W_out = model.blocks[1].mlp.W_out.weight.detach().numpy().astype(np.float64)   # [d, d_ff]
    W_U = model.unembed.weight.detach().numpy().astype(np.float64)                 # [V, d]
    gamma = model.ln_final.weight.detach().numpy().astype(np.float64)
    np.testing.assert_allclose(neuron_output_direction(trace, 1, 5), W_out[:, 5], atol=1e-7)

    up, up_v, down, down_v = neuron_vocab_effect(trace, 1, 5, k=4)
    effect = W_U @ (gamma * W_out[:, 5])
    assert up.tolist() == np.argsort(-effect, kind="stable")[:4].tolist()
    assert down.tolist() == np.argsort(effect, kind="stable")[:4].tolist()
    np.testing.assert_allclose(up_v, effect[up], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(down_v, effect[down], rtol=1e-5, atol=1e-6)
    assert np.all(np.diff(up_v) <= 0) and np.all(np.diff(down_v) >= 0)

    up, up_v, *_ = neuron_vocab_effect(trace, 1, 5, k=4, fold_norm=False)
    plain = W_U @ W_out[:, 5]
    assert up.tolist() == np.argsort(-plain, kind="stable")[:4].tolist()
    np.testing.assert_allclose(up_v, plain[up], rtol=1e-5, atol=1e-6)

    up, *_ = neuron_vocab_effect(trace, 0, 0, k=100, vocab_size=10)
    assert len(up) == 10 and up.max() < 10
    with pytest.raises(IndexError):
        neuron_vocab_effect(trace, 0, 16)
    with pytest.raises(IndexError):
        neuron_vocab_effect(trace, 2, 0)


def test_neuron_vocab_effect_without_final_norm_or_model_or_ffn():
    model, trace = _tiny(norm="none")
    up, up_v, _, _ = neuron_vocab_effect(trace, 0, 3, k=3)
    W_out = model.blocks[0].mlp.W_out.weight.detach().double().numpy()
    effect = model.unembed.weight.detach().double().numpy() @ W_out[:, 3]
    assert up.tolist() == np.argsort(-effect, kind="stable")[:3].tolist()

    detached = Trace(trace.token_ids, trace.tokens, trace.config, {"resid_final": trace["resid_final"]})
    assert neuron_vocab_effect(detached, 0, 0) is None
    assert neuron_output_direction(detached, 0, 0) is None

    model = worked_example.build()[0]
    trace, _ = capture(model, [0, 1, 2], worked_example.PROMPT.split(), CaptureSpec.full())
    assert neuron_vocab_effect(trace, 0, 0) is None  # attention only: no neurons
