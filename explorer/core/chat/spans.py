"""Which message and which kind of text each token of a rendered conversation belongs to.

``ChatSpans`` is the small immutable record a Trace carries: per token, the index of its turn (the
message it belongs to; ``len(messages)`` for the assistant turn the generation prompt opens), the
turn's role, and the kind of text:

``markup``      what the template writes: headers, special tokens, separators;
``content``     a message's own text;
``thinking``    reasoning: inside ``<think>…</think>``, or a message's ``thinking`` as the template wrote it;
``analysis`` / ``commentary`` / ``final``  a Harmony (gpt-oss) channel's message text.

The character ranges come from ``label_chars``: each message's content (and thinking) located in the
rendered text, then ``<think>`` blocks and Harmony channels found in it. Markup between two messages
belongs to the later one, except an end-of-turn marker right after a message, which closes it.
``token_labels`` maps those ranges to tokens through the tokenizer's character offsets: a token that
overlaps any non-markup character takes that character's kind and turn (as transformers' assistant mask
counts a token that overlaps a span).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

KINDS = ("markup", "content", "thinking", "analysis", "commentary", "final")
CHANNELS = ("analysis", "commentary", "final")
# markers that end a turn in the families' templates (the one right after a message closes it)
END_MARKERS = ("<|eot_id|>", "<|eom_id|>", "<|im_end|>", "<end_of_turn>", "<turn|>", "<|end|>", "<|return|>",
               "<|call|>", "<｜end▁of▁sentence｜>", "</s>", "<|endoftext|>", "<|end_of_text|>")
# how a reply's reasoning is opened and closed: <think> tags (Qwen, DeepSeek, GLM, Nemotron, LFM2.5...), Gemma 4's
# thought channel (its opening control token and the channel's name, then the reasoning, then <channel|>)
REASONING_BLOCKS = (("<think>", "</think>"), ("<|channel>thought", "<channel|>"))
_THINK = re.compile(r"<think>(.*?)(</think>|$)", re.S)
_HARMONY = re.compile(r"<\|channel\|>(analysis|commentary|final)\b[^<]*(?:<\|constrain\|>[^<]*)?<\|message\|>"
                      r"(.*?)(?=<\|end\|>|<\|return\|>|<\|call\|>|<\|start\|>|$)", re.S)


@dataclass(frozen=True)
class Segment:
    """A run of tokens [start, stop) of one turn and one kind."""

    start: int
    stop: int
    turn: int
    role: str
    kind: str

    @property
    def label(self) -> str:
        return f"{self.role} {self.kind}" if self.kind != "content" else self.role


@dataclass(frozen=True)
class ChatSpans:
    """Per token: turn index, role and kind (see the module doc), and the turns' roles."""

    turns: tuple[int, ...]
    kinds: tuple[str, ...]
    roles: tuple[str, ...]  # the role of each turn (index = turn); the last may be the generation prompt's
    template: str = ""      # where the template came from ("chat template from tokenizer_config.json")

    def __post_init__(self) -> None:
        if len(self.turns) != len(self.kinds):
            raise ValueError("turns and kinds must have one entry per token")
        bad = [k for k in self.kinds if k not in KINDS]
        if bad:
            raise ValueError(f"unknown span kind {bad[0]!r}")
        if any(not -1 <= t < len(self.roles) for t in self.turns):
            raise ValueError("a token's turn is not one of the conversation's turns")

    @property
    def n_tokens(self) -> int:
        return len(self.turns)

    def role_of(self, position: int) -> str:
        turn = self.turns[position]
        return self.roles[turn] if turn >= 0 else ""

    @property
    def token_roles(self) -> tuple[str, ...]:
        return tuple(self.role_of(i) for i in range(self.n_tokens))

    def segments(self) -> list[Segment]:
        """Contiguous runs of the same turn and kind, in order (the role bands of a token axis)."""
        out: list[Segment] = []
        for i, (turn, kind) in enumerate(zip(self.turns, self.kinds)):
            if out and out[-1].turn == turn and out[-1].kind == kind:
                out[-1] = Segment(out[-1].start, i + 1, turn, out[-1].role, kind)
            else:
                out.append(Segment(i, i + 1, turn, self.roles[turn] if turn >= 0 else "", kind))
        return out

    def positions(self, role: str | None = None, kind: str | Sequence[str] | None = None,
                  turn: int | None = None) -> np.ndarray:
        """Token positions matching all the given filters (int64)."""
        kinds = (kind,) if isinstance(kind, str) else tuple(kind) if kind is not None else None
        keep = [i for i in range(self.n_tokens)
                if (role is None or self.role_of(i) == role) and (kinds is None or self.kinds[i] in kinds)
                and (turn is None or self.turns[i] == turn)]
        return np.asarray(keep, dtype=np.int64)

    def turn_starts(self) -> list[int]:
        """The first token of each turn present (for jumping the selection turn by turn)."""
        seen: dict[int, int] = {}
        for i, turn in enumerate(self.turns):
            seen.setdefault(turn, i)
        return sorted(seen.values())

    def cut(self, n: int) -> ChatSpans:
        """The first ``n`` tokens' spans (a conversation cut to the context)."""
        return ChatSpans(self.turns[:n], self.kinds[:n], self.roles, self.template)

    def extended(self, kinds: Sequence[str], role: str = "assistant") -> ChatSpans:
        """These spans followed by generated tokens of the last turn (a new assistant turn if the last is not one)."""
        roles, turn = self.roles, len(self.roles) - 1
        if not roles or roles[-1] != role:
            roles, turn = (*roles, role), len(roles)
        return ChatSpans(self.turns + (turn,) * len(kinds), self.kinds + tuple(kinds), roles, self.template)

    def to_json(self) -> str:
        return json.dumps({"turns": list(self.turns), "kinds": list(self.kinds), "roles": list(self.roles),
                           "template": self.template}, ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str, n_tokens: int | None = None) -> ChatSpans:
        """The record ``to_json`` wrote; a ``ValueError`` naming what is wrong otherwise."""
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("the chat spans are not an object")
        turns, kinds, roles = data.get("turns"), data.get("kinds"), data.get("roles")
        if not (isinstance(turns, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in turns)
                and isinstance(kinds, list) and all(isinstance(k, str) for k in kinds)
                and isinstance(roles, list) and all(isinstance(r, str) for r in roles)):
            raise ValueError("the chat spans should hold lists of turns, kinds and roles")
        if n_tokens is not None and len(turns) != n_tokens:
            raise ValueError(f"the chat spans cover {len(turns)} tokens, the trace has {n_tokens}")
        template = data.get("template", "")
        return cls(tuple(turns), tuple(kinds), tuple(roles), template if isinstance(template, str) else "")


