"""Vector geometry for the embeddings panel: cosine similarities, nearest neighbours, sinusoids.

Qt-free. ``nearest_vocab_neighbours`` reads the model's token-embedding matrix through the
Trace (core code may; UI code may not), with one small matrix-vector product, never a forward pass.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from explorer.core.analysis.ranking import top_k_ids

if TYPE_CHECKING:
    from explorer.core.trace import Trace


def cosine_similarity_matrix(X: np.ndarray) -> np.ndarray:
    """[n, d] -> [n, n] cosine similarity of every pair of rows (0 where a row is all zeros)."""
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"expected an [n, d] matrix, got shape {X.shape}")
    norms = np.linalg.norm(X, axis=1)
    unit = np.divide(X, norms[:, None], out=np.zeros_like(X), where=norms[:, None] > 0)
    return np.clip(unit @ unit.T, -1.0, 1.0).astype(np.float32)


def pooled_cosine_similarity(X: np.ndarray, pixels: int, chunk: int = 256) -> tuple[np.ndarray, int]:
    """The [n, n] cosine map of ``X`` [n, d] mean-pooled over f x f blocks of token pairs,
    f = ceil(n / pixels), computed a block of rows at a time (never [n, n] at once).
    Returns (image [ceil(n/f), ceil(n/f)] float32, f); f = 1 gives ``cosine_similarity_matrix``."""
    import math

    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"expected an [n, d] matrix, got shape {X.shape}")
    n = X.shape[0]
    f = max(1, math.ceil(n / max(1, pixels)))
    if f == 1:
        return cosine_similarity_matrix(X), 1
    norms = np.linalg.norm(X, axis=1)
    unit = np.divide(X, norms[:, None], out=np.zeros_like(X), where=norms[:, None] > 0)
    side = math.ceil(n / f)
    sizes = np.minimum(f, n - np.arange(side) * f).astype(np.float64)
    out = np.empty((side, side), dtype=np.float32)
    step = max(f, (chunk // f) * f)
    for r0 in range(0, n, step):
        r1 = min(n, r0 + step)
        block = np.clip(unit[r0:r1] @ unit.T, -1.0, 1.0)  # [r, n]
        rows = math.ceil((r1 - r0) / f)
        padded = np.zeros((rows * f, side * f))
        padded[:r1 - r0, :n] = block
        sums = padded.reshape(rows, f, side, f).sum(axis=(1, 3))
        out[r0 // f:r0 // f + rows] = sums / np.outer(sizes[r0 // f:r0 // f + rows], sizes)
    return out, f


def nearest_neighbours(E: np.ndarray, v: np.ndarray, k: int,
                       exclude: Iterable[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` rows of ``E`` [V, d] with the highest cosine similarity to ``v`` [d], best first.

    ``exclude`` lists row ids to leave out (e.g. the token itself). Returns ``(ids, cosines)``.
    """
    E = np.asarray(E, dtype=np.float64)
    v = np.asarray(v, dtype=np.float64)
    norms = np.linalg.norm(E, axis=1) * np.linalg.norm(v)
    cosines = np.divide(E @ v, norms, out=np.zeros(E.shape[0]), where=norms > 0)
    return _top_k(cosines, k, exclude)


def _top_k(cosines: np.ndarray, k: int, exclude: Iterable[int] | None) -> tuple[np.ndarray, np.ndarray]:
    cosines = np.array(cosines, dtype=np.float64)
    if exclude is not None:
        cosines[np.fromiter(exclude, dtype=np.int64)] = -np.inf
    ids = top_k_ids(cosines, k, finite_only=True)  # best first; ties by id, so the order is stable
    return ids, cosines[ids].astype(np.float32)


def sinusoid_curves(positions: Sequence[int] | np.ndarray, dims: Sequence[int], d_model: int) -> np.ndarray:
    """Sinusoidal position values [len(positions), len(dims)]: dimension 2i is sin, 2i+1 is cos of
    ``pos / 10000^(2i / d_model)`` (the formula of ``explorer.core.model.sinusoidal_positions``)."""
    pos = np.asarray(positions, dtype=np.float64)[:, None]
    dims = np.asarray(dims, dtype=np.int64)
    if dims.size and (dims.min() < 0 or dims.max() >= d_model):
        raise ValueError(f"dimensions must lie in 0..{d_model - 1}")
    two_i = (dims - dims % 2).astype(np.float64)[None, :]
    angle = pos / np.power(10000.0, two_i / d_model)
    return np.where(dims % 2 == 0, np.sin(angle), np.cos(angle)).astype(np.float32)


def parse_dimensions(text: str, d_model: int, limit: int = 8) -> list[int]:
    """Dimensions typed as "0, 1, 6-7": valid, unique, in order, at most ``limit``."""
    dims: list[int] = []
    for part in text.replace(";", ",").split(","):
        part = part.strip()
        if not part:
            continue
        try:
            if "-" in part:
                a, b = part.split("-", 1)
                values = range(int(a), int(b) + 1)
            else:
                values = [int(part)]
        except ValueError:
            continue
        dims += [d for d in values if 0 <= d < d_model and d not in dims]
    return dims[:limit]


def nearest_vocab_neighbours(trace: Trace, token_index: int, k: int = 10,
                             include_self: bool = False) -> tuple[np.ndarray, np.ndarray] | None:
    """The vocabulary entries whose token embeddings (rows of W_E) are closest in cosine to that of
    the token at ``token_index`` of the prompt. ``(ids, cosines)`` best first; None when the trace
    has no model to read W_E from (e.g. a trace loaded from a file)."""
    model = getattr(trace, "_model", None)
    if model is None or getattr(model, "embed", None) is None:
        return None
    import torch

    token_id = int(trace.token_ids[token_index])
    from explorer.core.placement import weights_of

    with torch.inference_mode(), weights_of(model.embed) as embed:    # (real even when offloaded)
        weight = embed.weight                                          # [V, d]
        norms = _row_norms(model, weight)
        v = weight[token_id].float()
        cosines = (weight.float() @ v) / (norms * v.norm()).clamp_min(1e-30)
        cosines = cosines.cpu().numpy().astype(np.float64)
    return _top_k(cosines, k, None if include_self else [token_id])


_NORM_CACHE: dict[int, tuple[object, object]] = {}


def _row_norms(model: object, weight: object) -> object:
    """W_E's row norms, computed once per weight tensor (they do not change while it is loaded)."""
    key = id(model)
    cached = _NORM_CACHE.get(key)
    if cached is not None and cached[0] is weight:
        return cached[1]
    norms = weight.float().norm(dim=1)
    _NORM_CACHE.clear()  # one model at a time: do not keep old models' tensors alive
    _NORM_CACHE[key] = (weight, norms)
    return norms
