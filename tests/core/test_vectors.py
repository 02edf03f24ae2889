"""Cosine similarities, nearest neighbours and sinusoid curves (headless)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from explorer.core.config import ModelConfig
from explorer.core.model import Transformer, sinusoidal_positions
from explorer.core.trace import CaptureSpec, Trace, capture
from explorer.core.analysis.vectors import (cosine_similarity_matrix, nearest_neighbours, nearest_vocab_neighbours,
                                   parse_dimensions, sinusoid_curves)


def test_cosine_similarity_matrix_by_hand():
    X = np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 2.0], [0.0, 0.0], [-3.0, 0.0]])
    C = cosine_similarity_matrix(X)
    assert C.shape == (5, 5) and C.dtype == np.float32
    s = 1 / np.sqrt(2)
    np.testing.assert_allclose(C[0], [1, s, 0, 0, -1], atol=1e-6)
    np.testing.assert_allclose(C[1, 2], s, atol=1e-6)
    np.testing.assert_allclose(C, C.T)
    assert np.all(C[3] == 0)  # a zero vector is similar to nothing, not NaN


def test_cosine_similarity_matches_pairwise_formula():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(7, 5))
    C = cosine_similarity_matrix(X)
    for i in range(7):
        for j in range(7):
            expected = X[i] @ X[j] / (np.linalg.norm(X[i]) * np.linalg.norm(X[j]))
            assert C[i, j] == pytest.approx(expected, abs=1e-6)


def test_nearest_neighbours_order_and_exclusion():
    E = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [-1.0, 0.0], [2.0, 0.0]])
    ids, cos = nearest_neighbours(E, np.array([1.0, 0.0]), k=3)
    assert ids.tolist() == [0, 4, 1]  # ties (ids 0 and 4, cosine 1) broken by id
    np.testing.assert_allclose(cos, [1, 1, 0.9 / np.hypot(0.9, 0.1)], atol=1e-6)
    ids, _ = nearest_neighbours(E, E[0], k=2, exclude=[0, 4])
    assert ids.tolist() == [1, 2]
    ids, cos = nearest_neighbours(E, E[0], k=99, exclude=[0])
    assert len(ids) == 4 and np.all(np.diff(cos) <= 0)


def test_sinusoid_curves_match_the_model_formula():
    d = 16
    pe = sinusoidal_positions(40, d).numpy()
    dims = [0, 1, 5, 14, 15]
    curves = sinusoid_curves(np.arange(40), dims, d)
    np.testing.assert_allclose(curves, pe[:, dims], atol=1e-6)
    with pytest.raises(ValueError):
        sinusoid_curves([0, 1], [16], d)


def test_parse_dimensions():
    assert parse_dimensions("0, 1, 6-8, x, 99, 1", d_model=10) == [0, 1, 6, 7, 8]
    assert parse_dimensions("", 10) == []
    assert len(parse_dimensions("0-9", 10, limit=4)) == 4


def test_nearest_vocab_neighbours_reads_the_embedding_matrix():
    cfg = ModelConfig(vocab_size=50, n_ctx=16, d_model=8, n_layers=1, n_heads=2, d_head=4, d_ff=16)
    torch.manual_seed(0)
    model = Transformer(cfg).eval()
    ids = [3, 7, 3, 11]
    trace, _ = capture(model, ids, [str(i) for i in ids], CaptureSpec.full())
    got_ids, got_cos = nearest_vocab_neighbours(trace, 1, k=5)
    E = model.embed.weight.detach().numpy()
    want_ids, want_cos = nearest_neighbours(E, E[7], 5, exclude=[7])
    assert got_ids.tolist() == want_ids.tolist()
    np.testing.assert_allclose(got_cos, want_cos, atol=1e-5)
    with_self, cos = nearest_vocab_neighbours(trace, 1, k=1, include_self=True)
    assert with_self.tolist() == [7] and cos[0] == pytest.approx(1.0, abs=1e-6)
    detached = Trace(trace.token_ids, trace.tokens, cfg, {"embed": trace["embed"]})
    assert nearest_vocab_neighbours(detached, 0) is None
