"""Heatmap colour levels and label thinning (headless)."""

from __future__ import annotations

import numpy as np

from explorer.core.display.levels import abbreviate, finite_levels, label_step, thinned_ticks


def test_levels_ignore_non_finite_and_masked():
    m = np.array([[0.1, -np.inf], [np.nan, 0.7], [5.0, 0.3]])
    mask = np.array([[False, True], [False, False], [True, False]])
    assert finite_levels(m) == (0.1, 5.0)
    assert finite_levels(m, masked=mask) == (0.1, 0.7)


def test_symmetric_levels_centre_zero():
    assert finite_levels(np.array([[-0.2, 0.5]]), symmetric=True) == (-0.5, 0.5)
    assert finite_levels(np.zeros((2, 2)), symmetric=True) == (-1.0, 1.0)


def test_degenerate_levels_are_never_empty():
    lo, hi = finite_levels(np.full((3, 3), 2.0))
    assert lo < 2.0 < hi
    assert finite_levels(np.full((2, 2), np.nan)) == (0.0, 1.0)
    assert finite_levels(np.zeros((0, 0))) == (0.0, 1.0)


def test_label_thinning():
    assert label_step(10, 40) == 1
    assert label_step(100, 40) == 3
    ticks = thinned_ticks([f"{i}:tok" for i in range(100)], max_labels=25)
    assert len(ticks) <= 25
    assert ticks[0] == (0.5, "0:tok") and ticks[1][0] == 4.5
    assert abbreviate("a rather long token label", 8) == "a rathe\u2026"
    assert abbreviate("line\nbreak") == "line\u21b5break"


def test_finite_levels_skip_nan_gaps_and_infinities_alike():
    """NaN gaps (a mosaic's) and infinities are left out whichever path computes the range."""
    rng = np.random.default_rng(0)
    a = rng.normal(size=(64, 80)).astype(np.float32)
    expected = (float(a.min()), float(a.max()))
    gaps = a.copy()
    gaps[::7] = np.nan
    kept = a[~np.isnan(gaps)]
    assert finite_levels(gaps) == (float(kept.min()), float(kept.max()))
    both = gaps.copy()
    both[0, 3], both[7, 4] = np.inf, -np.inf  # in the NaN rows: the finite values stay the same
    assert finite_levels(both) == finite_levels(gaps)
    assert finite_levels(a) == expected
    m = float(np.abs(kept).max())
    assert finite_levels(gaps, symmetric=True) == (-m, m)


def test_kept_ticks_equal_thinned_ticks_are_kept_per_labels_and_follow_new_labels_or_room():
    from explorer.core.display.levels import kept_ticks, thinned_ticks

    tokens = tuple(f" token{i}\n" for i in range(300))
    for max_labels, max_chars in ((40, 8), (7, 12), (2, 8)):
        assert kept_ticks(tokens, max_labels, max_chars) == thinned_ticks(tokens, max_labels, max_chars)
    assert kept_ticks(tokens, 40, 8) is kept_ticks(tokens, 40, 8)  # kept
    other = tokens[:299] + (" other",)  # one token changed: its own ticks, never the old ones
    assert kept_ticks(other, 40, 8) == thinned_ticks(other, 40, 8)
    assert kept_ticks(tokens[:10], 40, 8) == thinned_ticks(tokens[:10], 40, 8)
