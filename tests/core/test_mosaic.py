"""The all-heads mosaic: tiling, gaps, pixel -> head mapping, block-average downsampling (no Qt)."""

from __future__ import annotations

import numpy as np
import pytest

from explorer.core.display.mosaic import MosaicGeometry, block_average, downsample_factor, tile_heads


def _stack(n_layers: int = 3, n_heads: int = 4, n: int = 5, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.random((n_layers, n_heads, n, n)).astype(np.float32)


def test_tiles_are_the_heads_and_gaps_are_fill():
    stack = _stack()
    image, geo = tile_heads(stack)
    assert image.shape == (3 * 6 - 1, 4 * 6 - 1) == geo.shape
    assert image.dtype == np.float32 and image.flags.c_contiguous
    for layer in range(3):
        for head in range(4):
            x, y = geo.tile_origin(layer, head)
            np.testing.assert_array_equal(image[y:y + 5, x:x + 5], stack[layer, head])
    gaps = np.ones(image.shape, bool)
    for layer in range(3):
        for head in range(4):
            x, y = geo.tile_origin(layer, head)
            gaps[y:y + 5, x:x + 5] = False
    assert np.isnan(image[gaps]).all() and not np.isnan(image[~gaps]).any()


def test_gap_and_fill_options():
    stack = _stack(2, 2, 3)
    image, geo = tile_heads(stack, gap=2, fill=-1.0)
    assert image.shape == (2 * 5 - 2, 2 * 5 - 2)
    assert (image[3:5, :] == -1).all() and (image[:, 3:5] == -1).all()
    image0, _ = tile_heads(stack, gap=0)
    assert image0.shape == (6, 6) and not np.isnan(image0).any()


def test_callable_source_matches_array():
    stack = _stack()
    calls = []

    def head(layer: int, h: int) -> np.ndarray:
        calls.append((layer, h))
        return stack[layer, h]

    image, geo = tile_heads(head, n_layers=3, n_heads=4)
    expected, _ = tile_heads(stack)
    np.testing.assert_array_equal(image, expected)
    assert sorted(calls) == [(l, h) for l in range(3) for h in range(4)]  # each head once
    with pytest.raises(ValueError):
        tile_heads(head)


def test_cell_at_inverts_tile_origin():
    _, geo = tile_heads(_stack())
    for layer in range(3):
        for head in range(4):
            x, y = geo.tile_origin(layer, head)
            for q in range(5):
                for k in range(5):
                    assert geo.cell_at(x + k + 0.5, y + q + 0.5) == (layer, head, q, k)
            assert geo.head_at(*geo.tile_center(layer, head)) == (layer, head)
    assert geo.cell_at(5.5, 0.5) is None  # vertical gap between heads 0 and 1
    assert geo.cell_at(0.5, 5.5) is None  # horizontal gap between layers 0 and 1
    assert geo.cell_at(-0.1, 0) is None and geo.cell_at(0, -3) is None
    assert geo.cell_at(geo.shape[1], 0) is None and geo.cell_at(0, geo.shape[0] + 0.5) is None
    assert geo.cell_at(float("nan"), 1) is None


def test_downsampling_block_averages_long_prompts():
    n = 10
    stack = _stack(2, 3, n)
    image, geo = tile_heads(stack, max_tile=4)
    assert geo.factor == 3 and geo.tile == 4 and geo.downsampled
    assert image.shape == (2 * 5 - 1, 3 * 5 - 1)
    x, y = geo.tile_origin(1, 2)
    tile = image[y:y + 4, x:x + 4]
    assert tile[0, 0] == pytest.approx(stack[1, 2, 0:3, 0:3].mean())
    assert tile[1, 3] == pytest.approx(stack[1, 2, 3:6, 9:10].mean())  # last, partial block
    assert tile[3, 3] == pytest.approx(stack[1, 2, 9, 9])
    assert geo.cell_at(x + 1.5, y + 3.2) == (1, 2, 9, 3)
    assert list(geo.tokens_of_pixel(3)) == [9] and list(geo.tokens_of_pixel(1)) == [3, 4, 5]
    exact, geo1 = tile_heads(stack, max_tile=None)
    assert geo1.factor == 1 and exact.shape == (2 * 11 - 1, 3 * 11 - 1)


def test_downsampling_keeps_a_pattern_a_pattern():
    n = 200
    logits = np.random.default_rng(1).normal(size=(n, n))
    logits[np.triu_indices(n, 1)] = -np.inf
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    image, geo = tile_heads(p[None, None], max_tile=64)
    assert geo.factor == 4 and image.shape == (50, 50)
    assert np.nanmin(image) >= 0 and np.nanmax(image) <= 1
    # mean over a block of rows that each sum to 1: each tile row sums to 1 / factor
    np.testing.assert_allclose(image.sum(axis=1), 1 / 4, rtol=1e-5)


def test_block_average_skips_non_finite():
    a = np.array([[1.0, -np.inf], [3.0, 4.0]])
    assert block_average(a, 2)[0, 0] == pytest.approx(8 / 3)
    assert np.isnan(block_average(np.full((2, 2), -np.inf), 2)[0, 0])
    b = np.array([[1.0, -np.inf, 5.0], [3.0, 4.0, np.nan], [np.inf, 7.0, -np.inf]])
    np.testing.assert_allclose(block_average(b, 2), [[8 / 3, 5.0], [7.0, np.nan]])
    assert block_average(b, 2).dtype == np.float32
    exact = block_average(a, 1, fill=0.0)
    np.testing.assert_array_equal(exact, [[1, 0], [3, 4]])


def test_downsample_factor():
    assert downsample_factor(64, 64) == 1 and downsample_factor(65, 64) == 2
    assert downsample_factor(1024, 64) == 16 and downsample_factor(5, None) == 1
    geo = MosaicGeometry(12, 12, 1024, 1, downsample_factor(1024, 64))
    assert geo.shape == (12 * 65 - 1, 12 * 65 - 1)


def test_rejects_bad_shapes():
    with pytest.raises(ValueError):
        tile_heads(np.zeros((2, 3, 4)))
    with pytest.raises(ValueError):
        tile_heads(np.zeros((1, 1, 3, 4)))
    with pytest.raises(ValueError):
        tile_heads(lambda l, h: np.zeros((3, 3)) if h == 0 else np.zeros((4, 4)), n_layers=1, n_heads=2)
