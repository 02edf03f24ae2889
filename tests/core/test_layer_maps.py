"""The all-heads grid and head statistics of a model whose layers differ (core/analysis/layer_maps.py).

What the Attention panel draws for a hybrid: an attention head's tile is its pattern, a recurrent map's tile each
row's shares of its effective attention's sizes (pooled the same way for long prompts), a block without a token
mixer has no tile; the statistics are the usual ones of those maps."""

from __future__ import annotations

import math

import numpy as np
import torch
from test_mixers import HYBRID

from explorer.core.analysis import attention as analysis
from explorer.core.analysis.effective_tiles import row_shares, weights_overview
from explorer.core.analysis.layer_maps import (
    grid_columns,
    grid_maps,
    layer_mosaic,
    layer_statistics,
    maps_of,
    max_maps,
    uniform,
)
from explorer.core.config import ModelConfig
from explorer.core.display.mosaic import block_average, tile_heads
from explorer.core.loaded import LoadedModel
from explorer.core.mixers.effective import effective_attention
from explorer.core.model import Transformer
from explorer.core.tokenize.base import VocabTokenizer
from explorer.core.trace import CaptureSpec

MIXERS = ("deltanet", "mamba2", "short_conv", "attention", "none")


def every_kind() -> LoadedModel:
    """One layer of each kind: Gated DeltaNet, Mamba-2, a short convolution (32 channels), attention, an FFN block."""
    cfg = ModelConfig(**{**HYBRID, "n_layers": 5, "layer_mixers": MIXERS})
    model = Transformer(cfg).eval()
    gen = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for name, p in model.named_parameters():
            scale = 0.1 if name.endswith(("A_log", "dt_bias", "D")) else 1 / math.sqrt(p.shape[-1])
            p.copy_(torch.randn(p.shape, generator=gen) * scale + (1.0 if "norm" in name or "ln" in name else 0.0))
    return LoadedModel(model, VocabTokenizer([f"w{i}" for i in range(40)]), "every kind", "test", "hybrid")


IDS = [5, 6, 7, 8, 5, 6, 7, 8, 9, 1, 5, 6, 7, 2, 3, 5, 6, 7]


def test_the_grid_has_a_column_per_head_and_caps_a_convolutions_channels():
    cfg = every_kind().config
    assert [maps_of(cfg, layer) for layer in range(5)] == [4, 4, 32, 4, 0]
    assert [grid_maps(cfg, layer) for layer in range(5)] == [4, 4, 4, 4, 0]
    assert grid_columns(cfg) == 4 and max_maps(cfg) == 32 and not uniform(cfg)


def test_each_tile_is_its_maps_pattern_or_its_rows_shares_of_the_effective_attention():
    loaded = every_kind()
    trace = loaded.trace_ids(IDS, CaptureSpec.full())
    n = len(IDS)
    image, geo = layer_mosaic(trace, max_tile=64)
    assert (geo.n_layers, geo.n_heads, geo.factor) == (5, 4, 1)
    for layer in (0, 1, 2):
        shares = row_shares(effective_attention(trace, layer))
        for head in range(4):
            x, y = geo.tile_origin(layer, head)
            np.testing.assert_allclose(image[y:y + n, x:x + n], shares[head], atol=1e-6)
            assert np.allclose(image[y:y + n, x:x + n].sum(-1), 1.0, atol=1e-5)  # rows sum to 1, as a pattern's
    for head in range(4):
        x, y = geo.tile_origin(3, head)
        np.testing.assert_allclose(image[y:y + n, x:x + n], trace.head(3, head), atol=1e-6)
        x, y = geo.tile_origin(4, head)
        assert np.isnan(image[y:y + n, x:x + n]).all()  # no token mixer: no tile


def test_a_long_prompts_tiles_are_the_same_shares_pooled():
    loaded = every_kind()
    ids = [int(i) for i in np.random.default_rng(3).integers(0, 40, 150)]
    trace = loaded.trace_ids(ids, CaptureSpec.full())
    image, geo = layer_mosaic(trace, max_tile=32)
    assert geo.factor == 5 and geo.tile == 30
    whole = effective_attention(trace, 0, [2])[0]
    x, y = geo.tile_origin(0, 2)
    np.testing.assert_allclose(image[y:y + 30, x:x + 30], block_average(row_shares(whole), 5), atol=1e-6)
    signed, factor = weights_overview(trace, 0, 2, pixels=32, pool="signed")
    block = whole[145:150, 10:15]
    assert factor == 5 and np.isclose(signed[29, 2], block.flat[np.abs(block).argmax()], atol=1e-6)


def test_head_statistics_of_a_hybrid_read_each_maps_shares():
    loaded = every_kind()
    trace = loaded.trace_ids(IDS, CaptureSpec.full())
    ids = np.asarray(IDS)
    for name in ("induction", "previous_token", "duplicate_token", "entropy"):
        table = analysis.head_statistics(trace, name)
        assert table.shape == (5, 4)
        np.testing.assert_allclose(table, layer_statistics(trace, name), rtol=1e-12, equal_nan=True)
        for layer in (0, 1, 2):
            shares = row_shares(effective_attention(trace, layer))
            for head in range(4):
                assert math.isclose(table[layer, head], analysis.STATISTICS[name](shares[head], ids),
                                    rel_tol=1e-5, abs_tol=1e-7), (name, layer, head)
        for head in range(4):
            assert math.isclose(table[3, head], analysis.STATISTICS[name](trace.head(3, head), ids),
                                rel_tol=1e-5, abs_tol=1e-7)
        assert np.isnan(table[4]).all()


def test_an_attention_only_models_grid_is_the_plain_one():
    cfg = ModelConfig(**{**HYBRID, "layer_mixers": ()})
    loaded = LoadedModel(Transformer(cfg).eval(), VocabTokenizer([f"w{i}" for i in range(40)]), "plain", "t", "x")
    trace = loaded.trace_ids(IDS, CaptureSpec.full())
    assert uniform(cfg)
    image, geo = layer_mosaic(trace, max_tile=8)
    plain, plain_geo = tile_heads(lambda layer, head: trace.head(layer, head), max_tile=8, n_layers=3, n_heads=4)
    assert geo == plain_geo
    np.testing.assert_allclose(image, plain, atol=1e-6)