# --- characters ----------------------------------------------------------------------------------

def label_chars(text: str, ranges: list[tuple[int, int, int, str]], n_messages: int,
                generation_prompt: bool) -> tuple[np.ndarray, np.ndarray]:
    """(turn per character int32, kind index per character int8) of the rendered ``text``.

    ``ranges``: (start, stop, message index, kind) of each message's content/thinking found in the text,
    in text order."""
    n = len(text)
    turn = np.full(n, -1, dtype=np.int32)
    kind = np.zeros(n, dtype=np.int8)
    ordered = sorted(ranges)
    # markup: each run between found ranges goes to the next message, but an end marker right after a
    # message (with the newline after it) closes that message
    previous_end, previous_turn = 0, -1
    for start, stop, index, _ in ordered + [(n, n, n_messages if generation_prompt else n_messages - 1, "")]:
        split = previous_end
        if previous_turn >= 0:
            gap = text[previous_end:start]
            for marker in END_MARKERS:
                at = gap.find(marker)
                if at != -1 and not gap[:at].strip(" \n"):
                    split = previous_end + at + len(marker)
                    split += 1 if text[split:split + 1] == "\n" else 0
                    break
            turn[previous_end:split] = previous_turn
        turn[split:start] = index
        previous_end, previous_turn = max(previous_end, stop), index
    for start, stop, index, k in ordered:
        turn[start:stop] = index
        kind[start:stop] = KINDS.index(k)
    if n_messages and (turn == -1).all():
        turn[:] = 0
    for match in _THINK.finditer(text):
        a, b = match.span(1)
        kind[match.start():a] = 0  # the tags are markup, wherever they are written
        kind[b:match.end()] = 0
        kind[a:b] = KINDS.index("thinking")
    for match in _HARMONY.finditer(text):
        a, b = match.span(2)
        kind[a:b] = KINDS.index(match.group(1))
    return turn, kind


def token_labels(offsets: Sequence[tuple[int, int]], turn: np.ndarray, kind: np.ndarray) -> tuple[list[int], list[str]]:
    """Each token's (turn, kind) from its character offsets [a, b) in the rendered text."""
    turns, kinds = [], []
    n = len(turn)
    for a, b in offsets:
        a, b = max(0, min(a, n)), max(0, min(b, n))
        inside = np.flatnonzero(kind[a:b]) if b > a else np.zeros(0, dtype=np.int64)
        at = a + int(inside[0]) if inside.size else min(a, n - 1) if n else 0
        turns.append(int(turn[at]) if n else -1)
        kinds.append(KINDS[int(kind[at])] if inside.size else "markup")
    return turns, kinds


def content_ranges(plain: str, marked: str, markers: dict[str, tuple[int, str, str]]) -> list[tuple[int, int, int, str]] | None:
    """Ranges of the marked pieces in ``plain`` (None when the marked render is not the plain one plus markers).

    ``markers``: marker character -> (message index, kind, "open" or "close"), with the piece's text for a
    lone marker (a template that cut the piece, as DeepSeek-R1's drops everything before ``</think>``)."""
    found: dict[tuple[int, str], dict[str, int]] = {}
    out_chars, position = [], 0
    for ch in marked:
        spec = markers.get(ch)
        if spec is None:
            out_chars.append(ch)
            position += 1
            continue
        index, k, side = spec[0], spec[1], spec[2]
        found.setdefault((index, k), {})[side] = position
    if "".join(out_chars) != plain:
        return None
    return [(where.get("open", -1), where.get("close", -1), index, k) for (index, k), where in found.items()]
