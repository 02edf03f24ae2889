"""How a unit's evidence over a corpus is shown (Qt-free): its top examples as lines of text with the firing
token apart, and its corpus histogram as bars over the run's fixed bins with today's value marked.

A corpus run keeps every unit's histogram over the same bins (``explorer.core.corpus.accumulate.BIN_EDGES``:
exactly 0, then four per decade from 1e-4 to 1e4 on each side), so the bars stand one per bin, evenly
spaced, and the axis is labelled at the decades: a logarithmic axis on each side of 0. ``HistogramBars``
is the part of the bins that holds anything (or today's value), with the text of every bin's interval.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from explorer.core.display.tokens import visible

CONTEXT_GLYPHS = {"\n": "\u21b5 ", "\r": "\u240d", "\t": "\u21e5 "}  # a context reads as text: spaces stay spaces


def context_text(tokens: Sequence[str]) -> str:
    """Tokens joined as the text they are, line breaks and tabs shown as glyphs (a context on one line)."""
    return "".join(CONTEXT_GLYPHS.get(c, c if c >= " " and c != "\x7f" else f"\\x{ord(c):02x}")
                   for c in "".join(tokens))


@dataclass(frozen=True)
class ExampleLine:
    """One top example as shown: its value, the text before the firing token, the token (with the glyphs every
    panel uses, so " the" and "the" differ), the text after, and where it is ("file.jsonl:3, token 120")."""

    value: float
    before: str
    focus: str
    after: str
    where: str


def example_line(example: Any, before: int | None = None, after: int | None = None) -> ExampleLine:
    """``example`` (an ``Example`` of ``CorpusRun.top_examples``: ``tokens``, ``focus``, ``value``) with at most
    ``before`` tokens before its firing token and ``after`` after it (None: all it holds)."""
    tokens, i = example.tokens, example.focus
    lo = 0 if before is None else max(0, i - before)
    hi = len(tokens) if after is None else min(len(tokens), i + 1 + after)
    return ExampleLine(float(example.value), context_text(tokens[lo:i]), visible(tokens[i]) if tokens[i] else "\u2205",
                       context_text(tokens[i + 1:hi]), f"{example.doc_name}, token {example.position}")


def pair_line(pair: Any, before: int | None = None) -> tuple[str, str, str, str, str]:
    """A head's query/key pair (``PairExample``) as text pieces: before the key, the key, between, the query,
    and where it is. The key comes first (causal attention looks back); a pair whose key follows its query
    (a bidirectional model) is shown in the same order, key then query."""
    tokens, q, k = pair.tokens, pair.query, pair.key
    first, second = min(q, k), max(q, k)
    lo = 0 if before is None else max(0, first - before)
    show = lambda t: visible(t) if t else "\u2205"  # noqa: E731
    return (context_text(tokens[lo:first]), show(tokens[first]), context_text(tokens[first + 1:second]),
            show(tokens[second]) if second != first else "", f"{pair.doc_name}, window {pair.window}")


def bin_text(edges: np.ndarray, b: int) -> str:
    """The interval of bin ``b`` over ``edges`` (bin b holds (edges[b-1], edges[b]]), in words where it is one
    value: exactly 0."""
    edges = np.asarray(edges)
    if b <= 0:
        return f"\u2264 {edges[0]:g}"
    if b >= len(edges):
        return f"> {edges[-1]:g}"
    lo, hi = float(edges[b - 1]), float(edges[b])
    if hi == 0.0 and lo < 0 and lo > -1e-30:
        return "exactly 0"
    return f"({lo:.3g}, {hi:.3g}]"


@dataclass(frozen=True)
class HistogramBars:
    """The shown bins ``first``..``last`` (inclusive) of a unit's corpus histogram: bar x = bin number,
    ``counts`` and ``shares`` (of every token of the run) of those bins, ``ticks`` (x, label) at the decades,
    and ``marker``: the bin of today's value (None: no value)."""

    first: int
    last: int
    counts: np.ndarray
    shares: np.ndarray
    ticks: list[tuple[float, str]]
    marker: int | None
    texts: list[str]

    @property
    def x(self) -> np.ndarray:
        return np.arange(self.first, self.last + 1, dtype=np.float64)


def histogram_bars(counts: np.ndarray, edges: np.ndarray, value: float | None = None,
                   marker: int | None = None) -> HistogramBars:
    """The bins worth showing of ``counts`` over ``edges`` (from the first to the last that holds a token, and
    the bin of ``value``, whose number is ``marker`` when given: ``Distribution.bin_of``)."""
    counts = np.asarray(counts, dtype=np.int64)
    edges = np.asarray(edges, dtype=np.float64)
    if marker is None and value is not None and math.isfinite(value):
        marker = int(np.searchsorted(edges.astype(np.float32), np.float32(value), side="left"))
    held = np.flatnonzero(counts)
    zero = int(np.searchsorted(edges, 0.0))
    lo, hi = (int(held[0]), int(held[-1])) if held.size else (zero, zero)
    if marker is not None:
        lo, hi = min(lo, marker), max(hi, marker)
    lo, hi = max(0, lo - 1), min(len(counts) - 1, hi + 1)  # a bin of room each side
    total = max(1, int(counts.sum()))
    shown = counts[lo:hi + 1]
    ticks = []
    for b in range(lo, hi + 2):  # the boundary left of bin b is edges[b - 1], at x = b - 0.5
        if 1 <= b <= len(edges):
            e = float(edges[b - 1])
            if e != 0.0 and abs(e) >= 1e-30 and abs(math.log10(abs(e)) - round(math.log10(abs(e)))) < 1e-6:
                ticks.append((b - 0.5, f"{e:g}"))
    if lo <= zero <= hi:
        ticks.append((float(zero), "0"))
    ticks.sort()
    return HistogramBars(lo, hi, shown, shown / total, ticks, marker,
                         [bin_text(edges, b) for b in range(lo, hi + 1)])
