"""What the Features panel draws, computed from a trace and an SAE (no widgets; run on workers).

The first view is one row: the selected token's activations (``first_row``: one token encoded, a
few milliseconds even for 100k features). The rest comes on the progressive lane: the rows on
screen first (``visible_rows``: a window of tokens around the selection), then every row
(``whole``: the tokens x features view, the selected feature along the prompt, the reconstruction
error), memoised with the trace (``core/features/analysis.trace_activations``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from explorer.core.features.analysis import (
    Reconstruction,
    feature_along,
    reconstruction_error,
    strongest_features,
    top_features,
    trace_feature_writes,
)
from explorer.core.trace import Trace
from explorer.ui.panels.base import PanelSnapshot, PanelView

TOP_K = 20            # the selected token's features listed
STRONGEST = 32        # columns of the tokens x features view
VISIBLE = 48          # rows computed first: a window of tokens around the selected one
VOCAB_K = 10
VOCAB_NOW_MACS = 2**22  # V x d under this: what a feature writes is computed at once


@dataclass(frozen=True)
class FeaturesSnapshot(PanelSnapshot):
    sae: Any = None               # the SAE shown (explorer.core.features.sae.SAE)


@dataclass(frozen=True)
class FeaturesView(PanelView):
    """The first view: the selected token's strongest features (``ids``, ``acts``)."""

    sae: Any = None
    token: int = 0
    ids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    acts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))


@dataclass(frozen=True)
class Whole:
    """Every row: the strongest features over ``rows`` of the prompt and the error per token."""

    rows: range
    ids: np.ndarray               # [k] feature ids (columns)
    columns: np.ndarray           # [len(rows), k]
    acts: np.ndarray | None = None                  # [n, d_sae] when every row is computed
    error: Reconstruction | None = None


def _memoised(trace: Trace, sae: Any) -> np.ndarray | None:
    return trace.memo_get(("features", id(sae)))


def first_row(trace: Trace, sae: Any, token: int) -> tuple[np.ndarray, np.ndarray]:
    """The selected token's ``TOP_K`` features: its one row encoded (or read, when every row is ready)."""
    acts = _memoised(trace, sae)
    if acts is not None:
        return top_features(acts, token, TOP_K)
    row = trace.memo(("features.row", id(sae), token), lambda: sae.activations(trace, rows=slice(token, token + 1)))
    return top_features(row, 0, TOP_K)


def prepare_view(trace: Trace, snapshot: FeaturesSnapshot, token: int) -> FeaturesView:
    sae = snapshot.sae
    if sae is None:
        return FeaturesView(trace, None, token)
    ids, acts = first_row(trace, sae, token)
    return FeaturesView(trace, sae, token, ids, acts)


def window_of(token: int, n: int, size: int = VISIBLE) -> range:
    lo = max(0, min(token - size // 2, n - size))
    return range(lo, min(n, lo + size))


def visible_rows(trace: Trace, sae: Any, rows: range, check: Callable[[], None]) -> Whole:
    """The strongest features over ``rows`` only (what is on screen first)."""
    acts = _memoised(trace, sae)
    if acts is None:
        acts = sae.activations(trace, rows=slice(rows.start, rows.stop), cancel=lambda: check() or False)
        ids, cols = strongest_features(acts, STRONGEST)
    else:
        ids, cols = strongest_features(acts, STRONGEST, slice(rows.start, rows.stop))
    return Whole(rows, ids, cols)


def whole(trace: Trace, sae: Any, check: Callable[[], None]) -> Whole:
    """Every row (memoised with the trace), the strongest features over the prompt, the error per token."""
    acts = trace.memo(("features", id(sae)), lambda: sae.activations(trace, cancel=lambda: check() or False))
    check()
    ids, cols = strongest_features(acts, STRONGEST)
    check()
    error = trace.memo(("features.error", id(sae)), lambda: reconstruction_error(sae, trace, acts))
    return Whole(range(acts.shape[0]), ids, cols, acts, error)


def along(acts: np.ndarray | None, feature: int) -> np.ndarray | None:
    return None if acts is None else feature_along(acts, feature)


def writes(trace: Trace, sae: Any, feature: int, vocab_size: int | None):
    """What ``feature`` writes (promoted ids, values, suppressed ids, values), or None without weights."""
    return trace_feature_writes(trace, sae, feature, VOCAB_K, vocab_size)


def writes_is_cheap(trace: Trace) -> bool:
    cfg = trace.config
    return cfg.vocab_size * cfg.d_model <= VOCAB_NOW_MACS
