"""Masked-token predictions of an encoder with an MLM head: for each [MASK] position, what fills it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from explorer.core.analysis.ranking import top_k_ids


@dataclass(frozen=True)
class MaskPrediction:
    position: int
    ids: tuple[int, ...]  # the k most likely tokens, highest first (ties by lower id)
    probs: tuple[float, ...]  # their softmax probabilities at that position


def softmax(logits: np.ndarray) -> np.ndarray:
    x = np.asarray(logits, dtype=np.float64)
    x = np.exp(x - np.max(x))
    return x / x.sum()


def mask_positions(token_ids: Sequence[int], mask_id: int | None) -> list[int]:
    return [] if mask_id is None else [i for i, t in enumerate(token_ids) if int(t) == mask_id]


def masked_predictions(logits: np.ndarray, token_ids: Sequence[int], mask_id: int | None,
                       k: int = 5) -> list[MaskPrediction]:
    """For every position holding ``mask_id``: the top ``k`` tokens of the MLM logits and their probabilities.

    logits: [n, V] (a trace's ``logits``) for the ``n`` token ids.
    """
    logits = np.asarray(logits)
    if logits.shape[0] != len(token_ids):
        raise ValueError(f"{logits.shape[0]} rows of logits for {len(token_ids)} tokens")
    out = []
    for pos in mask_positions(token_ids, mask_id):
        probs = softmax(logits[pos])
        ids = top_k_ids(logits[pos], k)
        out.append(MaskPrediction(pos, tuple(int(i) for i in ids), tuple(float(probs[i]) for i in ids)))
    return out
