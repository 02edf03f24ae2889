"""Summaries of a traced conversation by span (pure functions of a Trace and its ``ChatSpans``).

* ``answer_positions``: the answer's tokens: the own text (not its reasoning, not the template's markup) of
  the last turn when it is the assistant's; otherwise (a conversation that ends with the generation prompt,
  even after earlier answers) the last token, whose prediction is the answer's first token.
* ``span_groups``: the keys an answer can attend to, grouped: the system prompt, each user turn, each
  earlier assistant answer, reasoning, and the template's markup.
* ``attention_to_spans``: per layer and head, the share of the answer's attention (averaged over the
  answer's tokens) that lands on each group; the rows of a pattern sum to 1, so the groups of a causal
  model sum to 1 for every head.
* ``answer_top_token_layers``: for each answer position, the model's final top token and the first layer
  boundary from which the logit lens already ranks it first (and keeps it there).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from explorer.core.chat.spans import ChatSpans
from explorer.core.trace import Trace

ANSWER_KINDS = ("content", "final")
REASONING_KINDS = ("thinking", "analysis", "commentary")


def spans_of(trace: Trace) -> ChatSpans:
    spans = trace.meta.chat
    if spans is None:
        raise ValueError("this trace is not a templated conversation (no chat spans)")
    return spans


def answer_positions(spans: ChatSpans) -> np.ndarray:
    """Positions of the answer text of the conversation's last turn when it is the assistant's, else the last
    token (int64): a conversation that ends with the generation prompt (or a user's turn) has no answer yet,
    and an earlier assistant turn is not the answer to what came after it."""
    last = max(spans.turns) if spans.n_tokens else -1
    if last >= 0 and spans.roles[last] == "assistant":
        found = spans.positions(turn=last, kind=ANSWER_KINDS)
        if found.size:
            return found
    return np.asarray([spans.n_tokens - 1], dtype=np.int64)


@dataclass(frozen=True)
class SpanGroup:
    label: str
    positions: np.ndarray


def span_groups(spans: ChatSpans) -> list[SpanGroup]:
    """The key groups, in order of first appearance: "system", "user 1", "assistant 1", "thinking", "markup"..."""
    counters: dict[str, int] = {}
    labels: list[str] = []
    members: dict[str, list[int]] = {}
    names: dict[int, str] = {}
    for i in range(spans.n_tokens):
        kind, turn, role = spans.kinds[i], spans.turns[i], spans.role_of(i)
        if kind == "markup":
            label = "markup"
        elif kind in REASONING_KINDS:
            label = "thinking" if kind == "thinking" else f"{kind} channel"
        else:
            if turn not in names:
                counters[role] = counters.get(role, 0) + 1
                names[turn] = role if role == "system" else f"{role} {counters[role]}"
            label = names[turn]
        if label not in members:
            members[label] = []
            labels.append(label)
        members[label].append(i)
    return [SpanGroup(label, np.asarray(members[label], dtype=np.int64)) for label in labels]


@dataclass(frozen=True, eq=False)
class SpanAttention:
    """``values[l, h, g]``: the mean over the query tokens of the attention head (l, h) pays to group g."""

    labels: tuple[str, ...]
    values: np.ndarray
    queries: np.ndarray

    def averaged(self) -> np.ndarray:
        """[G]: averaged over every layer and head."""
        return self.values.mean(axis=(0, 1))

    def per_layer(self) -> np.ndarray:
        """[L, G]: averaged over each layer's heads."""
        return self.values.mean(axis=1)

    def share(self, label: str) -> float:
        return float(self.averaged()[self.labels.index(label)])


def attention_to_spans(trace: Trace, queries: Sequence[int] | None = None,
                       layers: Sequence[int] | None = None) -> SpanAttention:
    """The share of the answer's attention (or ``queries``') on each span group, per layer and head."""
    spans = spans_of(trace)
    groups = span_groups(spans)
    q = np.asarray(answer_positions(spans) if queries is None else queries, dtype=np.int64)
    layers = list(range(trace.config.n_layers) if layers is None else layers)
    H = trace.config.n_heads
    out = np.zeros((len(layers), H, len(groups)), dtype=np.float64)
    for li, layer in enumerate(layers):
        for head in range(H):
            rows = np.asarray(trace.head(layer, head, "pattern"), dtype=np.float64)[q]  # [Q, n]
            for g, group in enumerate(groups):
                out[li, head, g] = rows[:, group.positions].sum(axis=1).mean()
    return SpanAttention(tuple(g.label for g in groups), out, q)


@dataclass(frozen=True)
class TopTokenLayer:
    position: int
    token_id: int
    boundary: int  # the first boundary (0 = the embedding, L = after the last block) from which it stays first


def answer_top_token_layers(trace: Trace, positions: Sequence[int] | None = None,
                            vocab_size: int | None = None) -> list[TopTokenLayer]:
    """For each position (default: the answer's), where in the layers the final top token comes first."""
    from explorer.core.analysis.residual import lens_columns

    positions = list(answer_positions(spans_of(trace)) if positions is None else positions)
    out = []
    for p in positions:
        block = lens_columns(trace, int(p), int(p) + 1, 1, vocab_size)
        tops = block.ids[:, 0, 0]  # [B]: the lens' top token at each boundary
        final = int(tops[-1])
        stays = np.flip(np.logical_and.accumulate(np.flip(tops == final)))
        out.append(TopTokenLayer(int(p), final, int(np.argmax(stays))))
    return out
