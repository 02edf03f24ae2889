"""One recorded generation step, re-scored for display (numpy only, no Qt, no torch).

The generation pane shows, for one step, the top next-token candidates before and after the
sampling controls, and says in a few words which controls are on. Both are computed here from the
step's stored logits (``StepScores``), so moving a control never runs the model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from explorer.core.analysis.ranking import rank_of, top_k_ids
from explorer.core.generation.sampling import SamplingParams, softmax

if TYPE_CHECKING:  # generate imports torch
    from explorer.core.generation.generate import Step

__all__ = ["N_CANDIDATES", "CandidateTable", "candidate_table", "controls_equal", "describe_params"]

N_CANDIDATES = 20


def describe_params(params: SamplingParams) -> str:
    """The controls in a few words: "T 0.7 · top-k 40 · penalty 1.2" (off controls left out)."""
    parts = ["greedy (T 0)" if params.greedy else f"T {params.temperature:g}"]
    if params.top_k:
        parts.append(f"top-k {params.top_k}")
    if params.top_p < 1.0:
        parts.append(f"top-p {params.top_p:g}")
    if params.min_p > 0.0:
        parts.append(f"min-p {params.min_p:g}")
    if params.repetition_penalty != 1.0:
        parts.append(f"penalty {params.repetition_penalty:g}")
    return " · ".join(parts)


def controls_equal(a: SamplingParams, b: SamplingParams) -> bool:
    """Whether two parameter sets shape the distribution the same way (seed and lengths aside)."""
    return (a.temperature, a.top_k, a.top_p, a.min_p, a.repetition_penalty) == \
        (b.temperature, b.top_k, b.top_p, b.min_p, b.repetition_penalty)


@dataclass(frozen=True)
class CandidateTable:
    """Rows of the bar chart: the union of the top-``n`` before and after the controls, ordered by the
    probability after the controls (then before), cut to ``n`` rows; the chosen token always listed."""

    ids: np.ndarray
    before: np.ndarray  # probability under the model's own distribution
    after: np.ndarray  # probability under the controls (0: removed by them)
    chosen_row: int | None
    num_possible: int  # tokens the controls leave possible
    vocab_size: int
    chosen_after: tuple[int | None, float]  # rank (None: removed) and probability of the chosen token
    chosen_before: float  # the chosen token's probability under the model's own distribution


def candidate_table(step: Step, params: SamplingParams, n: int = N_CANDIDATES,
                    raw_probs: np.ndarray | None = None) -> CandidateTable:
    """Re-score ``step`` with ``params`` from its stored logits (the model is not run).

    ``raw_probs``: ``softmax(step.scores.logits)`` if the caller keeps it (it does not depend on the
    controls)."""
    raw = step.scores.logits
    processed = step.scores.processed(params)  # the controls, as in generation
    p_raw = softmax(raw) if raw_probs is None else raw_probs
    p_after = softmax(processed)
    ids = np.union1d(top_k_ids(raw, n, finite_only=True), top_k_ids(processed, n, finite_only=True))
    ids = ids[np.lexsort((ids, -p_raw[ids], -p_after[ids]))][:n]
    chosen = int(step.token_id)
    if chosen not in ids:
        ids = np.append(ids[: n - 1], chosen)
    rows = np.flatnonzero(ids == chosen)
    rank = rank_of(processed, chosen) if np.isfinite(processed[chosen]) else None
    return CandidateTable(ids.astype(np.int64), p_raw[ids], p_after[ids], int(rows[0]) if rows.size else None,
                          int(np.count_nonzero(np.isfinite(processed))), int(raw.size),
                          (rank, float(p_after[chosen])), float(p_raw[chosen]))
