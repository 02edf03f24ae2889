"""Chance levels for head statistics: what a head that attends uniformly would score on this prompt.

A random or untrained head's induction score of 0.29 means little until it is set beside what
uniform attention gives for the same tokens: on a short prompt with many repeats, attending evenly
to every earlier token already lands a large share on "the token after an earlier occurrence".
:func:`chance_level` computes that score exactly, in closed form (O(n), no n x n matrix), for the
pattern in which query i attends 1/(i+1) to each key 0..i (causal) or 1/n to every key (bidirectional);
:func:`uniform_pattern` is that pattern, so the closed forms can be checked against the statistics'
own definitions (``explorer.core.analysis.attention.STATISTICS``).
"""

from __future__ import annotations

from collections import Counter
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


def chance_level(stat: str, token_ids: Sequence[int] | np.ndarray, causal: bool = True) -> float:
    """The value of head statistic ``stat`` (a name of ``attention.STATISTICS``) for the uniform
    pattern on ``token_ids``: nan where the statistic is undefined (fewer than 2 tokens; no repeated
    token for ``induction``)."""
    ids = [int(i) for i in np.asarray(token_ids).reshape(-1)]
    n = len(ids)
    if n == 0:
        return float("nan")
    seen = np.arange(1, n + 1, dtype=np.float64) if causal else np.full(n, float(n))  # keys query i sees
    if stat == "entropy":
        return float(np.mean(np.log(seen)))
    if stat in ("first_token", "previous_token"):
        return float(np.mean(1.0 / seen[1:])) if n >= 2 else float("nan")
    if stat == "induction":
        counts: Counter[int] = Counter()  # occurrences among positions 0..i-2
        rows = []
        for i, token in enumerate(ids):
            if i >= 2:
                counts[ids[i - 2]] += 1
            if counts[token]:
                rows.append(counts[token] / seen[i])  # one key after each earlier occurrence, 1/seen each
        return float(np.mean(rows)) if rows else float("nan")
    raise ValueError(f"unknown head statistic {stat!r}")
