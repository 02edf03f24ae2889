"""Live summaries of the diagram's boxes for one token: a number, a line of text and a small series.

Pure functions of a Trace (and the selected token and head); the Diagram panel calls them on its
worker. Every number is read from the Trace key the box names (``Box.key``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from explorer.core.diagram.boxes import Box, Diagram
from explorer.core.display.tokens import quoted, vocab_quoted
from explorer.core.trace import Trace

SERIES_MAX = 48  # points in a sparkline


@dataclass(frozen=True)
class Summary:
    text: str  # one short line: "‖x‖ = 12.3", "looks at 'the' (0.62)", "next: ' be' 23%"
    value: float | None = None  # the headline number
    series: tuple[float, ...] = ()  # a sparkline: over positions, a pattern row, top values
    mark: int | None = None  # the series index of the selected token (where the series runs over positions)


def _row_norms(a: np.ndarray) -> np.ndarray:
    """The float64 length of every row: each float32 element widened exactly and summed in float64, as a
    float64 copy would be, in chunks of einsum's buffer instead of one copy of ``a`` (a layer switch's
    n x d_model rows: ~4x faster; bitwise the same for rows up to 8,192 long)."""
    a = np.asarray(a)
    return np.sqrt(np.einsum("...i,...i->...", a, a, dtype=np.float64))


@functools.lru_cache(maxsize=64)
def chunk_starts(size: int) -> np.ndarray:
    """The first index of each of a sparkline's ``SERIES_MAX`` chunks of ``size`` values (read-only; kept per
    size: every box of a switch asks for the same few)."""
    starts = np.linspace(0, size, SERIES_MAX + 1).astype(np.int64)[:-1]
    starts.flags.writeable = False
    return starts


def _series(values: np.ndarray) -> tuple[float, ...]:
    values = np.asarray(values, dtype=np.float64)
    if values.size > SERIES_MAX:  # the largest magnitude of each chunk keeps the peaks
        starts = chunk_starts(values.size)
        hi, lo = np.maximum.reduceat(values, starts), np.minimum.reduceat(values, starts)
        values = np.where(np.abs(hi) >= np.abs(lo), hi, lo)
    return tuple(np.where(np.isfinite(values), values, 0.0).tolist())


def norms_of(trace: Trace, key: str) -> np.ndarray:
    """The length of every row of ``trace[key]`` (one per token), computed once per trace.  [n]"""
    return trace.memo(("diagram.norms", key), lambda: _row_norms(trace[key]))


def _mark(t: int, n: int) -> int:
    return t if n <= SERIES_MAX else int(t * SERIES_MAX / n)


def softmax(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    e = np.exp(x - np.max(x))
    return e / e.sum()


def box_summary(box: Box, trace: Trace, token: int, head: int = 0, tokenizer: Any = None) -> Summary:
    """What ``box`` shows for the token at position ``token`` (head ``head`` for attention boxes). A sparkline
    over positions is the same for every token: it is computed once per trace (``Trace.memo``)."""
    n = trace.n_tokens
    t = min(max(token, 0), n - 1)
    if box.kind == "tokens":
        return Summary(f"{n} tokens; #{t} is {quoted(trace.tokens[t])} (id {int(trace.token_ids[t])})",
                       float(trace.token_ids[t]))
    if box.key is None or box.key not in trace:
        return Summary("")
    layer = box.layer
    if box.kind == "scores" and layer is not None:
        h = min(head, trace.config.n_heads - 1)
        row = pattern_row(trace, layer, h, t)
        j = int(np.argmax(row))
        return Summary(f"head {h}: most to #{j} {quoted(trace.tokens[j], 10)} ({row[j]:.2f})", float(row[j]),
                       _series(row[: t + 1] if trace.config.causal else row), _mark(t, n))
    if box.kind == "mixer" and layer is not None:  # a recurrent layer: one row of its effective attention
        from explorer.core.mixers.effective import effective_block, scan_heads

        h = min(head, scan_heads(trace.config, layer) - 1)
        row = effective_block(trace, layer, [h], (t, t + 1), (0, t + 1))[0, 0]
        j = int(np.argmax(np.abs(row)))
        return Summary(f"head {h}: most weight on #{j} {quoted(trace.tokens[j], 10)} ({row[j]:.2g})", float(row[j]),
                       _series(row), _mark(t, n))
    a = trace[box.key]
    if box.kind == "qkv" and layer is not None:
        h = min(head, a.shape[0] - 1)
        norms = trace.memo(("diagram.norms", box.key, h), lambda: _row_norms(a[h]))
        series = trace.memo(("diagram.series", box.key, h), lambda: _series(norms))
        return Summary(f"head {h}: ‖q‖ = {norms[t]:.3g}", float(norms[t]), series, _mark(t, n))
    if box.kind == "norm":
        spread, series = trace.memo(("diagram.spread", box.key), lambda: _spread(a))
        name = "σ" if box.key.endswith(".var") else "rms"
        return Summary(f"input {name} = {spread[t]:.3g}: divided by it", float(spread[t]), series, _mark(t, n))
    if box.kind == "ffn_in":
        row = np.asarray(a[t], dtype=np.float64)
        i = int(np.argmax(row))
        return Summary(f"strongest neuron {i}: {row[i]:.3g}", float(row[i]), _series(np.sort(row)[::-1][:16]))
    if box.kind in ("router", "experts") and layer is not None:   # a mixture of experts: the token's routing
        experts = trace[f"blocks.{layer}.moe.experts"][t]
        weights = trace[f"blocks.{layer}.moe.weights"][t]
        chosen = ", ".join(f"{int(e)} ({w:.2f})" for e, w in zip(experts, weights))
        if box.kind == "router":
            probs = np.sort(np.asarray(a[t], dtype=np.float64))[::-1][:16]
            return Summary(f"experts {chosen}", float(weights[0]), _series(probs))
        return Summary(f"ran experts {chosen}", float(np.sum(weights)), _series(np.asarray(weights, np.float64)))
    if box.kind == "unembed":
        top, p = unembed_top(trace, box.key, t)
        return Summary(f"next: {vocab_quoted(tokenizer, int(top[0]), 10)} {p[0]:.0%}", float(p[0]), _series(p))
    norms = norms_of(trace, box.key)  # a vector per token: embedding, positions, a sublayer's output, the stream
    series = trace.memo(("diagram.series", box.key), lambda: _series(norms))
    return Summary(f"‖x‖ = {norms[t]:.3g}", float(norms[t]), series, _mark(t, n))


def _spread(stat: np.ndarray) -> tuple[np.ndarray, tuple[float, ...]]:
    """A norm's input spread (the square root of its variance or mean square) per token, and its sparkline."""
    spread = np.sqrt(np.maximum(np.asarray(stat, dtype=np.float64), 0.0))
    return spread, _series(spread)


