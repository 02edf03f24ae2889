"""Tiles, rows and pooled overviews of one head equal the full pattern and scores (computed on a small n)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from explorer.core.analysis import attention_tiles as tiles
from explorer.core.config import ModelConfig
from explorer.core.display.mosaic import tile_heads
from explorer.core.model import Transformer
from explorer.core.trace import CaptureSpec, capture

BASE = dict(vocab_size=50, n_ctx=128, d_model=32, n_layers=2, n_heads=4, d_head=8, d_ff=64)
SHAPES = {
    "gpt2": {},
    "gqa_rotary": dict(n_kv_heads=2, norm="rmsnorm", positions="rotary", activation="silu", gated_ffn=True,
                       attn_bias=False, mlp_bias=False),
    "alibi": dict(positions="none", alibi=True),
    "alibi_before_scale": dict(positions="none", alibi=True, alibi_before_scale=True),
    "sliding_softcap": dict(sliding_window=5, sliding_layers=(1,), attn_softcap=2.0),
    "sliding": dict(sliding_window=5, sliding_layers=(1,)),  # a CPU row without soft cap: numpy's row
    "encoder": dict(causal=False),
    "sinks": dict(attn_sinks=True, n_kv_heads=2, positions="rotary"),  # gpt-oss: a sink logit per head in the softmax
}
N = 37  # not a multiple of the chunk or of the pooling factor


def traced(shape: str, monkeypatch):
    torch.manual_seed(0)
    model = Transformer(ModelConfig(**{**BASE, **SHAPES[shape]})).eval()
    if shape == "sinks":  # learned logits, not the zeros they start from
        with torch.no_grad():
            for block in model.blocks:
                block.attn.sinks.normal_(0.0, 2.0)
    ids = list(np.random.default_rng(0).integers(0, 50, N))
    monkeypatch.setattr(tiles, "CHUNK_ROWS", 8)  # several chunks at a small n
    trace, _ = capture(model, ids, [f"t{i}" for i in ids], CaptureSpec.compact())
    return trace


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_blocks_and_rows_equal_the_full_head(shape, monkeypatch):
    trace = traced(shape, monkeypatch)
    for layer in range(2):
        for head in (0, 3):
            for kind in ("scores", "pattern"):
                full = trace.head(layer, head, kind)
                for rows, cols in (((0, N), (0, N)), ((5, 19), (2, 30)), ((30, 37), (0, 6)), ((36, 40), (-3, 3))):
                    got = tiles.block(trace, layer, head, kind, rows, cols)
                    want = full[max(rows[0], 0):min(rows[1], N), max(cols[0], 0):min(cols[1], N)]
                    assert got.shape == want.shape
                    assert np.array_equal(np.isneginf(got), np.isneginf(want))
                    np.testing.assert_allclose(np.where(np.isfinite(got), got, 0), np.where(np.isfinite(want), want, 0),
                                               rtol=1e-5, atol=1e-6)
                np.testing.assert_allclose(tiles.query_row(trace, layer, head, kind, 11)[np.isfinite(full[11])],
                                           full[11][np.isfinite(full[11])], rtol=1e-5, atol=1e-6)



@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_querys_two_rows_from_one_product_are_query_rows_rows(shape, monkeypatch):
    trace = traced(shape, monkeypatch)
    for layer, head, query in ((0, 0, 0), (1, 3, 11), (1, 2, N - 1)):
        scores, pattern = tiles.query_rows(trace, layer, head, query)
        assert np.array_equal(scores, tiles.query_row(trace, layer, head, "scores", query))
        assert np.array_equal(pattern, tiles.query_row(trace, layer, head, "pattern", query))
        assert scores.dtype == pattern.dtype == np.float32 and scores.shape == (N,)


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_every_querys_row_is_the_blocks_row_and_the_full_heads_row(shape, monkeypatch):
    trace = traced(shape, monkeypatch)  # a row is computed with numpy where it can (query_rows), a block with torch
    for layer in range(2):
        for head in (0, 3):
            full_scores, full_pattern = trace.head(layer, head, "scores"), trace.head(layer, head, "pattern")
            for query in range(N):
                scores, pattern = tiles.query_rows(trace, layer, head, query)
                block = tiles.block(trace, layer, head, "scores", (query, query + 1), (0, N))[0]
                assert np.array_equal(np.isneginf(scores), np.isneginf(block))
                assert np.array_equal(np.isneginf(scores), np.isneginf(full_scores[query]))
                finite = np.isfinite(scores)
                np.testing.assert_allclose(scores[finite], block[finite], rtol=1e-6, atol=1e-6)
                np.testing.assert_allclose(scores[finite], full_scores[query][finite], rtol=1e-5, atol=1e-6)
                np.testing.assert_allclose(pattern, full_pattern[query], rtol=1e-5, atol=1e-7)
                assert (pattern[~finite] == 0).all()
@pytest.mark.parametrize("pool", tiles.POOLS)
def test_overview_pools_the_full_pattern(pool, monkeypatch):
    trace = traced("sliding_softcap", monkeypatch)
    full = trace.head(1, 2, "pattern")
    image, factor = tiles.overview(trace, 1, 2, "pattern", 10, pool)
    assert factor == 4 and image.shape == (10, 10)
    masked = np.isneginf(trace.head(1, 2, "scores"))
    for r in range(10):
        for c in range(10):
            cells = full[r * 4:r * 4 + 4, c * 4:c * 4 + 4]
            shown = cells[~masked[r * 4:r * 4 + 4, c * 4:c * 4 + 4]] if pool == "max" else cells.ravel()
            if shown.size == 0:
                assert np.isnan(image[r, c])
            else:
                assert image[r, c] == pytest.approx(shown.max() if pool == "max" else shown.mean(), rel=1e-5, abs=1e-7)
    exact, one = tiles.overview(trace, 1, 2, "pattern", 64, "max")
    assert one == 1
    np.testing.assert_allclose(np.where(masked, 0, np.nan_to_num(exact)), full, rtol=1e-5, atol=1e-7)


def test_pooled_mosaic_matches_the_mosaic_of_full_patterns(monkeypatch):
    trace = traced("gqa_rotary", monkeypatch)
    cfg = trace.config
    want, geo_want = tile_heads(lambda layer, head: trace.head(layer, head, "pattern"), max_tile=10,
                                n_layers=cfg.n_layers, n_heads=cfg.n_heads)
    got, geo = tiles.pooled_mosaic(trace, 10)
    assert geo == geo_want
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


def test_pooled_cosine_map_is_the_block_mean_of_the_whole_map():
    from explorer.core.analysis.vectors import cosine_similarity_matrix, pooled_cosine_similarity

    X = np.random.default_rng(0).normal(size=(37, 6))
    X[5] = 0.0  # a zero row: cosine 0, as in the whole map
    whole = cosine_similarity_matrix(X)
    image, f = pooled_cosine_similarity(X, 10, chunk=8)
    assert f == 4 and image.shape == (10, 10)
    padded = np.full((40, 40), np.nan)
    padded[:37, :37] = whole
    np.testing.assert_allclose(image, np.nanmean(padded.reshape(10, 4, 10, 4), axis=(1, 3)), rtol=1e-5, atol=1e-6)
    same, one = pooled_cosine_similarity(X, 64)
    assert one == 1 and np.array_equal(same, whole)


@pytest.mark.parametrize("shape", ["gpt2", "sliding_softcap", "encoder"])
def test_chunked_head_statistics_equal_the_whole_patterns(shape, monkeypatch):
    from explorer.core.analysis import attention as analysis

    torch.manual_seed(0)
    model = Transformer(ModelConfig(**{**BASE, **SHAPES[shape]})).eval()
    ids = [int(i) for i in np.tile(np.random.default_rng(0).integers(0, 50, 12), 4)[:N]]  # repeats: induction
    monkeypatch.setattr(tiles, "CHUNK_ROWS", 8)
    trace, _ = capture(model, ids, [f"t{i}" for i in ids], CaptureSpec.compact())
    for name in analysis.STATISTICS:
        whole = analysis.head_statistics(trace, name)
        monkeypatch.setattr(analysis, "CHUNKED_FROM", 0)
        chunked = analysis.head_statistics(trace, name)
        monkeypatch.setattr(analysis, "CHUNKED_FROM", 1024)
        np.testing.assert_allclose(chunked, whole, rtol=1e-5, atol=1e-7, err_msg=name)


@pytest.mark.parametrize("budget", ["all heads", "two heads"])
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_layers_pooled_patterns_equal_each_heads_overview(shape, budget, monkeypatch):
    """All heads of a layer at once, or as many as fit the budget (a causal chunk only up to its last
    query's key) give each head's mean-pooled overview, at a factor that does and one that does not
    divide n."""
    trace = traced(shape, monkeypatch)
    if budget == "two heads":  # 2 heads x 7 rows x 37 keys: heads in groups, each with its K/V head
        monkeypatch.setattr(tiles, "MOSAIC_CHUNK_NUMBERS", 2 * 7 * N)
    for pixels in (10, 6):
        for layer in range(2):
            images, factor = tiles.layer_pooled_patterns(trace, layer, pixels)
            assert images.shape[0] == trace.config.n_heads
            for head in range(trace.config.n_heads):
                want, want_factor = tiles.overview(trace, layer, head, "pattern", pixels, "mean")
                assert factor == want_factor
                np.testing.assert_allclose(images[head], want, rtol=1e-5, atol=1e-7)


def test_pooled_mosaic_keeps_each_heads_tile_for_the_detail(monkeypatch):
    trace = traced("gpt2", monkeypatch)
    image, geo = tiles.pooled_mosaic(trace, 10)
    kept = trace.memo_get(("attention_tiles.overview", 1, 3, "pattern", 10, "mean"))
    assert kept is not None and kept[1] == 4
    x, y = geo.tile_origin(1, 3)
    assert np.array_equal(kept[0], image[y:y + geo.tile, x:x + geo.tile])  # the detail reuses the mosaic's tile


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_window_of_the_scores_rule_is_the_window_of_the_whole(shape):
    """One scores rule: ``model.layer_scores`` on a rows x keys window, with the layer's own mask built for the
    window (what the tiles call), equals the forward pass's whole scores cut to that window; and the causal
    rule's row bounds (``visible_keys``, what numpy's row reads) are the mask's rows."""
    from explorer.core.model import layer_mask, layer_scores, layer_window, visible_keys

    cfg = ModelConfig(**{**BASE, **SHAPES[shape]})
    torch.manual_seed(1)
    n, m = 21, 29  # the queries are the last n of m positions (a cache's shape)
    q, k = torch.randn(cfg.n_heads, n, cfg.d_head), torch.randn(cfg.n_heads, m, cfg.d_head)
    for layer in range(cfg.n_layers):
        whole = layer_scores(cfg, q, k, layer_mask(cfg, layer, n, m))[0]
        for rows, cols in (((0, n), (0, m)), ((3, 11), (5, 20)), ((20, 21), (0, 29))):
            for heads in ([1, 2], slice(None)):
                got = layer_scores(cfg, q[heads], k[heads], heads=heads, layer=layer, rows=rows, cols=cols)[0]
                want = whole[heads, rows[0]:rows[1], cols[0]:cols[1]]
                assert torch.equal(torch.isneginf(got), torch.isneginf(want))
                torch.testing.assert_close(got.nan_to_num(neginf=0.0), want.nan_to_num(neginf=0.0), rtol=1e-6, atol=1e-6)
        mask = layer_mask(cfg, layer, n, m)
        for i in (0, 7, n - 1):
            if mask is None:
                continue
            lo, hi = visible_keys(n, m, i, layer_window(cfg, layer))
            visible = ~mask[i]
            assert visible.nonzero().flatten().tolist() == list(range(max(lo, 0), hi))
