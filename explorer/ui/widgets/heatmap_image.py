"""What a heatmap shows, computed without Qt, so that a panel's worker can prepare a large one.

``heatmap_image`` checks a matrix and its mask, finds the colour levels over the finite unmasked cells,
replaces the hidden cells (masked, or non-finite such as the -inf of causal scores) by the low level for
the image, and can draw the hatched overlay that covers them. ``Heatmap.set_data`` takes either a matrix
(and calls it on the GUI thread) or what it returned: a 4,096 x 4,096 score map costs a few hundred
milliseconds here, which a panel's ``prepare`` spends on its worker instead of the GUI thread.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from explorer.core.display.levels import all_finite, finite_levels

MASK_LIGHT = (205, 205, 205, 255)
MASK_DARK = (150, 150, 150, 255)
_OVERLAY_MAX_PIXELS = 2_000_000  # above this the overlay is plain grey, one pixel per cell


@dataclass(frozen=True, eq=False)
class HeatmapImage:
    """A matrix ready to show: the values as given (read-only), the mask as given, the cells the overlay hides,
    the colour levels, the float32 image (hidden cells at the low level) and, when asked for, the overlay."""

    matrix: np.ndarray
    masked: np.ndarray
    hidden: np.ndarray
    levels: tuple[float, float]
    shown: np.ndarray
    overlay: tuple[np.ndarray, int] | None = None

    @property
    def any_hidden(self) -> bool:
        return bool(self.hidden.any()) if self.hidden.size else False


def _read_only(a: np.ndarray) -> np.ndarray:
    if a.flags.writeable:
        a.flags.writeable = False
    return a


def heatmap_image(matrix: np.ndarray, symmetric: bool = False, masked: np.ndarray | None = None,
                  levels: tuple[float, float] | None = None, overlay: bool = False) -> HeatmapImage:
    """``matrix`` [rows, cols] (a vector is one row) ready to show; ``overlay`` also draws the hatching."""
    given = np.asarray(matrix)
    dtype = np.float64 if given.dtype == np.float64 else np.float32
    # a read-only array of the right type (a trace's, a memo's) is kept as it is; anything else is copied
    values = given if given.dtype == dtype and not given.flags.writeable else np.array(given, dtype=dtype)
    if values.ndim == 1:
        values = values[None, :]
    if values.ndim != 2:
        raise ValueError(f"a heatmap needs a 2-D matrix, got shape {values.shape}")
    mask = np.zeros(values.shape, dtype=bool) if masked is None else np.array(masked, dtype=bool)
    if mask.shape != values.shape:
        raise ValueError(f"mask of shape {mask.shape} does not match the matrix {values.shape}")
    _read_only(values), _read_only(mask)
    hidden = mask if all_finite(values) else _read_only(mask | ~np.isfinite(values))
    if values.size == 0:
        return HeatmapImage(values, mask, hidden, (0.0, 1.0), np.zeros((0, 0), np.float32))
    lo, hi = (float(levels[0]), float(levels[1])) if levels is not None else (np.nan, np.nan)
    if not (np.isfinite(lo) and np.isfinite(hi) and lo < hi):  # none given, or given levels a NaN made unusable
        lo, hi = finite_levels(values, symmetric, mask if masked is not None else None)
    any_hidden = bool(hidden.any())
    shown = np.ascontiguousarray(np.where(hidden, lo, values) if any_hidden else values, dtype=np.float32)
    drawn = mask_overlay(hidden) if overlay and any_hidden else None
    return HeatmapImage(values, mask, hidden, (lo, hi), shown, drawn)


@functools.lru_cache(maxsize=8)
def stripe_tile(s: int) -> np.ndarray:
    """One ``s x s`` tile of diagonal stripes, each RGBA pixel as one uint32 (read-only; kept per size: a
    switch's overlays are all of the same few sizes)."""
    i, j = np.indices((s, s))
    tile = np.where((((i + j) % s) < max(1, s // 4))[..., None], np.uint8(MASK_DARK), np.uint8(MASK_LIGHT))
    pixel = np.ascontiguousarray(tile, dtype=np.uint8).view(np.uint32)[..., 0]
    pixel.flags.writeable = False
    return pixel


def mask_overlay(hidden: np.ndarray) -> tuple[np.ndarray, int]:
    """An RGBA uint8 image that hatches the ``hidden`` cells and is transparent elsewhere.

    Returns ``(rgba, s)`` where each cell is ``s x s`` overlay pixels (``s == 1``: plain grey).
    """
    rows, cols = hidden.shape
    s = 16
    while s > 1 and rows * cols * s * s > _OVERLAY_MAX_PIXELS:
        s //= 2
    if s == 1:
        dark = np.array(MASK_DARK, dtype=np.uint8).view(np.uint32)[0]
        return np.where(np.asarray(hidden, bool), dark, np.uint32(0)).view(np.uint8).reshape(rows, cols, 4), s
    pixel = stripe_tile(s)
    out = np.where(np.asarray(hidden, bool)[:, None, :, None], pixel[None, :, None, :], np.uint32(0))
    return out.reshape(rows * s, cols * s).view(np.uint8).reshape(rows * s, cols * s, 4), s
