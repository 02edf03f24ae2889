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
* ``weights_statistic(trace, layer, head, name)``: ``analysis.attention.STATISTICS`` on the map;
* ``row_shares(values)``: each row's shares of its weights' sizes (what a recurrent map's statistics read).

An attention layer goes through core/analysis/attention_tiles.py unchanged. A recurrent layer's weights are not a
softmax: they can be negative and their rows need not sum to 1 (Mamba-2's include the skip D on the diagonal), so
its overview pools their size (|A|, or the signed weight of largest size) and its statistics read each row's shares
of sum_s |A[t, s]|. Each call holds one head's rows a block at a time (``row_step``: about ``BLOCK_NUMBERS``
numbers). core/analysis/layer_maps.py does the same for every layer at once (the all-heads grid, statistics).
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

BLOCK_NUMBERS = 1 << 20  # numbers of one head's block per ``effective_block`` call when a whole map is read

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
    recurrent layer's pixel is the ``pool`` of |A| over its f x f block (a key after the query counts as 0), or
    with ``pool="signed"`` the weight of largest size in the block, its sign kept (what a diverging colour map
    shows: the exact cells' colours where the block is one cell)."""
    if effective_kind(trace.config, layer) is None:
        return attention_tiles.overview(trace, layer, head, "pattern", pixels, pool, check)
    if pool not in (*attention_tiles.POOLS, "signed"):
        raise ValueError(f"pool must be one of {(*attention_tiles.POOLS, 'signed')}")

    def compute() -> tuple[np.ndarray, int]:
        n = trace.n_tokens
        factor = downsample_factor(n, pixels)
        step = row_step(n, factor)
        parts = [signed_max(values, factor) if pool == "signed" else
                 attention_tiles._pool_rows(torch.from_numpy(np.abs(values)), factor, pool)
                 for _, values in _rows(trace, layer, head, step, check)]
        image = torch.cat(parts).numpy() if parts else np.zeros((0, 0), np.float32)
        image.flags.writeable = False
        return image, factor

    return trace.memo(("effective_tiles.overview", layer, head, pixels, pool), compute)


def row_step(n: int, factor: int = 1) -> int:
    """Query rows per ``effective_block`` call when a whole map is read row block by row block: as many as keep
    one head's block within ``BLOCK_NUMBERS`` numbers (a DeltaNet block restarts from the first chunk, so fewer,
    larger blocks cost less), at least ``ROW_BLOCK``, whole pixels of ``factor`` rows."""
    step = max(ROW_BLOCK, BLOCK_NUMBERS // max(1, n))
    return max(factor, (step // factor) * factor)


def signed_max(values: np.ndarray, factor: int) -> torch.Tensor:
    """[r, c] -> [ceil(r/f), ceil(c/f)]: in each f x f block the entry of largest size, with its sign (float32)."""
    r, c = values.shape
    rows, cols = math.ceil(r / factor), math.ceil(c / factor)
    padded = np.zeros((rows * factor, cols * factor), np.float32)
    padded[:r, :c] = values
    blocks = padded.reshape(rows, factor, cols, factor).transpose(0, 2, 1, 3).reshape(rows, cols, factor * factor)
    pick = np.take_along_axis(blocks, np.abs(blocks).argmax(-1)[..., None], -1)[..., 0]
    return torch.from_numpy(np.ascontiguousarray(pick))


def weights_statistic(trace: Trace, layer: int, head: int, name: str,
                      check: Callable[[], None] | None = None) -> float:
    """``name`` (one of ``analysis.attention.STATISTICS``) of one map: an attention head's
    (attention_tiles.head_statistic), or a recurrent layer's on each row's shares of its |weights|
    (``row_shares``), through the same arithmetic (``head_sums.statistic_sums``)."""
    if effective_kind(trace.config, layer) is None:
        return attention_tiles.head_statistic(trace, layer, head, name, check)
    from explorer.core.analysis.head_sums import statistic_sums

    ids = np.asarray(trace.token_ids).reshape(1, -1)
    total, rows = 0.0, 0
    for r0, values in _rows(trace, layer, head, row_step(trace.n_tokens), check):
        sums, counted = statistic_sums(row_shares(values)[None, None], ids, r0, (name,))[name]
        total += float(sums[0, 0])
        rows += int(counted[0])
    return total / rows if rows else math.nan


def row_shares(values: np.ndarray) -> np.ndarray:
    """Each row's shares of its weights' sizes, |A[t, s]| / sum_s |A[t, s]| (float64; a row of zeros stays 0):
    what a recurrent map's statistics and its tile in the all-heads grid read, a row summing to 1 as a pattern's."""
    size = np.abs(np.asarray(values, dtype=np.float64))
    return size / np.maximum(size.sum(-1, keepdims=True), 1e-300)
