from __future__ import annotations

import math

import numpy as np
import torch

from explorer.core.config import ModelConfig
from explorer.core.model import Transformer, sinusoidal_positions
from explorer.core.trace import CaptureSpec, capture


def test_sinusoidal_d4_position_1():
    pe = sinusoidal_positions(3, 4).numpy()
    np.testing.assert_allclose(pe[1], [0.8415, 0.5403, 0.0100, 1.0000], atol=1e-4)
    np.testing.assert_allclose(pe[0], [0, 1, 0, 1], atol=0)


def test_sinusoidal_formula_everywhere():
    n, d = 50, 16
    pe = sinusoidal_positions(n, d).numpy()
    for pos in range(n):
        for i in range(d // 2):
            angle = pos / 10000 ** (2 * i / d)
            assert math.isclose(pe[pos, 2 * i], math.sin(angle), abs_tol=1e-6)
            assert math.isclose(pe[pos, 2 * i + 1], math.cos(angle), abs_tol=1e-6)


def test_original_transformer_post_norm_adds_sinusoids_and_normalises():
    cfg = ModelConfig(arch="transformer", vocab_size=11, n_ctx=32, d_model=8, n_layers=2, n_heads=2, d_head=4,
                      d_ff=32, norm_placement="post", positions="sinusoidal", activation="relu",
                      final_norm=False, tie_embeddings=False)
    torch.manual_seed(0)
    model = Transformer(cfg).eval()
    ids = [3, 1, 4, 1, 5, 9]
    trace, _ = capture(model, ids, [str(i) for i in ids], CaptureSpec.full())
    np.testing.assert_allclose(trace["pos_embed"], sinusoidal_positions(6, 8).numpy())
    np.testing.assert_allclose(trace["blocks.0.resid_pre"], trace["embed"] + trace["pos_embed"], atol=1e-6)
    # post-norm: the residual stream after each sublayer is normalised (mean 0, variance 1)
    mid = trace["blocks.0.resid_mid"]
    np.testing.assert_allclose(mid.mean(-1), 0, atol=1e-5)
    np.testing.assert_allclose(mid.var(-1), 1, atol=1e-3)
    # ReLU neurons are never negative
    assert (trace["blocks.1.mlp.post"] >= 0).all() and (trace["blocks.1.mlp.pre"] < 0).any()
