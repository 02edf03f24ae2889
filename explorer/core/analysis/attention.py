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

``statistic_sums`` (``analysis/head_sums.py``) is the one definition: the sums over counted rows and the row counts of a block
of rows, for a batch of patterns [B, H, r, m] (numpy, or torch tensors where they are, e.g. on the
GPU: ``torch`` is never imported here, the array's own module is used). The per-prompt functions,
the chunked statistics of long prompts (``attention_tiles.head_statistic``) and the corpus-level
scores (``explorer.core.corpus``: the mean over windows of each window's statistic) all call it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from explorer.core.analysis.head_sums import (  # noqa: F401 - the one arithmetic, re-exported for its callers
    NAMES,
    repeat_pairs,
    statistic_sums,
    window_statistics,
)

if TYPE_CHECKING:
    from explorer.core.trace import Trace


def _square(p: np.ndarray) -> np.ndarray:
    p = np.asarray(p, dtype=np.float64)
    if p.ndim != 2 or p.shape[0] != p.shape[1]:
        raise ValueError(f"an attention pattern must be a square [n, n] matrix (got shape {p.shape})")
    return p


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
    Patterns come from ``trace.head(layer, head, "pattern")`` (stored, or derived from q and k). A model whose
    layers differ (recurrent layers, blocks without attention) gets ``layer_maps.layer_statistics``' grid:
    [n_layers, its columns], a recurrent layer's maps read on their rows' shares of |weights|, NaN where a
    layer has no such map (a named statistic only).
    """
    if isinstance(stat, str):
        try:
            fn = STATISTICS[stat]
        except KeyError:
            raise ValueError(f"unknown head statistic {stat!r}; known: {', '.join(STATISTICS)}") from None
    else:
        fn = stat
    cfg = trace.config
    from explorer.core.analysis.layer_maps import layer_statistics, uniform

    if hasattr(cfg, "layer") and not uniform(cfg):  # (a duck-typed config of n_layers x n_heads: the plain grid)
        if not isinstance(stat, str):
            raise ValueError("a model with recurrent layers (or layers without attention) takes a named statistic: "
                             + ", ".join(STATISTICS))
        return layer_statistics(trace, stat)
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
