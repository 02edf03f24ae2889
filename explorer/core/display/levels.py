"""Colour levels and axis-label thinning for heatmaps (Qt-free, so they are tested headless).

Levels come from here rather than from pyqtgraph's auto-levels, which only sample the image and
can miss the extremes.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np

from explorer.core.display.tokens import LINE_GLYPHS, cut


def all_finite(values: np.ndarray) -> bool:
    """Whether every entry of ``values`` is finite, in one vectorised pass and without a mask: a NaN or
    an infinity carries into the sum (a sum of finite values that overflows falls back to the exact test)."""
    values = np.asarray(values)
    if values.size == 0 or values.dtype.kind not in "fc":
        return True
    with np.errstate(over="ignore", invalid="ignore"):
        if np.isfinite(values.sum()):
            return True
    return bool(np.isfinite(values).all())


def finite_levels(matrix: np.ndarray, symmetric: bool = False,
                  masked: np.ndarray | None = None) -> tuple[float, float]:
    """``(low, high)`` over the finite, unmasked entries of ``matrix``.

    ``symmetric`` gives ``(-m, m)`` with ``m`` the largest magnitude, so that 0 sits in the middle of
    a diverging colour map. A constant (or empty) matrix still gets a non-empty range.
    """
    values = np.asarray(matrix)
    if values.dtype.kind not in "fiub":
        values = values.astype(np.float64)
    if masked is None and values.size:  # fast path: min and max carry any NaN or infinity, so when both
        low, high = float(values.min()), float(values.max())  # are finite every entry is (no copies)
        if np.isfinite(low) and np.isfinite(high):
            return _levels(low, high, symmetric)
        if values.dtype.kind == "f":  # NaN gaps (a mosaic's): fmin/fmax skip them, still without copies
            low, high = float(np.fmin.reduce(values, axis=None)), float(np.fmax.reduce(values, axis=None))
            if np.isfinite(low) and np.isfinite(high):
                return _levels(low, high, symmetric)
    keep = np.isfinite(values)  # min and max over the kept entries, without copying the values
    if masked is not None:
        keep &= ~np.asarray(masked, dtype=bool)
    if not keep.any():
        return (-1.0, 1.0) if symmetric else (0.0, 1.0)
    low = float(np.min(values, where=keep, initial=np.inf))
    high = float(np.max(values, where=keep, initial=-np.inf))
    return _levels(low, high, symmetric)


def _levels(low: float, high: float, symmetric: bool) -> tuple[float, float]:
    if symmetric:
        m = max(abs(low), abs(high))
        return (-m, m) if m > 0 else (-1.0, 1.0)
    if low == high:
        pad = abs(low) * 0.5 or 0.5
        return low - pad, high + pad
    return low, high


def finite_extent(values: np.ndarray, include_zero: bool = True) -> tuple[float, float]:
    """``(min, max)`` of the finite entries (with 0 inside when ``include_zero``); NaN and infinities, which a
    broken model can produce, are left out, so an axis range built from it is always finite."""
    x = np.asarray(values, dtype=np.float64)
    x = x[np.isfinite(x)]
    lo, hi = (float(x.min()), float(x.max())) if x.size else (0.0, 0.0)
    return (min(lo, 0.0), max(hi, 0.0)) if include_zero else (lo, hi)


def label_step(n: int, max_labels: int = 40) -> int:
    """Show every k-th of ``n`` labels so that at most ``max_labels`` are drawn."""
    if n <= max_labels or max_labels <= 0:
        return 1
    return int(np.ceil(n / max_labels))


def abbreviate(label: str, max_chars: int = 12) -> str:
    """``label`` cut to ``max_chars`` characters with an ellipsis; whitespace made visible."""
    return cut("".join(LINE_GLYPHS.get(c, c) for c in label), max_chars)


def thinned_ticks(labels: Sequence[str], max_labels: int = 40, max_chars: int = 12) -> list[tuple[float, str]]:
    """Axis ticks ``(position, text)`` at cell centres ``i + 0.5``: every k-th label, abbreviated."""
    step = label_step(len(labels), max_labels)
    return [(i + 0.5, abbreviate(str(labels[i]), max_chars)) for i in range(0, len(labels), step)]


def grouped_ticks(groups: int, per_group: int, max_labels: int = 40, prefix: str = "L") -> list[tuple[float, str]]:
    """Ticks for rows that come in groups (a layer's heads: row l * H + h): one at the first row of every k-th
    group, named by the group ("L0", "L5", …), never "L0H0, L1H1, …" (every (H+1)-th row, which reads as a
    diagonal); a group of one row is named at its centre."""
    step = label_step(groups, max_labels)
    offset = 0.5 if per_group == 1 else 0.0
    return [(g * per_group + offset, f"{prefix}{g}") for g in range(0, groups, step)]


@functools.lru_cache(maxsize=32)
def kept_ticks(labels: tuple[str, ...], max_labels: int = 40, max_chars: int = 12) -> list[tuple[float, str]]:
    """``thinned_ticks`` of a tuple of labels (a trace's tokens), kept: a switch over the same tokens asks for
    the same ticks again. The list is shared: read it, never change it."""
    return thinned_ticks(labels, max_labels, max_chars)
