"""Chance levels for head statistics: what a head that attends uniformly would score on this prompt.

A random or untrained head's induction score of 0.29 means little until it is set beside what
uniform attention gives for the same tokens: on a short prompt with many repeats, attending evenly
to every earlier token already lands a large share on "the token after an earlier occurrence".
:func:`chance_level` computes that score exactly, in closed form (O(n log n), no n x n matrix), for the
pattern in which query i attends 1/(i+1) to each key 0..i (causal) or 1/n to every key (bidirectional);
:func:`uniform_pattern` is that pattern, so the closed forms can be checked against the statistics'
own definitions (``explorer.core.analysis.attention.STATISTICS``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def uniform_pattern(n: int, causal: bool = True) -> np.ndarray:
    """[n, n]: every query spreads its attention evenly over the keys it may see."""
    if n < 0:
        raise ValueError(f"a prompt has at least 0 tokens (got {n})")
    if not causal:
        return np.full((n, n), 1.0 / n) if n else np.zeros((0, 0))
    mask = np.tri(n, n, 0)
    return mask / mask.sum(axis=1, keepdims=True) if n else np.zeros((0, 0))


def earlier_occurrences(ids: np.ndarray) -> np.ndarray:
    """For each position i of each row of ``ids`` [B, n] (or [n]): how many positions j < i hold the same
    token. O(n log n) (a stable sort), never an n x n mask."""
    ids = np.asarray(ids)
    flat = ids.reshape(1, -1) if ids.ndim < 2 else ids
    B, n = flat.shape
    if n == 0:
        return np.zeros(ids.shape, np.int64)
    b = np.repeat(np.arange(B), n)
    order = np.lexsort((np.tile(np.arange(n), B), flat.reshape(-1), b))
    sb, st = b[order], flat.reshape(-1)[order]
    new = np.ones(B * n, dtype=bool)
    new[1:] = (sb[1:] != sb[:-1]) | (st[1:] != st[:-1])
    rank = np.arange(B * n) - np.maximum.accumulate(np.where(new, np.arange(B * n), 0))
    out = np.empty(B * n, np.int64)
    out[order] = rank
    return out.reshape(ids.shape)


def chance_levels(stat: str, token_ids: np.ndarray, causal: bool = True) -> np.ndarray:
    """``chance_level`` of every row of ``token_ids`` [B, n]: float64 [B] (nan where undefined)."""
    ids = np.asarray(token_ids)
    ids = ids.reshape(1, -1) if ids.ndim < 2 else ids
    B, n = ids.shape
    if n == 0:
        return np.full(B, np.nan)
    seen = np.arange(1, n + 1, dtype=np.float64) if causal else np.full(n, float(n))  # keys query i sees
    if stat == "entropy":
        return np.full(B, float(np.mean(np.log(seen))))
    if stat in ("first_token", "previous_token"):
        return np.full(B, float(np.mean(1.0 / seen[1:])) if n >= 2 else np.nan)
    if stat in ("duplicate_token", "induction"):
        counts = earlier_occurrences(ids).astype(np.float64)           # keys j < i with query i's token
        if stat == "induction":  # occurrences at j <= i - 2: one key after each (the one at i - 1 is not)
            counts[:, 1:] -= ids[:, 1:] == ids[:, :-1]
        rows = counts > 0
        with np.errstate(invalid="ignore"):
            return (np.where(rows, counts / seen, 0.0).sum(axis=1) / rows.sum(axis=1)).astype(np.float64)
    raise ValueError(f"unknown head statistic {stat!r}")


def chance_level(stat: str, token_ids: Sequence[int] | np.ndarray, causal: bool = True) -> float:
    """The value of head statistic ``stat`` (a name of ``attention.STATISTICS``) for the uniform
    pattern on ``token_ids``: nan where the statistic is undefined (fewer than 2 tokens; no repeated
    token for ``induction`` and ``duplicate_token``)."""
    return float(chance_levels(stat, np.asarray(token_ids).reshape(1, -1), causal)[0])
