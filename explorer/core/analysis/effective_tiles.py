"""One call for a layer's weights over earlier tokens, whatever the layer is: an attention head's pattern, or a
recurrent / convolutional layer's effective attention (core/mixers/effective.py), tile by tile for long prompts.

The Attention panel, the all-heads mosaic, the head statistics and the induction score call these instead of
reading ``attn.pattern`` (absent on a recurrent layer) or building a whole [n, n] map:

* ``layer_title(cfg, layer)``: what the map of this layer is ("layer 3: sliding attention (window 4096)",
  "layer 0: Gated DeltaNet, effective attention"), for a panel's title;
* ``maps(cfg, layer)``: how many maps (heads; a convolution's channels);
* ``weights_block(trace, layer, head, rows, cols)``: the exact weights of a rectangle of queries x keys [r, c];
* ``weights_row(trace, layer, head, query)``: one query's weights over every key [n];
* ``weights_overview(trace, layer, head, pixels, pool)``: the whole map pooled to at most ``pixels`` a side;
* ``weights_statistic(trace, layer, head, name)``: ``analysis.attention.STATISTICS`` on the map.

An attention layer goes through core/analysis/attention_tiles.py unchanged. A recurrent layer's weights are not a
softmax: they can be negative and their rows need not sum to 1 (Mamba-2's include the skip D on the diagonal), so
its overview pools their size (|A|) and its statistics read each row's shares of sum_s |A[t, s]|. Each call holds
at most ``ROW_BLOCK`` query rows of one head at once.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import torch

from explorer.core.analysis import attention_tiles
from explorer.core.display.mosaic import downsample_factor
from explorer.core.mixers.effective import ROW_BLOCK, effective_block, effective_kind, head_count

if TYPE_CHECKING:
    from explorer.core.config import ModelConfig
    from explorer.core.trace import Trace


def layer_title(cfg: ModelConfig, layer: int) -> str:
    """What the map of ``layer`` is, in words (the first line of its plan's description for attention)."""
    kind = effective_kind(cfg, layer)
    if kind is not None:
        return f"layer {layer}: {kind}, effective attention"
    return cfg.layer(layer).describe().split(", FFN")[0].split(", mixture")[0].split(", no FFN")[0]


def maps(cfg: ModelConfig, layer: int) -> int:
    return head_count(cfg, layer)


def weights_block(trace: Trace, layer: int, head: int, rows: tuple[int, int], cols: tuple[int, int]) -> np.ndarray:
    """The exact weights of queries ``rows`` x keys ``cols`` (half-open): float32 [r, c], 0 where a key is not seen."""
    if effective_kind(trace.config, layer) is None:
        return attention_tiles.block(trace, layer, head, "pattern", rows, cols, masked=0.0)
    return effective_block(trace, layer, [head], rows, cols)[0]


def weights_row(trace: Trace, layer: int, head: int, query: int) -> np.ndarray:
    """Query ``query``'s weights over every key [n] (float32)."""
    if effective_kind(trace.config, layer) is None:
        return attention_tiles.query_row(trace, layer, head, "pattern", query)
    n = trace.n_tokens
    q = min(max(int(query), 0), n - 1)
    return effective_block(trace, layer, [head], (q, q + 1), (0, n))[0, 0]


def _rows(trace: Trace, layer: int, head: int, step: int, check: Callable[[], None] | None):
    """(first row, the weights of ``step`` query rows over every key), a block at a time."""
    n = trace.n_tokens
    for r0 in range(0, n, step):
        if check is not None:
            check()
        yield r0, effective_block(trace, layer, [head], (r0, min(n, r0 + step)), (0, n))[0]


def weights_overview(trace: Trace, layer: int, head: int, pixels: int, pool: str = "max",
                     check: Callable[[], None] | None = None) -> tuple[np.ndarray, int]:
    """The map pooled to at most ``pixels`` a side: (image [ceil(n/f), ceil(n/f)] float32, f tokens per pixel). A
    recurrent layer's pixel is the ``pool`` of |A| over its f x f block (a key after the query counts as 0)."""
    if effective_kind(trace.config, layer) is None:
        return attention_tiles.overview(trace, layer, head, "pattern", pixels, pool, check)
    if pool not in attention_tiles.POOLS:
        raise ValueError(f"pool must be one of {attention_tiles.POOLS}")

    def compute() -> tuple[np.ndarray, int]:
        n = trace.n_tokens
        factor = downsample_factor(n, pixels)
        step = max(factor, (ROW_BLOCK // factor) * factor)
        parts = [attention_tiles._pool_rows(torch.from_numpy(np.abs(values)), factor, pool)
                 for _, values in _rows(trace, layer, head, step, check)]
        image = torch.cat(parts).numpy() if parts else np.zeros((0, 0), np.float32)
        image.flags.writeable = False
        return image, factor

    return trace.memo(("effective_tiles.overview", layer, head, pixels, pool), compute)


def weights_statistic(trace: Trace, layer: int, head: int, name: str,
                      check: Callable[[], None] | None = None) -> float:
    """``name`` ("entropy", "first_token", "previous_token", "induction") of one map: an attention head's
    (attention_tiles.head_statistic), or a recurrent layer's on each row's shares of its |weights|."""
    if effective_kind(trace.config, layer) is None:
        return attention_tiles.head_statistic(trace, layer, head, name, check)
    ids = np.asarray(trace.token_ids).reshape(-1)
    n = trace.n_tokens
    total, rows = 0.0, 0
    for r0, values in _rows(trace, layer, head, ROW_BLOCK, check):
        size = np.abs(values.astype(np.float64))
        p = size / np.maximum(size.sum(-1, keepdims=True), 1e-300)
        i = np.arange(r0, r0 + len(p))
        if name == "entropy":
            total += float(-(p * np.log(np.where(p > 0, p, 1.0))).sum())
            rows += len(p)
        elif name in ("first_token", "previous_token"):
            keep = i >= 1
            total += float(p[keep, 0].sum() if name == "first_token" else p[keep, i[keep] - 1].sum())
            rows += int(keep.sum())
        elif name == "induction":
            after = (ids[None, :-1] == ids[i, None]) & (np.arange(n - 1)[None, :] <= i[:, None] - 2)
            has = after.any(axis=1)
            total += float(np.where(after, p[:, 1:], 0.0).sum(axis=1)[has].sum())
            rows += int(has.sum())
        else:
            raise ValueError(f"unknown head statistic {name!r}")
    return total / rows if rows else math.nan
