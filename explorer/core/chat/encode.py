"""A conversation through the checkpoint's chat template to token ids, with each token's turn and kind.

``encode_chat`` does what ``tokenizer.apply_chat_template(messages, add_generation_prompt=...,
tokenize=True, **options)`` does in transformers (render, then encode without adding special tokens),
so the ids are the same, and also finds the spans (``spans.py``): the template is rendered a second time,
in the same sandboxed call, with invisible private-use markers around each message's content and
thinking; with the markers taken out that text must equal the plain rendering, and the markers' places
are the pieces' places. A template that changes a piece in a way the markers do not survive falls back
to finding each piece's text in order.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from explorer.core.chat.messages import checked_messages, template_messages
from explorer.core.chat.sandbox import ChatTemplateError
from explorer.core.chat.spans import REASONING_BLOCKS, ChatSpans, content_ranges, label_chars, token_labels
from explorer.core.chat.template import ChatTemplate
from explorer.core.text import shown

_MARK_BASE = 0xF0000  # Supplementary Private Use Area-A: never in a template or a tokenizer's specials
_RESERVED = frozenset({"messages", "add_generation_prompt", "tools", "documents"})
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class ChatEncoding:
    """A rendered conversation: the text, its token ids and offsets, and the spans."""

    ids: tuple[int, ...]
    text: str
    offsets: tuple[tuple[int, int], ...]
    spans: ChatSpans
    messages: tuple[dict[str, str], ...]
    add_generation_prompt: bool
    options: dict[str, Any] = field(default_factory=dict)
    template: ChatTemplate | None = None

    @property
    def open_thinking(self) -> bool:
        """The text ends inside an unclosed ``<think>`` (DeepSeek-R1 and Qwen3.5 open the reply's reasoning
        themselves) or Gemma 4 thought channel."""
        return any(self.text.rfind(opening) > self.text.rfind(closing) for opening, closing in REASONING_BLOCKS)

    @property
    def harmony(self) -> bool:
        """The template writes Harmony (gpt-oss): channels, not ``<think>`` tags."""
        return self.template is not None and "<|channel|>" in self.template.text


def checked_options(options: dict[str, Any]) -> dict[str, Any]:
    """Template options: names a template can read, with JSON values (``enable_thinking=False``, ...)."""
    out = {}
    for name, value in options.items():
        if not isinstance(name, str) or not _NAME.match(name) or name in _RESERVED:
            raise ChatTemplateError(f"{shown(repr(name), 40)} cannot be a template option")
        try:
            json.dumps(value)
        except (TypeError, ValueError):
            raise ChatTemplateError(f"the template option {name} should be plain data (text, a number, "
                                    f"true/false, a list), not {type(value).__name__}") from None
        out[name] = value
    return out


def _marked(messages: list[dict[str, str]]) -> tuple[list[dict[str, str]], dict[str, tuple[int, str, str]],
                                                     dict[tuple[int, str], str]]:
    """The messages with a marker pair around each content and thinking (inside its outer whitespace,
    which templates trim), the marker table, and each marked piece's text."""
    markers: dict[str, tuple[int, str, str]] = {}
    pieces: dict[tuple[int, str], str] = {}
    out = []
    for index, message in enumerate(messages):
        copy = dict(message)
        for key, kind in (("content", "content"), ("thinking", "thinking")):
            text = message.get(key)
            core = text.strip() if isinstance(text, str) else ""
            if not core:
                continue
            k = len(pieces)
            opening, closing = chr(_MARK_BASE + 2 * k), chr(_MARK_BASE + 2 * k + 1)
            markers[opening], markers[closing] = (index, kind, "open"), (index, kind, "close")
            pieces[(index, kind)] = core
            lead = text[: len(text) - len(text.lstrip())]
            trail = text[len(text.rstrip()):]
            copy[key] = lead + opening + core + closing + trail
        out.append(copy)
    return out, markers, pieces


def _complete(plain: str, found: list[tuple[int, int, int, str]], pieces: dict[tuple[int, str], str]) -> list:
    """Ranges with a lone marker completed by walking the piece's text from it (a template cut the piece), less
    the whitespace at the cut: templates strip it there (Qwen's ``content.split('</think>')[-1].lstrip('\n')``),
    so a newline matched beyond it is the template's own, after its header."""
    out = []
    for start, stop, index, kind in found:
        piece = pieces.get((index, kind), "")
        if start >= 0 and stop < 0:
            j = 0
            while start + j < len(plain) and j < len(piece) and plain[start + j] == piece[j]:
                j += 1
            stop = start + j
            while stop > start and plain[stop - 1].isspace():
                stop -= 1
        elif stop >= 0 and start < 0:
            j = 0
            while stop - j > 0 and j < len(piece) and plain[stop - 1 - j] == piece[-1 - j]:
                j += 1
            start = stop - j
            while start < stop and plain[start].isspace():
                start += 1
        if 0 <= start < stop:
            out.append((start, stop, index, kind))
    return out


def _searched(plain: str, pieces: dict[tuple[int, str], str]) -> list[tuple[int, int, int, str]]:
    """Each piece's first place in the text after the previous one's (when the markers did not survive)."""
    out, position = [], 0
    for (index, kind), piece in sorted(pieces.items()):
        at = plain.find(piece, position)
        if at >= 0:
            out.append((at, at + len(piece), index, kind))
            position = at + len(piece)
    return out


def encode_chat(tokenizer: Any, template: ChatTemplate | None, messages: Any, add_generation_prompt: bool = True,
                **options: Any) -> ChatEncoding:
    """The conversation's ids as transformers' ``apply_chat_template(..., tokenize=True)`` gives them, and spans."""
    if template is None:
        raise ChatTemplateError("this model has no chat template (tokenizer_config.json, chat_template.jinja or "
                                "GGUF metadata); type a raw prompt instead")
    encode = getattr(tokenizer, "encode_offsets", None)
    if encode is None:
        raise ChatTemplateError(f"the {tokenizer.name} tokenizer cannot encode a chat template's text")
    messages = checked_messages(messages)
    options = checked_options(options)
    seen = template_messages(messages)
    marked, markers, pieces = _marked(messages)
    context = {"add_generation_prompt": bool(add_generation_prompt), **options}
    plain, with_marks = template.render([{**context, "messages": seen},
                                         {**context, "messages": template_messages(marked)}])
    found = content_ranges(plain, with_marks, markers)
    ranges = _complete(plain, found, pieces) if found is not None else _searched(plain, pieces)
    ids, offsets = encode(plain)
    if not ids:
        raise ChatTemplateError("the chat template rendered this conversation as no tokens")
    turn, kind = label_chars(plain, ranges, len(messages), bool(add_generation_prompt))
    turns, kinds = token_labels(offsets, turn, kind)
    control = getattr(tokenizer, "added_ids", frozenset()) | tokenizer.special_ids
    kinds = ["markup" if token in control else k for token, k in zip(ids, kinds)]  # control tokens are markup
    roles = tuple(m["role"] for m in messages) + (("assistant",) if add_generation_prompt else ())
    spans = ChatSpans(tuple(turns), tuple(kinds), roles, template.describe())
    return ChatEncoding(tuple(ids), plain, tuple(offsets), spans, tuple(messages), bool(add_generation_prompt),
                        options, template)
