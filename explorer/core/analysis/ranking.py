"""One way to rank: highest first, ties broken by the lower id.

Every "top k" in the app (next-token candidates, nearest vocabulary neighbours, a token's most
active neurons, a neuron's vocabulary effect, the logit lens) goes through here, so equal values
always come out in the same order and a test written against one view holds for the others.
"""

from __future__ import annotations

import numpy as np


def descending(scores: np.ndarray) -> np.ndarray:
    """Every index of ``scores``, highest first; ties (and NaN, which sort last) by lower index.  int64"""
    scores = np.asarray(scores)
    scores = np.where(np.isnan(scores), -np.inf, scores)
    idx = np.arange(scores.size)
    return np.lexsort((idx, -scores)).astype(np.int64)


def top_k_ids(scores: np.ndarray, k: int, finite_only: bool = False) -> np.ndarray:
    """The ids of the ``k`` largest ``scores``, highest first, ties by lower id.  int64 [<= k]

    NaN counts as -inf. With ``finite_only`` the ids of -inf/+inf/NaN entries are never returned
    (masked logits, excluded neighbours), so fewer than ``k`` ids may come back. Partitions first:
    O(V) for a vocabulary of V, not a full sort.
    """
    x = np.asarray(scores).ravel()
    x = np.where(np.isnan(x), -np.inf, x)
    k = max(0, min(int(k), x.size))
    if finite_only:
        k = min(k, int(np.count_nonzero(np.isfinite(x))))
    if k == 0:
        return np.zeros(0, dtype=np.int64)
    kth = np.partition(x, x.size - k)[x.size - k]  # the k-th largest value
    above = np.flatnonzero(x > kth)
    ties = np.flatnonzero(x == kth)[: k - above.size]
    idx = np.concatenate([above, ties])
    return idx[np.lexsort((idx, -x[idx]))].astype(np.int64)


def rank_of(scores: np.ndarray, token_id: int) -> int:
    """0-based rank of ``token_id`` in the order of :func:`top_k_ids` (higher value first, ties by lower id)."""
    x = np.asarray(scores)
    value = x[token_id]
    return int(np.count_nonzero(x > value) + np.count_nonzero(x[:token_id] == value))


def top_k_rows(raw, k: int):
    """Row-wise :func:`top_k_ids` for a torch tensor [c, V] -> [c, k] (torch.topk's order among
    equal values is unspecified, so a row with ties at or inside the cut is ranked again by
    ``top_k_ids``; the others keep torch.topk's answer)."""
    import torch

    values, idx = torch.topk(raw, k, dim=-1)
    kth = values[:, -1:]
    inner_tie = (values[:, 1:] == values[:, :-1]).any(-1)
    if raw.device.type == "cpu":  # numpy's comparisons are several times torch's on the CPU
        a, cut = raw.numpy(), kth.numpy()
        cut_tie = np.count_nonzero(a == cut, axis=-1) > np.count_nonzero(values.numpy() == cut, axis=-1)
        tied = np.flatnonzero(cut_tie | inner_tie.numpy())
    else:
        tied = torch.nonzero(((raw == kth).sum(-1) > (values == kth).sum(-1)) | inner_tie).flatten().tolist()
    for row in tied:  # equal values (rare): lower ids first
        row_values = raw[row].float().cpu().numpy()
        idx[row] = torch.as_tensor(top_k_ids(row_values, k), device=idx.device)
    return idx