def unembed_top(trace: Trace, key: str, t: int) -> tuple[np.ndarray, np.ndarray]:
    """The ids of the 10 likeliest next tokens at ``t`` (highest first, ties by lower id) and their
    probabilities: a softmax over the vocabulary, computed once per position and kept with the trace."""
    def compute() -> tuple[np.ndarray, np.ndarray]:
        probs = softmax(trace[key][t])
        top = np.argpartition(-probs, 9)[:10] if probs.size > 10 else np.arange(probs.size)
        top = top[np.lexsort((top, -probs[top]))]
        return top, probs[top]

    return trace.memo(("diagram.unembed", key, t), compute)


def vocab_ready(box: Box, trace: Trace, t: int) -> bool:
    """Whether ``box``'s summary at ``t`` is free of vocabulary-sized work (all but an un-embedding not
    computed at ``t`` yet)."""
    return box.kind != "unembed" or trace.memo_get(("diagram.unembed", box.key, t)) is not None


def pattern_row(trace: Trace, layer: int, head: int, t: int) -> np.ndarray:
    """Row ``t`` of head ``head``'s pattern: the keys ``t`` sees (0..t in a causal model, all in an encoder).

    The Trace's own recipe (``Trace._score_views``: the scale, bias, mask, window and cap of the forward
    pass) on one query instead of the head's n × n, so a head or token switch costs O(n · d_head)."""
    q, k = trace[f"blocks.{layer}.attn.q"], trace[f"blocks.{layer}.attn.k"]
    kv = head // (q.shape[0] // k.shape[0])
    stop = t + 1 if trace.config.causal else trace.n_tokens
    views = trace._score_views(layer, q[head:head + 1, t:t + 1], k[kv:kv + 1, :stop], slice(head, head + 1))
    return views["pattern"][0, 0]


def summary_keys(diagram: Diagram, layer: int, trace: Trace) -> list[str]:
    """The Trace keys the summaries of the head, block ``layer`` and the tail read (for ``materialize``)."""
    boxes = diagram.head() + diagram.block(layer) + diagram.tail()
    return [b.key for b in boxes if b.key is not None and b.kind not in ("scores", "mixer") and b.key in trace]


def stream_norms(trace: Trace, token: int) -> tuple[float, ...]:
    """The residual stream's norm at ``token`` entering each block and after the last: a series for the
    collapsed blocks' strip."""
    keys = [f"blocks.{layer}.resid_pre" for layer in range(trace.config.n_layers)] + ["resid_final"]
    return tuple(float(norms_of(trace, k)[token]) if k in trace else 0.0 for k in keys)
