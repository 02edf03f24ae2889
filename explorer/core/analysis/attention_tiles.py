"""One head's attention over a long prompt, computed only where it is looked at.

A head's scores and pattern are [n, n]; at n = 4096 that is 64 MiB per head (float32), and a model
has hundreds of heads. The views never build them: everything here works on one head's q [n, dh] and
k [m, dh] (read from the Trace through ``trace[...]``) in blocks of query rows, so the most any call
holds at once is ``CHUNK_ROWS x n`` numbers.

* ``block(...)``: the exact scores or pattern of a rectangle of queries x keys. Scores need only the
  rectangle's q and k. The pattern's softmax needs each row's normaliser over ALL its keys: the
  row's log-sum-exp, computed once per head by ``row_logsumexp`` (in row chunks) and kept with the
  trace; a cell is then ``exp(score - lse[row])``, the same number as the full softmax's.
* ``overview(...)``: the whole head reduced to at most ``pixels`` a side, each pixel the MAX (or
  the mean) over an ``f x f`` block of queries x keys, exact within the block (computed chunk by
  chunk from full rows). Max pooling keeps a thin structure (a previous-token diagonal, one key
  that every query reads) visible that a mean over f x f cells would dilute by 1/f.
* ``pooled_mosaic(...)``: every head's mean-pooled overview tiled as ``display.mosaic`` tiles them,
  a layer's heads at a time (``layer_pooled_patterns``: one product and softmax per row chunk for all its heads,
  a causal chunk only up to its last query's key), never more than one row chunk of one layer in memory.

The scores are the forward pass's own (``model.layer_scores`` on a window of rows x keys: the layer's
scale, ALiBi bias, causal / sliding-window mask and soft cap); masked cells are -inf in the scores and 0
in the pattern. Pure torch, no Qt.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import torch

from explorer.core.attention import attention_pattern
from explorer.core.display.mosaic import MosaicGeometry, downsample_factor

if TYPE_CHECKING:
    from explorer.core.trace import Trace

__all__ = ["CHUNK_ROWS", "block", "row_logsumexp", "overview", "query_row", "pooled_mosaic", "layer_pooled_patterns",
           "POOLS"]

CHUNK_ROWS = 256  # query rows per step: CHUNK_ROWS x n scores at a time (4 MiB at n = 4096)
POOLS = ("max", "mean")
MOSAIC_CHUNK_NUMBERS = 2**22  # the layer-batched mosaic's scores at a time (16 MiB): heads x rows x keys


def _tensor(a) -> torch.Tensor:
    """A float32 tensor of a trace array (a view when it is float32 already), where the array lives."""
    from explorer.core.trace import as_tensor

    if isinstance(a, torch.Tensor):
        return a.detach().float()
    return as_tensor(np.ascontiguousarray(a)).float()


_last_qk: tuple = (None, None, None, None)  # (weakref to the trace, layer, head, (q, k)): the head last asked for


def head_qk(trace: Trace, layer: int, head: int) -> tuple[torch.Tensor, torch.Tensor]:
    """This head's q [n, dh] and its K/V group's k [m, dh], as float32 tensors (views where the trace
    stores float32). The last head's pair is kept (not the trace: a weak reference): a token switch asks
    for the same head again, and converting a float16 trace's q and k each time was most of its cost."""
    global _last_qk
    ref, last_layer, last_head, pair = _last_qk  # one read: another thread may replace it meanwhile
    if ref is not None and ref() is trace and (last_layer, last_head) == (layer, head):
        return pair
    q = trace[f"blocks.{layer}.attn.q"]
    k = trace[f"blocks.{layer}.attn.k"]
    group = q.shape[0] // k.shape[0]
    pair = (_tensor(q[head]), _tensor(k[head // group]))
    _last_qk = (weakref.ref(trace), layer, head, pair)
    return pair


def _block_scores(trace: Trace, layer: int, head: int, q: torch.Tensor, k: torch.Tensor,
                  rows: tuple[int, int], cols: tuple[int, int]) -> torch.Tensor:
    """Exact scores (what enters the softmax) of queries ``rows`` x keys ``cols`` [r, c]."""
    return _heads_scores(trace, layer, [head], q[None], k[None], rows, cols)[0]


def _heads_scores(trace: Trace, layer: int, heads: list[int], q: torch.Tensor, k: torch.Tensor,
                  rows: tuple[int, int], cols: tuple[int, int]) -> torch.Tensor:
    """``_block_scores`` of several heads at once: q [h, n, dh] of query heads ``heads`` and k [h or
    their K/V heads, m, dh] (the K/V heads of consecutive query heads, as the forward pass groups them)
    -> [h, r, c]: the forward pass's own recipe (``model.layer_scores``) on that window."""
    from explorer.core.model import layer_scores

    with torch.inference_mode():
        return layer_scores(trace.config, q, k, heads=heads, layer=layer, rows=rows, cols=cols)[0]


def _row_lse(trace: Trace, layer: int, heads: list[int], scores: torch.Tensor) -> torch.Tensor:
    """Each row's log-sum-exp over its keys [h, r] (or [r] for one head's [r, c]), with the head's sink logit
    in it where the model has sinks (gpt-oss: ``attention.pattern_and_sink``'s softmax, whose extra column is
    then dropped), so ``exp(score - lse)`` is the model's pattern."""
    lse = torch.logsumexp(scores, dim=-1)
    if trace.config.attn_sinks:
        sinks = trace.sink_logits(layer, scores.device)[heads].to(lse.dtype)  # [h]
        lse = torch.logaddexp(lse, sinks[:, None] if lse.dim() == 2 else sinks[0])
    return lse


def row_logsumexp(trace: Trace, layer: int, head: int, check: Callable[[], None] | None = None) -> np.ndarray:
    """log(sum_j exp(score[i, j])) for every query i [n] (float64), computed in row chunks; kept with
    the trace. The pattern of any cell is exp(score - lse[row])."""
    def compute() -> np.ndarray:
        q, k = head_qk(trace, layer, head)
        n, m = q.shape[0], k.shape[0]
        out = np.empty(n, dtype=np.float64)
        for r0 in range(0, n, CHUNK_ROWS):
            if check is not None:
                check()
            r1 = min(n, r0 + CHUNK_ROWS)
            last = min(m, r1 + m - n) if trace.config.causal else m  # later keys are masked anyway
            scores = _block_scores(trace, layer, head, q, k, (r0, r1), (0, last)).double()
            out[r0:r1] = _row_lse(trace, layer, [head], scores).cpu().numpy()
        out.flags.writeable = False
        return out

    return trace.memo(("attention_tiles.lse", layer, head), compute)


def block(trace: Trace, layer: int, head: int, kind: str, rows: tuple[int, int],
          cols: tuple[int, int], masked: float | None = None) -> np.ndarray:
    """The exact ``kind`` ("scores" or "pattern") of queries ``rows`` x keys ``cols`` (half-open
    ranges of positions): float32 [r, c], masked scores -inf and masked weights 0 (or ``masked``)."""
    if kind not in ("scores", "pattern"):
        raise ValueError("kind must be 'scores' or 'pattern'")
    q, k = head_qk(trace, layer, head)
    n, m = q.shape[0], k.shape[0]
    r0, r1 = max(0, int(rows[0])), min(n, int(rows[1]))
    c0, c1 = max(0, int(cols[0])), min(m, int(cols[1]))
    if r1 <= r0 or c1 <= c0:
        return np.zeros((max(0, r1 - r0), max(0, c1 - c0)), dtype=np.float32)
    scores = _block_scores(trace, layer, head, q, k, (r0, r1), (c0, c1))
    if kind == "scores":
        values = scores
    else:
        lse = torch.from_numpy(row_logsumexp(trace, layer, head)[r0:r1]).to(scores.device)
        values = torch.exp(scores.double() - lse[:, None]).float()
    if masked is not None:
        values = values.masked_fill(torch.isneginf(scores), masked)
    return values.cpu().numpy()


def _row_scores_numpy(trace: Trace, layer: int, head: int, q: torch.Tensor, k: torch.Tensor,
                      i: int) -> np.ndarray | None:
    """Query ``i``'s scores over every key [m] with numpy (the forward pass's recipe: scale, and the
    keys the layer lets it see, ``model.visible_keys``, the rule ``model.layer_mask`` is built from), for a
    CPU trace without ALiBi or a soft cap; else None. A token switch draws one row on the GUI thread:
    numpy's small product holds the GIL, where torch's few small ops each let it go and wait to take it
    back from a busy worker (most of a long prompt's token switch under load)."""
    from explorer.core.attention import layer_reach, visible_keys

    cfg = trace.config
    if cfg.alibi or cfg.attn_softcap is not None or q.device.type != "cpu":
        return None
    qn, kn = q.numpy(), k.numpy()
    n, m = qn.shape[0], kn.shape[0]
    scale = 1.0 / math.sqrt(qn.shape[-1]) if cfg.attn_scale is None else cfg.attn_scale
    scores = (qn[i:i + 1] * np.float32(scale)) @ kn.T
    row = scores[0]
    if cfg.causal:
        lo, hi = visible_keys(n, m, i, *layer_reach(cfg, layer))
        row[hi:] = -np.inf
        row[:max(0, lo)] = -np.inf
    return row.astype(np.float32, copy=False)


def query_row(trace: Trace, layer: int, head: int, kind: str, query: int) -> np.ndarray:
    """One query's exact row over every key [m] (float32)."""
    if kind not in ("scores", "pattern"):
        raise ValueError("kind must be 'scores' or 'pattern'")
    scores, pattern = query_rows(trace, layer, head, query)
    return scores if kind == "scores" else pattern


def query_rows(trace: Trace, layer: int, head: int, query: int) -> tuple[np.ndarray, np.ndarray]:
    """(scores, pattern) of one query over every key [m] (float32), exact: ``query_row``'s two rows from
    one product of q and k (a token switch draws the row and its mask)."""
    q, k = head_qk(trace, layer, head)
    i, m = min(max(int(query), 0), q.shape[0] - 1), k.shape[0]
    row = _row_scores_numpy(trace, layer, head, q, k, i)
    if row is not None:
        lse = row_logsumexp(trace, layer, head)[i]
        return row, np.exp(row.astype(np.float64) - lse).astype(np.float32)
    scores = _block_scores(trace, layer, head, q, k, (i, i + 1), (0, m))
    lse = torch.from_numpy(row_logsumexp(trace, layer, head)[i:i + 1]).to(scores.device)
    pattern = torch.exp(scores.double() - lse[:, None]).float()
    return scores[0].cpu().numpy(), pattern[0].cpu().numpy()


def _pool_rows(values: torch.Tensor, factor: int, pool: str) -> torch.Tensor:
    """[r, c] -> [ceil(r/f), ceil(c/f)]: max or mean of the finite entries of each f x f block
    (a block with none becomes NaN)."""
    r, c = values.shape
    rows, cols = math.ceil(r / factor), math.ceil(c / factor)
    finite = torch.isfinite(values)
    if pool == "mean" and bool(finite.all()):  # the common case (a pattern): plain block sums
        padded = values.new_zeros((rows * factor, cols * factor))
        padded[:r, :c] = values
        sums = padded.view(rows, factor, cols, factor).sum(dim=(1, 3), dtype=torch.float64)
        sizes_r = torch.clamp(r - torch.arange(rows) * factor, max=factor)
        sizes_c = torch.clamp(c - torch.arange(cols) * factor, max=factor)
        return (sums / (sizes_r[:, None] * sizes_c[None, :])).float()
    padded = torch.full((rows * factor, cols * factor), float("nan"))
    padded[:r, :c] = values
    blocks = padded.view(rows, factor, cols, factor)
    okp = torch.zeros((rows * factor, cols * factor), dtype=torch.bool)
    okp[:r, :c] = finite
    ok = okp.view(rows, factor, cols, factor)
    count = ok.sum(dim=(1, 3))
    if pool == "max":
        out = torch.where(ok, blocks, torch.tensor(float("-inf"))).amax(dim=(1, 3))
    else:
        out = torch.where(ok, blocks, torch.tensor(0.0)).sum(dim=(1, 3)) / count.clamp(min=1)
    return torch.where(count > 0, out, torch.tensor(float("nan")))


def overview(trace: Trace, layer: int, head: int, kind: str, pixels: int, pool: str = "max",
             check: Callable[[], None] | None = None) -> tuple[np.ndarray, int]:
    """The head's ``kind`` pooled to at most ``pixels`` a side: (image [ceil(n/f), ceil(m/f)] float32,
    f = tokens per pixel). Each pixel is the ``pool`` ("max" or "mean") of the finite cells of its
    f x f block of queries x keys (NaN where every cell is masked); exact where f = 1. Kept with the
    trace; the row normalisers it meets on the way are kept too."""
    if pool not in POOLS:
        raise ValueError(f"pool must be one of {POOLS}")
    if kind not in ("scores", "pattern"):
        raise ValueError("kind must be 'scores' or 'pattern'")

    def compute() -> tuple[np.ndarray, int]:
        q, k = head_qk(trace, layer, head)
        n, m = q.shape[0], k.shape[0]
        factor = downsample_factor(max(n, m), pixels)
        step = max(factor, (CHUNK_ROWS // factor) * factor)  # whole blocks of rows per chunk
        parts, lse = [], np.empty(n, dtype=np.float64)
        for r0 in range(0, n, step):
            if check is not None:
                check()
            r1 = min(n, r0 + step)
            scores = _block_scores(trace, layer, head, q, k, (r0, r1), (0, m))
            rows_lse = _row_lse(trace, layer, [head], scores)  # float32: the softmax's own precision
            lse[r0:r1] = rows_lse.cpu().numpy()
            values = scores if kind == "scores" else torch.exp(scores - rows_lse[:, None])
            if kind == "pattern" and pool == "max":  # masked cells: no weight to show (a mean counts their 0s,
                values = values.masked_fill(torch.isneginf(scores), float("nan"))  # as display.mosaic does)
            parts.append(_pool_rows(values.cpu(), factor, pool))
        lse.flags.writeable = False
        trace.memo(("attention_tiles.lse", layer, head), lambda: lse)
        image = torch.cat(parts).numpy() if parts else np.zeros((0, 0), np.float32)
        image.flags.writeable = False
        return image, factor

    return trace.memo(("attention_tiles.overview", layer, head, kind, pixels, pool), compute)


def pooled_mosaic(trace: Trace, max_tile: int, gap: int = 1, fill: float = np.nan,
                  check: Callable[[], None] | None = None) -> tuple[np.ndarray, MosaicGeometry]:
    """Every head's pattern mean-pooled to ``max_tile`` pixels a side and tiled as
    ``display.mosaic.tile_heads`` tiles them (same geometry), a layer's heads at a time
    (``layer_pooled_patterns``). Each head's tile is kept with the trace, as ``overview(..., "pattern",
    max_tile, "mean")`` keeps it."""
    cfg, n = trace.config, trace.n_tokens
    geometry = MosaicGeometry(cfg.n_layers, cfg.n_heads, n, gap, downsample_factor(n, max_tile))
    image = np.full(geometry.shape, fill, dtype=np.float32)
    t = geometry.tile
    for layer in range(cfg.n_layers):
        tiles = _layer_tiles(trace, layer, max_tile, check)
        for head in range(cfg.n_heads):
            tile = tiles[head]
            x, y = geometry.tile_origin(layer, head)
            image[y:y + t, x:x + t] = np.where(np.isfinite(tile), tile, np.float32(fill))
    return np.ascontiguousarray(image), geometry


def _layer_tiles(trace: Trace, layer: int, pixels: int, check: Callable[[], None] | None) -> list[np.ndarray]:
    """Every head's mean-pooled pattern of ``layer`` (from the memo where every head has one already)."""
    cfg = trace.config
    keys = [("attention_tiles.overview", layer, head, "pattern", pixels, "mean") for head in range(cfg.n_heads)]
    q_len, k_len = trace[f"blocks.{layer}.attn.q"].shape[-2], trace[f"blocks.{layer}.attn.k"].shape[-2]
    if q_len != k_len or all(trace.memo_get(key) is not None for key in keys):
        return [overview(trace, layer, head, "pattern", pixels, "mean", check)[0] for head in range(cfg.n_heads)]
    images, factor = layer_pooled_patterns(trace, layer, pixels, check)
    out = []
    for head, key in enumerate(keys):
        image = np.ascontiguousarray(images[head])
        image.flags.writeable = False
        out.append(trace.memo(key, lambda image=image: (image, factor))[0])
    return out


def layer_pooled_patterns(trace: Trace, layer: int, pixels: int, check: Callable[[], None] | None = None
                          ) -> tuple[np.ndarray, int]:
    """Every head of ``layer`` at once: (the patterns mean-pooled over f x f blocks of queries x keys
    [H, ceil(n/f), ceil(m/f)] float32, f), the same numbers as ``overview(..., "pattern", pixels,
    "mean")`` head by head, computed a chunk of query rows at a time: one product and one softmax per
    chunk for as many heads as fit ``MOSAIC_CHUNK_NUMBERS`` (at least one head's ``f`` rows, as
    ``overview`` holds them). A causal layer's chunk reads only the keys up to its last query (the
    later blocks are all masked: their mean is 0), half the work of full rows."""
    cfg = trace.config
    q = _tensor(trace[f"blocks.{layer}.attn.q"])
    k = _tensor(trace[f"blocks.{layer}.attn.k"])
    heads, n, m = q.shape[0], q.shape[-2], k.shape[-2]
    factor = downsample_factor(max(n, m), pixels)
    rows_fit = min(CHUNK_ROWS, MOSAIC_CHUNK_NUMBERS // max(1, heads * m))
    step = max(factor, (rows_fit // factor) * factor)  # whole blocks of rows per chunk
    group = max(1, MOSAIC_CHUNK_NUMBERS // (step * m))  # heads per product: at most the budget's numbers
    kv_of = heads // k.shape[0]
    image = torch.zeros((heads, math.ceil(n / factor), math.ceil(m / factor)), dtype=torch.float32)
    for r0 in range(0, n, step):
        r1 = min(n, r0 + step)
        last = min(m, r1 + m - n) if cfg.causal else m  # later keys are masked for every row of the chunk
        c1 = min(m, math.ceil(last / factor) * factor)  # whole blocks of keys
        r, pr, pc = r1 - r0, math.ceil((r1 - r0) / factor), math.ceil(c1 / factor)
        sizes_r = torch.clamp(n - (r0 + torch.arange(pr) * factor), max=factor)
        sizes_c = torch.clamp(m - torch.arange(pc) * factor, max=factor)
        for h0 in range(0, heads, group):
            if check is not None:
                check()
            h1 = min(heads, h0 + group)
            kv = k[torch.arange(h0, h1) // kv_of]  # each query head's K/V head
            with torch.inference_mode():
                scores = _heads_scores(trace, layer, list(range(h0, h1)), q[h0:h1], kv, (r0, r1), (0, c1))
                # exact rows, by the forward pass's own softmax (the masked keys weigh 0; a sink takes its share
                # where the model has one): one fused pass, where a log-sum-exp and then exp(s - lse) took two
                sinks = trace.sink_logits(layer, scores.device)[h0:h1] if trace.config.attn_sinks else None
                values = attention_pattern(scores, sinks).cpu()
                if r != pr * factor or c1 != pc * factor:
                    padded = values.new_zeros((h1 - h0, pr * factor, pc * factor))
                    padded[:, :r, :c1] = values
                    values = padded
                # a block's f keys summed in float32 (contiguous), its f rows of those in float64
                sums = values.view(h1 - h0, pr, factor, pc, factor).sum(dim=-1).sum(dim=2, dtype=torch.float64)
                image[h0:h1, r0 // factor:r0 // factor + pr, :pc] = (
                    sums / (sizes_r[:, None] * sizes_c[None, :])).float()
    return image.numpy(), factor


def head_statistic(trace: Trace, layer: int, head: int, name: str,
                   check: Callable[[], None] | None = None) -> float:
    """One of ``analysis.attention.STATISTICS`` for one head, from its pattern's rows a chunk at a time
    (the same numbers as the statistic of the whole [n, n] pattern, which is never built): the sums of
    ``attention.statistic_sums`` over the chunks, divided by their counted rows."""
    from explorer.core.analysis.head_sums import statistic_sums

    q, k = head_qk(trace, layer, head)
    n, m = q.shape[0], k.shape[0]
    if n != m:
        raise ValueError("head statistics need a square pattern")
    ids = np.asarray(trace.token_ids).reshape(1, -1)
    total, rows = 0.0, 0
    for r0 in range(0, n, CHUNK_ROWS):
        if check is not None:
            check()
        r1 = min(n, r0 + CHUNK_ROWS)
        scores = _block_scores(trace, layer, head, q, k, (r0, r1), (0, m)).double()
        p = torch.exp(scores - _row_lse(trace, layer, [head], scores)[:, None]).numpy()  # [r, n], exact rows
        sums, counted = statistic_sums(p[None, None], ids, r0, (name,))[name]
        total += float(sums[0, 0])
        rows += int(counted[0])
    return total / rows if rows else float("nan")
