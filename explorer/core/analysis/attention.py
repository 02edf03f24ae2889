"""Summary statistics of attention heads, computed from their patterns.

A pattern ``p`` is one head's [n, n] attention matrix for one prompt: row i is query position i,
column j key position j, each row sums to 1, and (causal models) ``p[i, j] = 0`` for j > i.
Each statistic reduces a pattern to one number so that every head of a model can be compared
at a glance (``head_statistics`` returns an [L, H] table):

* ``entropy``: how spread out a head's attention is. 0 means every query looks at exactly one
  key; ln(i+1) is the most a query at position i can have (uniform over the keys it may see).
* ``first_token``: how much attention goes to position 0, the "attention sink" that many heads
  use as a place to put attention when they have nothing to do.
* ``previous_token``: how much each token attends to the one just before it.
* ``induction``: how much a token attends to the token *after* an earlier occurrence of itself
  (in ``... A B ... A`` the second ``A`` looks at ``B``): the signature of an induction head,
  which copies what followed last time. Needs a prompt in which tokens repeat.

Pure numpy, so that reading statistics does not import torch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from explorer.core.trace import Trace


def _square(p: np.ndarray) -> np.ndarray:
    p = np.asarray(p, dtype=np.float64)
    if p.ndim != 2 or p.shape[0] != p.shape[1]:
        raise ValueError(f"an attention pattern must be a square [n, n] matrix (got shape {p.shape})")
    return p


def pattern_entropy(p: np.ndarray) -> float:
    """Mean over query rows of -sum_j p[i, j] ln p[i, j], in nats (0 ln 0 counts as 0)."""
    p = _square(p)
    if p.shape[0] == 0:
        return float("nan")
    safe = np.where(p > 0, p, 1.0)  # ln 1 = 0 where p is 0, so those terms vanish
    return float(np.mean(-np.sum(p * np.log(safe), axis=-1)))


def first_token_attention(p: np.ndarray) -> float:
    """Mean of p[i, 0] over queries i >= 1 (position 0 can only look at itself); nan for n < 2."""
    p = _square(p)
    if p.shape[0] < 2:
        return float("nan")
    return float(np.mean(p[1:, 0]))


def previous_token_score(p: np.ndarray) -> float:
    """Mean of p[i, i-1] over queries i >= 1: 1.0 for a perfect previous-token head; nan for n < 2."""
    p = _square(p)
    n = p.shape[0]
    if n < 2:
        return float("nan")
    i = np.arange(1, n)
    return float(np.mean(p[i, i - 1]))


def induction_score(p: np.ndarray, token_ids: Sequence[int] | np.ndarray) -> float:
    """Attention from each repeated token to the token after its earlier occurrences.

    For every query i that has earlier occurrences j <= i - 2 of the same token, the score of row i is
    sum over those j of p[i, j + 1]; the result is the mean over such rows (nan when no token repeats).
    1.0 means the head always attends to "what came next last time".
    """
    p = _square(p)
    ids = np.asarray(token_ids).reshape(-1)
    n = p.shape[0]
    if ids.shape[0] != n:
        raise ValueError(f"the pattern covers {n} tokens but {ids.shape[0]} token ids were given")
    # after[i, c]: key c + 1 follows an earlier occurrence (c <= i - 2) of query i's token
    after = (ids[None, :-1] == ids[:, None]) & np.tri(n, n - 1, -2, dtype=bool) if n > 1 else np.zeros((n, 0), bool)
    rows = after.any(axis=1)
    if not rows.any():
        return float("nan")
    return float((np.where(after, p[:, 1:], 0.0).sum(axis=1))[rows].mean())


def _entropy(p: np.ndarray, token_ids: np.ndarray) -> float:
    return pattern_entropy(p)


def _first(p: np.ndarray, token_ids: np.ndarray) -> float:
    return first_token_attention(p)


def _previous(p: np.ndarray, token_ids: np.ndarray) -> float:
    return previous_token_score(p)


STATISTICS: dict[str, Callable[[np.ndarray, np.ndarray], float]] = {
    "entropy": _entropy,
    "first_token": _first,
    "previous_token": _previous,
    "induction": induction_score,
}
"""Statistic name -> function of (pattern [n, n], token ids [n])."""

CHUNKED_FROM = 1024  # longer prompts: named statistics from the pattern's rows a chunk at a time

STATISTIC_LABELS: dict[str, str] = {
    "entropy": "attention entropy (nats)",
    "first_token": "attention to the first token",
    "previous_token": "previous-token score",
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
