"""The attention panel's constants, heatmap widgets and memoised computations.

``mosaic_of`` and ``statistic_of`` keep their results with the trace (``trace.memo``): the panel's
``prepare`` computes them on the worker thread, drawing finds them there.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt

from explorer.core.analysis import attention as analysis
from explorer.core.analysis.attention_tiles import pooled_mosaic
from explorer.core.analysis.layer_maps import grid_cost, layer_mosaic, uniform
from explorer.core.display.mosaic import MosaicGeometry, tile_heads
from explorer.core.display.tokens import quoted
from explorer.core.trace import Trace
from explorer.ui.widgets.heatmap import Heatmap, format_value

KINDS = {"pattern": ("pattern", "viridis", False), "scores": ("scaled score", "CET-D1", True)}
MAX_TILE = 64  # overview tile side in pixels; longer prompts are block-averaged (exact in the detail)
ALL_HEADS_NOW_MACS = 2**28  # all heads' q.k cheaper than this: mosaic and statistics with the trace
LAYER_PATTERN_BUDGET = 64 * 2**20  # bytes of all layers' [H, n, n] patterns worth precomputing in the worker
OUTLINE = pg.mkPen("#ff2d55", width=2.5, cosmetic=True)
QUERY_OUTLINE = pg.mkPen("#ff2d55", width=1.5, cosmetic=True, style=Qt.PenStyle.DashLine)
BAR_PATTERN = pg.mkBrush("#2a788e")  # viridis' middle
BAR_POSITIVE, BAR_NEGATIVE = pg.mkBrush("#c0392b"), pg.mkBrush("#3b6fb6")  # the red and blue ends of CET-D1



def statistic_levels(name: str, values: np.ndarray, n_tokens: int) -> tuple[float, float]:
    """Fixed, meaningful colour levels for a head statistic, so that a random model's tiny
    differences do not look like structure: weights in [0, 1]; entropy in [0, ln n] (its maximum)."""
    if name == "entropy":
        top = max(math.log(max(n_tokens, 2)), float(np.nanmax(values)) if np.isfinite(values).any() else 0.0)
        return 0.0, top
    return 0.0, 1.0


def layer_patterns_fit(trace: Trace) -> bool:
    """Whether every layer's [H, n, n] pattern together is small enough to precompute and cache (never for a model
    whose layers differ: its grid is built layer by layer, ``layer_maps.layer_mosaic``)."""
    cfg, n = trace.config, trace.n_tokens
    return uniform(cfg) and cfg.n_layers * cfg.n_heads * n * n * 4 <= LAYER_PATTERN_BUDGET


class AttentionHeatmap(Heatmap):
    """The detail heatmap, with tooltips in terms of query and key tokens."""

    def cell_text(self, row: int, col: int) -> str:
        rows, cols = self.row_labels, self.col_labels
        where = f"query {quoted(rows[row])} ({row}) \u2192 key {quoted(cols[col])} ({col})"
        if self.masked[row, col]:
            return f"{where}: masked ({'future token' if col > row else 'outside the sliding window'})"
        return f"{where}: {self.value_name} {format_value(self.matrix[row, col])}"

    def set_colormap(self, name: str, symmetric: bool) -> None:
        self.colormap = pg.colormap.get(name)
        self.symmetric = symmetric
        self.colorbar.setColorMap(self.colormap)


class StatisticHeatmap(Heatmap):
    """The L x H table of one head statistic, with "L0 H1: name value" tooltips. ``absent(layer, head)``: why
    a cell has no map ("" where it has one; a model whose layers differ)."""

    absent: Callable[[int, int], str] | None = None

    def cell_text(self, row: int, col: int) -> str:
        why = self.absent(row, col) if self.absent is not None else ""
        if why:
            return why
        value = self.matrix[row, col]
        shown = format_value(value) if math.isfinite(value) else "undefined (no repeated tokens)"
        return f"{self.row_labels[row]} {self.col_labels[col]}: {self.value_name} {shown}"



def all_heads_cheap(trace: Trace) -> bool:
    """Whether work over every head (the mosaic, a statistic) is cheap enough to do with the trace
    (multiply-adds of all heads' q.k under ``ALL_HEADS_NOW_MACS``); else it is done progressively."""
    cfg, n = trace.config, trace.n_tokens
    if not uniform(cfg):  # recurrent layers: their effective attention's cost (layer_maps.grid_cost)
        return grid_cost(cfg, n) <= ALL_HEADS_NOW_MACS
    return cfg.n_layers * cfg.n_heads * n * n * cfg.d_head <= ALL_HEADS_NOW_MACS


def head_source(trace: Trace):
    """``(layer, head) -> [n, n] pattern``: from every layer's precomputed patterns when they fit
    ``LAYER_PATTERN_BUDGET``, else one head at a time from the stored q and k."""
    if layer_patterns_fit(trace):
        return lambda layer, head: trace[f"blocks.{layer}.attn.pattern"][head]
    return lambda layer, head: trace.head(layer, head, "pattern")


def mosaic_of(trace: Trace, check=None) -> tuple[np.ndarray, MosaicGeometry]:
    """Every head's pattern tiled into one image (block-averaged beyond ``MAX_TILE``), once per trace.
    ``check()`` is called before each head (it raises when the work is stale). When the layers'
    patterns do not fit ``LAYER_PATTERN_BUDGET`` each tile is pooled from its head's q and k row chunk
    by row chunk (``attention_tiles.pooled_mosaic``): no head's [n, n] matrix is built."""
    cfg = trace.config
    if not uniform(cfg):  # layers that differ: each layer's own maps (a recurrent layer's effective attention)
        return trace.memo(("attention.mosaic", MAX_TILE), lambda: layer_mosaic(trace, MAX_TILE, check=check))
    if not layer_patterns_fit(trace):
        return trace.memo(("attention.mosaic", MAX_TILE), lambda: pooled_mosaic(trace, MAX_TILE, check=check))
    source = head_source(trace)

    def checked(layer: int, head: int) -> np.ndarray:
        if check is not None:
            check()
        return source(layer, head)

    return trace.memo(("attention.mosaic", MAX_TILE), lambda: tile_heads(
        checked, max_tile=MAX_TILE, n_layers=cfg.n_layers, n_heads=cfg.n_heads))


def statistic_of(trace: Trace, name: str) -> np.ndarray:
    """The [L, H] values of one head statistic, once per trace ([L, the grid's columns] for a model whose layers
    differ, NaN where a layer has no such map: ``analysis.head_statistics``)."""
    return trace.memo(("attention.statistic", name), lambda: analysis.head_statistics(trace, name))
