"""What an intervention changed: the run without it against the run with it (pure numpy).

:func:`compare_runs` reads the two runs' logits [n, V]:

* at ``position``: the top candidates of either run (the union of both top-``top`` lists,
  ordered by the larger of the two probabilities), with both probabilities, and the KL divergence
  KL(before || after) of the whole next-token distribution;
* at every position i < n - 1: the log-probability of the token that actually comes next
  (``token_ids[i + 1]``) before and after, and their difference.

:func:`stream_difference` shows where in the model the change happened: the relative size of the
difference of the residual stream at every layer boundary and position.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from explorer.core.analysis.ranking import top_k_ids

if TYPE_CHECKING:
    from explorer.core.trace import Trace


def log_softmax(logits: np.ndarray) -> np.ndarray:
    x = np.asarray(logits, dtype=np.float64)
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


@dataclass(frozen=True)
class RunComparison:
    position: int
    ids: np.ndarray             # candidate token ids at ``position``
    p_before: np.ndarray        # their probabilities without the interventions
    p_after: np.ndarray         # and with them
    kl: float                   # KL(before || after) at ``position``, nats
    next_before: np.ndarray     # [n - 1] log p(token_ids[i + 1]) at position i, without
    next_after: np.ndarray      # [n - 1] with

    @property
    def next_delta(self) -> np.ndarray:
        return self.next_after - self.next_before


def compare_runs(before: np.ndarray, after: np.ndarray, token_ids: np.ndarray, position: int = -1,
                 top: int = 10) -> RunComparison:
    if before.shape != after.shape:
        raise ValueError(f"the runs' logits differ in shape: {before.shape} vs {after.shape}")
    n = before.shape[0]
    p = position % n
    lp_before, lp_after = log_softmax(before[p]), log_softmax(after[p])
    ids = np.unique(np.concatenate([top_k_ids(lp_before, top), top_k_ids(lp_after, top)]))
    pb, pa = np.exp(lp_before[ids]), np.exp(lp_after[ids])
    order = np.lexsort((ids, -np.maximum(pb, pa)))[:top]
    kl = float(np.sum(np.exp(lp_before) * (lp_before - lp_after)))
    nxt = np.asarray(token_ids[1:], dtype=np.int64)
    rows = np.arange(n - 1)
    next_before = log_softmax(before[:-1])[rows, nxt] if n > 1 else np.zeros(0)
    next_after = log_softmax(after[:-1])[rows, nxt] if n > 1 else np.zeros(0)
    return RunComparison(p, ids[order], pb[order], pa[order], kl, next_before, next_after)


def stream_difference(changed: Trace, baseline: Trace) -> np.ndarray:
    """How far the interventions moved the residual stream: ‖x_changed - x_baseline‖ / ‖x_baseline‖ at
    every boundary (rows: entering each block, then after the last) and position.  [L + 1, n]"""
    from explorer.core.analysis.residual import residual_stack

    a = residual_stack(changed).astype(np.float64)
    b = residual_stack(baseline).astype(np.float64)
    if a.shape != b.shape:
        raise ValueError(f"the runs differ in shape: {a.shape} vs {b.shape}")
    return np.linalg.norm(a - b, axis=-1) / np.maximum(np.linalg.norm(b, axis=-1), 1e-12)
