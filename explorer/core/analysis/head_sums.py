"""The one definition of the head statistics' arithmetic: for a block of pattern rows, the sums over the
counted rows and the row counts (``statistic_sums``), in numpy or in torch where the patterns are.

``analysis.attention`` (the per-prompt statistics and their table), ``analysis.attention_tiles`` (a long
prompt's statistics a chunk of rows at a time) and ``explorer.core.corpus`` (the mean over windows) all call
it; the statistics themselves are described in ``analysis/attention.py``. A module of its own so that those
callers depend on it and not on each other.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

NAMES = ("entropy", "first_token", "previous_token", "duplicate_token", "induction")


def repeat_pairs(ids: np.ndarray, rows: tuple[int, int] | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every (b, i, c) with c < i and ``ids[b, c] == ids[b, i]``: each query i of window b with each earlier
    occurrence c of its token, for the queries i in ``rows`` (start, stop; default all). int64 arrays, sorted
    by (b, token, i, c). O(pairs): never an [n, n] mask."""
    ids = np.asarray(ids)
    ids = ids.reshape(1, -1) if ids.ndim < 2 else ids
    B, n = ids.shape
    if n == 0:
        empty = np.zeros(0, np.int64)
        return empty, empty, empty
    b = np.repeat(np.arange(B, dtype=np.int64), n)
    pos = np.tile(np.arange(n, dtype=np.int64), B)
    order = np.lexsort((pos, ids.reshape(-1), b))                    # by window, token, position
    sb, st, sp = b[order], ids.reshape(-1)[order], pos[order]
    new = np.ones(B * n, dtype=bool)
    new[1:] = (sb[1:] != sb[:-1]) | (st[1:] != st[:-1])
    start = np.maximum.accumulate(np.where(new, np.arange(B * n), 0))  # each element's group start
    rank = np.arange(B * n) - start                                   # earlier occurrences of its token
    if rows is not None:
        rank = np.where((sp >= rows[0]) & (sp < rows[1]), rank, 0)
    count = int(rank.sum())
    qi = np.repeat(np.arange(B * n), rank)                            # the query's place in the order
    offsets = np.arange(count) - np.repeat(np.cumsum(rank) - rank, rank)
    ci = np.repeat(start, rank) + offsets
    return sb[qi], sp[qi], sp[ci]


def _torch_of(a: Any) -> Any:
    """The torch module when ``a`` is a tensor (then torch is imported already), else None."""
    return sys.modules["torch"] if type(a).__module__.startswith("torch") else None


def statistic_sums(p: Any, ids: np.ndarray, first_row: int = 0, names: Sequence[str] = NAMES,
                   pairs: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> dict[str, tuple[Any, np.ndarray]]:
    """For each statistic in ``names``: (the sum over its counted rows [B, H], the counted rows [B]) of the
    patterns ``p`` [B, H, r, m] whose rows are queries ``first_row .. first_row + r - 1`` over keys 0..m-1,
    with token ids ``ids`` [B, m] (numpy). ``p`` is a numpy array (summed in float64) or a torch tensor (summed
    where it is, in its dtype, returned as float64). ``pairs``: ``repeat_pairs(ids, rows)`` if known already."""
    torch = _torch_of(p)
    if torch is None:
        p = np.asarray(p, dtype=np.float64)
    ids = np.asarray(ids)
    B, H, r, m = p.shape
    stop = first_row + r
    start = max(0, 1 - first_row)                                      # local row of query 1
    out: dict[str, tuple[Any, np.ndarray]] = {}

    def index(a: np.ndarray) -> Any:
        return a if torch is None else torch.as_tensor(a, device=p.device)

    def per_window(pb: np.ndarray, values: Any) -> Any:                # values [P, H] summed into their windows
        if torch is None:
            sums = np.zeros((B, H))
            np.add.at(sums, pb, values)
            return sums
        return torch.zeros((B, H), dtype=torch.float64, device=p.device).index_add_(0, index(pb), values.double())

    def rows_of(pb: np.ndarray, pi: np.ndarray) -> np.ndarray:        # distinct queries per window
        if len(pb) == 0:
            return np.zeros(B, np.int64)
        key = np.unique(pb * stop + pi)
        return np.bincount(key // stop, minlength=B).astype(np.int64)

    for name in names:
        if name == "entropy":
            ent = (torch.special.entr(p).sum(-1) if torch is not None
                   else -(p * np.log(np.where(p > 0, p, 1.0))).sum(-1))   # 0 ln 0 counts as 0
            sums, rows = ent.sum(-1), np.full(B, r, np.int64)
        elif name in ("first_token", "previous_token"):
            local = np.arange(start, r)
            if m == 0 or len(local) == 0:
                sums, rows = (np.zeros((B, H)) if torch is None else p.new_zeros((B, H))), np.zeros(B, np.int64)
            elif name == "first_token":
                sums, rows = p[:, :, start:, 0].sum(-1), np.full(B, len(local), np.int64)
            else:
                sums, rows = p[:, :, index(local), index(local + first_row - 1)].sum(-1), np.full(B, len(local), np.int64)
        elif name in ("duplicate_token", "induction"):
            if pairs is None:
                pairs = repeat_pairs(ids, (first_row, stop))
            pb, pi, pc = pairs
            if name == "induction":
                keep = pc <= pi - 2
                pb, pi, pc = pb[keep], pi[keep], pc[keep] + 1          # the key after the earlier occurrence
            values = p[index(pb), :, index(pi - first_row), index(pc)]  # [P, H]
            sums, rows = per_window(pb, values), rows_of(pb, pi)
        else:
            raise ValueError(f"unknown head statistic {name!r}; known: {', '.join(NAMES)}")
        out[name] = (sums if torch is None else sums.double(), rows)
    return out


def window_statistics(p: Any, ids: np.ndarray, names: Sequence[str] = NAMES) -> dict[str, Any]:
    """Each statistic of each pattern ``p`` [B, H, n, n] with token ids [B, n]: name -> [B, H] (nan where a
    window has no counted row), float64, numpy or torch like ``p``."""
    result = {}
    for name, (sums, rows) in statistic_sums(p, ids, 0, names).items():
        torch = _torch_of(sums)
        counts = rows[:, None].astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            result[name] = sums / (counts if torch is None else torch.as_tensor(counts, device=sums.device))
    return result
