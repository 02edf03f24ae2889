"""How a unit's corpus evidence is shown (explorer.core.display.evidence): contexts as text with the firing
token apart, a pair's key and query, the histogram's shown bins, shares, decade ticks, bin texts and marker."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from explorer.core.corpus.accumulate import BIN_EDGES, N_BINS, ZERO_BIN
from explorer.core.corpus.read import Distribution
from explorer.core.display.evidence import bin_text, context_text, example_line, histogram_bars, pair_line


def test_a_context_reads_as_text_and_its_firing_token_stands_apart():
    example = SimpleNamespace(value=2.5, tokens=("To", " be", ",", "\n", "or", " not", " to"), focus=5,
                              doc_name="plays.txt", position=1203)
    line = example_line(example)
    assert (line.before, line.focus, line.after) == ("To be,\u21b5 or", "\u00b7not", " to")
    assert line.value == 2.5 and line.where == "plays.txt, token 1203"
    short = example_line(example, before=2, after=0)
    assert (short.before, short.after) == ("\u21b5 or", "")
    assert context_text(["a\tb", "\x01"]) == "a\u21e5 b\\x01"


def test_a_pair_shows_the_key_before_the_query():
    pair = SimpleNamespace(tokens=("A", " cat", " sat", ".", " A", " cat"), query=5, key=2, doc_name="d", window=7)
    assert pair_line(pair) == ("A cat", "\u00b7sat", ". A", "\u00b7cat", "d, window 7")
    assert pair_line(pair, before=1)[0] == " cat"


def test_bin_texts_follow_the_runs_bins():
    assert bin_text(BIN_EDGES, ZERO_BIN) == "exactly 0"
    assert bin_text(BIN_EDGES, 0) == "\u2264 -10000" and bin_text(BIN_EDGES, N_BINS - 1) == "> 10000"
    b = int(np.searchsorted(BIN_EDGES, 0.5))
    assert bin_text(BIN_EDGES, b) == f"({BIN_EDGES[b - 1]:.3g}, {BIN_EDGES[b]:.3g}]" == "(0.316, 0.562]"


def test_the_histogram_shows_the_held_bins_and_marks_todays_value():
    values = np.float32([0.0] * 50 + [0.02] * 30 + [0.3, 0.5, 1.5, 2.0] * 5)
    bins = np.searchsorted(BIN_EDGES, values, side="left")  # the run's rule (accumulate.py, Distribution.bin_of)
    counts = np.bincount(bins, minlength=N_BINS)
    dist = Distribution(len(values), float(values.mean()), float(values.std()), 0.5, 2.0, counts, BIN_EDGES)
    bars = histogram_bars(dist.counts, dist.edges, 0.5, dist.bin_of(0.5))
    held = np.flatnonzero(counts)
    assert bars.first == held[0] - 1 and bars.last == held[-1] + 1       # a bin of room each side
    np.testing.assert_array_equal(bars.counts, counts[bars.first:bars.last + 1])
    assert bars.shares.sum() == pytest.approx(1.0) and bars.counts.sum() == len(values)
    assert bars.marker == dist.bin_of(0.5) == int(np.searchsorted(BIN_EDGES, np.float32(0.5)))
    assert bars.texts[bars.marker - bars.first] == "(0.316, 0.562]"
    labels = dict((label, x) for x, label in bars.ticks)
    assert labels["0"] == ZERO_BIN and labels["0.1"] == int(np.searchsorted(BIN_EDGES, np.float32(0.1))) + 0.5
    assert "1" in labels and "-0.1" not in labels                           # only the shown range's decades
    far = histogram_bars(counts, BIN_EDGES, -50.0)                          # today's value far outside: shown too
    assert far.first <= int(np.searchsorted(BIN_EDGES, np.float32(-50.0))) and far.marker is not None
    empty = histogram_bars(np.zeros(N_BINS, np.int64), BIN_EDGES, math.nan)
    assert empty.marker is None and empty.counts.sum() == 0 and empty.first <= ZERO_BIN <= empty.last
