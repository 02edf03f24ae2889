"""Summary statistics of attention heads, computed from their patterns.

A pattern ``p`` is one head's [n, n] attention matrix for one prompt: row i is query position i,
column j key position j, each row sums to 1, and (causal models) ``p[i, j] = 0`` for j > i.
Each statistic reduces a pattern to one number so that every head of a model can be compared
at a glance (``head_statistics`` returns an [L, H] table). Each is a mean over query rows:

* ``entropy``: how spread out a head's attention is. 0 means every query looks at exactly one
  key; ln(i+1) is the most a query at position i can have (uniform over the keys it may see).
* ``first_token``: how much attention goes to position 0, the "attention sink" that many heads
  use as a place to put attention when they have nothing to do (queries i >= 1).
* ``previous_token``: how much each token attends to the one just before it (queries i >= 1).
* ``duplicate_token``: how much a token attends to earlier occurrences of itself (``... A ... A``:
  the second ``A`` looks at the first), over the queries whose token occurred before.
* ``induction``: how much a token attends to the token *after* an earlier occurrence of itself
  (in ``... A B ... A`` the second ``A`` looks at ``B``): the signature of an induction head,
  which copies what followed last time. Over the queries with an earlier occurrence at j <= i - 2.

``statistic_sums`` is the one definition: the sums over counted rows and the row counts of a block
of rows, for a batch of patterns [B, H, r, m] (numpy, or torch tensors where they are, e.g. on the
GPU: ``torch`` is never imported here, the array's own module is used). The per-prompt functions,
the chunked statistics of long prompts (``attention_tiles.head_statistic``) and the corpus-level
scores (``explorer.core.corpus``: the mean over windows of each window's statistic) all call it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from explorer.core.trace import Trace

NAMES = ("entropy", "first_token", "previous_token", "duplicate_token", "induction")


def _square(p: np.ndarray) -> np.ndarray:
    p = np.asarray(p, dtype=np.float64)
    if p.ndim != 2 or p.shape[0] != p.shape[1]:
        raise ValueError(f"an attention pattern must be a square [n, n] matrix (got shape {p.shape})")
    return p


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


def _one(name: str, p: np.ndarray, token_ids: Sequence[int] | np.ndarray | None) -> float:
    p = _square(p)
    n = p.shape[0]
    if token_ids is None:
        ids = np.zeros((1, n), np.int64)
    else:
        ids = np.asarray(token_ids).reshape(1, -1)
        if ids.shape[1] != n:
            raise ValueError(f"the pattern covers {n} tokens but {ids.shape[1]} token ids were given")
    if n == 0:
        return float("nan")
    return float(window_statistics(p[None, None], ids, (name,))[name][0, 0])


def pattern_entropy(p: np.ndarray) -> float:
    """Mean over query rows of -sum_j p[i, j] ln p[i, j], in nats (0 ln 0 counts as 0)."""
    return _one("entropy", p, None)


def first_token_attention(p: np.ndarray) -> float:
    """Mean of p[i, 0] over queries i >= 1 (position 0 can only look at itself); nan for n < 2."""
    return _one("first_token", p, None)


def previous_token_score(p: np.ndarray) -> float:
    """Mean of p[i, i-1] over queries i >= 1: 1.0 for a perfect previous-token head; nan for n < 2."""
    return _one("previous_token", p, None)


def duplicate_token_score(p: np.ndarray, token_ids: Sequence[int] | np.ndarray) -> float:
    """Attention from each repeated token to its earlier occurrences: for every query i whose token occurred
    at some j < i, sum over those j of p[i, j]; the mean over such rows (nan when no token repeats)."""
    return _one("duplicate_token", p, token_ids)


def induction_score(p: np.ndarray, token_ids: Sequence[int] | np.ndarray) -> float:
    """Attention from each repeated token to the token after its earlier occurrences.

    For every query i that has earlier occurrences j <= i - 2 of the same token, the score of row i is
    sum over those j of p[i, j + 1]; the result is the mean over such rows (nan when no token repeats).
    1.0 means the head always attends to "what came next last time".
    """
    return _one("induction", p, token_ids)


STATISTICS: dict[str, Callable[[np.ndarray, np.ndarray], float]] = {
    "entropy": lambda p, ids: pattern_entropy(p),
    "first_token": lambda p, ids: first_token_attention(p),
    "previous_token": lambda p, ids: previous_token_score(p),
    "duplicate_token": duplicate_token_score,
    "induction": induction_score,
}
"""Statistic name -> function of (pattern [n, n], token ids [n])."""

CHUNKED_FROM = 1024  # longer prompts: named statistics from the pattern's rows a chunk at a time

STATISTIC_LABELS: dict[str, str] = {
    "entropy": "attention entropy (nats)",
    "first_token": "attention to the first token",
    "previous_token": "previous-token score",
    "duplicate_token": "duplicate-token score",
    "induction": "induction score",
}


def head_statistics(trace: Trace, stat: str | Callable[[np.ndarray, np.ndarray], float]) -> np.ndarray:
    """One statistic for every head of the traced model: a float64 array [n_layers, n_heads].

    ``stat`` is a name from ``STATISTICS`` or a function ``f(pattern, token_ids) -> float``.
    Patterns come from ``trace.head(layer, head, "pattern")`` (stored, or derived from q and k).
    """
    if isinstance(stat, str):
        try:
            fn = STATISTICS[stat]
        except KeyError:
            raise ValueError(f"unknown head statistic {stat!r}; known: {', '.join(STATISTICS)}") from None
    else:
        fn = stat
    cfg = trace.config
    ids = np.asarray(trace.token_ids)
    out = np.empty((cfg.n_layers, cfg.n_heads), dtype=np.float64)
    if isinstance(stat, str) and len(ids) > CHUNKED_FROM:  # long prompts: no head's [n, n] built
        from explorer.core.analysis.attention_tiles import head_statistic

        for layer in range(cfg.n_layers):
            for head in range(cfg.n_heads):
                out[layer, head] = head_statistic(trace, layer, head, stat)
        return out
    for layer in range(cfg.n_layers):
        for head in range(cfg.n_heads):
            out[layer, head] = fn(trace.head(layer, head, "pattern"), ids)
    return out
