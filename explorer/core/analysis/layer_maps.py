"""Every layer's maps at once, whatever each layer is: the all-heads grid and the head statistics of a model whose
layers differ (attention beside Gated DeltaNet, Mamba-2 or short-convolution layers, blocks without a token mixer).

A layer's *maps* are its attention heads' patterns, or a recurrent layer's effective attention per head (a
convolution: per channel; core/mixers/effective.py); a block without a token mixer (Nemotron-H's FFN blocks) has
none. One layer at a time goes through ``effective_tiles``; this module lays every layer out on one grid:

* ``maps_of(cfg, layer)``: how many maps the layer has (0 without a token mixer);
* ``max_maps(cfg)``: the most any layer has (the head a selection may name); ``attention_head(cfg, layer, head)``:
  whether a map is an attention head (what a head's switch-off or logit term is of);
* ``grid_maps(cfg, layer)`` / ``grid_columns(cfg)``: how many of a layer's maps the grid shows, and its columns: all
  of them, but a convolution's channels (d_model of them, each a band a few tokens wide) only as many as the
  widest other layer has heads (``CONV_GRID`` without one); the detail view shows any channel;
* ``uniform(cfg)``: every layer attends with ``cfg.n_heads`` heads (the plain layers x heads grid);
* ``layer_mosaic(trace, max_tile)``: the grid as one image, tiled as ``display.mosaic.tile_heads`` tiles it: an
  attention head's tile its pattern mean-pooled to ``max_tile`` pixels a side (``attention_tiles``), a recurrent
  map's tile each row's shares of its weights' sizes (``effective_tiles.row_shares``: a row sums to 1 as a
  pattern's does, so one colour scale serves both) mean-pooled the same way; NaN where a layer has no such map;
* ``layer_statistics(trace, name)``: a head statistic of every map on the grid [L, columns] (NaN where none).

Long prompts stay bounded: each map is read a block of rows at a time (``effective_tiles.row_step``), and only
the pooled tiles are kept (with the trace, a layer at a time: a cancelled grid resumes where it stopped).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from explorer.core.analysis import attention_tiles, effective_tiles
from explorer.core.display.mosaic import MosaicGeometry, block_average, downsample_factor
from explorer.core.mixers.effective import effective_block, effective_kind

if TYPE_CHECKING:
    from explorer.core.config import ModelConfig
    from explorer.core.trace import Trace

CONV_GRID = 16  # a convolution's channels on the grid when no other layer has heads


def maps_of(cfg: ModelConfig, layer: int) -> int:
    """How many maps ``layer`` has: heads, a recurrent layer's heads, a convolution's channels; 0 without a mixer."""
    return 0 if cfg.layer(layer).mixer == "none" else effective_tiles.maps(cfg, layer)


def attention_head(cfg: ModelConfig, layer: int, head: int) -> bool:
    """Whether (layer, head) is an attention head (what a head intervention or a head's DLA term is of)."""
    plan = cfg.layer(layer)
    return plan.is_attention and 0 <= head < plan.n_heads


def describe_mixer(cfg: ModelConfig, layer: int) -> str:
    """A layer's token mixer in words: "a Gated DeltaNet layer", "layer 2 has 8 heads", "a block without a mixer"."""
    plan = cfg.layer(layer)
    kind = effective_kind(cfg, layer)
    if kind is not None:
        return f"a {kind} layer"
    return f"layer {layer} has {plan.n_heads} heads" if plan.is_attention else "a block without a token mixer"


def short_kind(cfg: ModelConfig, layer: int) -> str:
    """A layer's token mixer in a word, for labels where room is short: "attn", "DeltaNet", "Mamba-2", "conv",
    "FFN" (a block with no token mixer, only its FFN)."""
    mixer = cfg.layer(layer).mixer
    return {"deltanet": "DeltaNet", "mamba2": "Mamba-2", "short_conv": "conv", "none": "FFN"}.get(mixer, "attn")


def max_maps(cfg: ModelConfig) -> int:
    """The most maps any layer has (at least 1): the heads a selection may name."""
    return max([1, *(maps_of(cfg, layer) for layer in range(cfg.n_layers))])


def uniform(cfg: ModelConfig) -> bool:
    """Whether every layer attends with ``cfg.n_heads`` heads (the plain layers x heads grid applies)."""
    return all(cfg.layer(layer).is_attention and cfg.layer(layer).n_heads == cfg.n_heads
               for layer in range(cfg.n_layers))


def grid_maps(cfg: ModelConfig, layer: int) -> int:
    """How many of ``layer``'s maps the all-heads grid shows (the first ones)."""
    count = maps_of(cfg, layer)
    if cfg.layer(layer).mixer != "short_conv":
        return count
    others = [maps_of(cfg, other) for other in range(cfg.n_layers) if cfg.layer(other).mixer != "short_conv"]
    return min(count, max(others) if any(others) else CONV_GRID)


def grid_columns(cfg: ModelConfig) -> int:
    """The all-heads grid's columns (at least 1)."""
    return max([1, *(grid_maps(cfg, layer) for layer in range(cfg.n_layers))])


def grid_cost(cfg: ModelConfig, n: int) -> int:
    """About how many multiply-adds the grid of an ``n``-token prompt takes (what decides if it is done at once)."""
    total = 0
    for layer in range(cfg.n_layers):
        plan = cfg.layer(layer)
        width = {"deltanet": 4 * cfg.delta_d_k, "mamba2": cfg.ssm_d_state + 8, "short_conv": 8,
                 "none": 0}.get(plan.mixer, plan.d_head)
        total += grid_maps(cfg, layer) * n * n * width
    return total


def _recurrent_tiles(trace: Trace, layer: int, count: int, max_tile: int,
                     check: Callable[[], None] | None) -> list[np.ndarray]:
    """The first ``count`` maps of a recurrent layer, each row's shares of |A| mean-pooled to ``max_tile`` pixels."""
    n = trace.n_tokens
    factor = downsample_factor(n, max_tile)
    step = effective_tiles.row_step(n, factor)
    tiles = []
    for head in range(count):
        parts = []
        for r0 in range(0, n, step):
            if check is not None:
                check()
            values = effective_block(trace, layer, [head], (r0, min(n, r0 + step)), (0, n))[0]
            parts.append(block_average(effective_tiles.row_shares(values), factor))
        tiles.append(np.concatenate(parts) if parts else np.zeros((0, 0), np.float32))
    return tiles


def layer_tiles(trace: Trace, layer: int, max_tile: int, check: Callable[[], None] | None = None) -> list[np.ndarray]:
    """The grid's tiles of ``layer`` (``grid_maps`` of them), kept with the trace."""
    cfg = trace.config
    count = grid_maps(cfg, layer)

    def compute() -> list[np.ndarray]:
        if count == 0:
            return []
        if effective_kind(cfg, layer) is not None:
            return _recurrent_tiles(trace, layer, count, max_tile, check)
        images, _factor = attention_tiles.layer_pooled_patterns(trace, layer, max_tile, check)
        return [np.ascontiguousarray(images[head]) for head in range(count)]

    return trace.memo(("layer_maps.tiles", layer, max_tile), compute)


def layer_mosaic(trace: Trace, max_tile: int, gap: int = 1, fill: float = np.nan,
                 check: Callable[[], None] | None = None) -> tuple[np.ndarray, MosaicGeometry]:
    """Every layer's grid tiles in one float32 image (rows = layers, columns = ``grid_columns``), with the
    geometry of ``display.mosaic``; ``fill`` in the gaps and where a layer has fewer maps."""
    cfg, n = trace.config, trace.n_tokens
    geometry = MosaicGeometry(cfg.n_layers, grid_columns(cfg), n, gap, downsample_factor(n, max_tile))
    image = np.full(geometry.shape, fill, dtype=np.float32)
    t = geometry.tile
    for layer in range(cfg.n_layers):
        for head, tile in enumerate(layer_tiles(trace, layer, max_tile, check)):
            x, y = geometry.tile_origin(layer, head)
            image[y:y + t, x:x + t] = np.where(np.isfinite(tile), tile, np.float32(fill))
    return np.ascontiguousarray(image), geometry


def layer_statistics(trace: Trace, name: str, check: Callable[[], None] | None = None) -> np.ndarray:
    """The head statistic ``name`` of every map on the grid: float64 [n_layers, grid_columns], NaN where a layer
    has no such map (an attention head's from its pattern, a recurrent map's from its rows' shares of |A|)."""
    cfg = trace.config
    out = np.full((cfg.n_layers, grid_columns(cfg)), math.nan)
    for layer in range(cfg.n_layers):
        for head in range(grid_maps(cfg, layer)):
            out[layer, head] = effective_tiles.weights_statistic(trace, layer, head, name, check)
    return out
