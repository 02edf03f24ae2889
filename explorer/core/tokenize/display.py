"""How a token is drawn as a chip: visible whitespace, raw bytes, colours and a tooltip.

Qt-free so that it is tested headless; ``explorer.ui.widgets.token_chips`` only paints what this
module decides.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from explorer.core.display.tokens import EMPTY, GLYPHS, bytes_display, visible
from explorer.core.tokenize.base import Tokenizer

# Whitespace becomes a visible glyph so that " cat" and "cat" look different (explorer.core.display.tokens).
WHITESPACE_GLYPHS = GLYPHS
# Two alternating pastel backgrounds make token boundaries visible; partial-UTF-8 tokens get
# their own colour and are drawn as \xNN bytes.
CHIP_COLOURS = ("#dbeafe", "#fde7c7")
PARTIAL_COLOUR = "#f3d4f5"
SPECIAL_COLOUR = "#d9f2d9"
# What each colour means, for the legend under the chips (the two pastels carry no meaning of their own)
CHIP_LEGEND = ((CHIP_COLOURS[0], CHIP_COLOURS[1], "one token, the next token: the colours alternate only to show "
                "where one token ends and the next begins"),
               (SPECIAL_COLOUR, None, "a special token (such as end of text)"),
               (PARTIAL_COLOUR, None, "part of a character: raw bytes shown as \\xNN"))


def visible_whitespace(text: str) -> str:
    """``text`` with spaces, newlines and tabs replaced by visible glyphs (``tokens.visible``)."""
    return visible(text)


def byte_hex(data: bytes) -> str:
    """``b" ca"`` -> ``"20 63 61"``."""
    return " ".join(f"{b:02X}" for b in data)


def is_partial_utf8(data: bytes) -> bool:
    """True when the bytes are not whole UTF-8 characters (a piece of an emoji, say)."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def display_bytes(display: str) -> bytes:
    """The inverse of ``bytes_display``: UTF-8 of the text, ``\\xNN`` escapes read back as bytes.

    Only used where no tokenizer is at hand (a trace alone). A token whose own text contains a
    literal backslash-x-hex sequence would be misread; tokenizers give the exact bytes instead.
    """
    out = bytearray()
    i = 0
    while i < len(display):
        if display.startswith("\\x", i) and i + 4 <= len(display):
            try:
                out.append(int(display[i + 2:i + 4], 16))
                i += 4
                continue
            except ValueError:
                pass
        out += display[i].encode("utf-8")
        i += 1
    return bytes(out)


@dataclass(frozen=True)
class ChipView:
    """Everything needed to draw one token chip."""

    position: int
    token_id: int
    label: str  # what the chip shows: visible whitespace, or \xNN bytes
    data: bytes  # the token's raw bytes
    partial: bool  # bytes that are not whole UTF-8 characters
    special: bool  # a special token such as <|endoftext|>
    colour: str

    @property
    def tooltip(self) -> str:
        text = self.data.decode("utf-8", errors="replace")
        kind = " (partial UTF-8: not a whole character)" if self.partial else \
            " (special token)" if self.special else ""
        return (f"position {self.position}\nid {self.token_id}{kind}\n"
                f"bytes {byte_hex(self.data) or '(none)'}\nstring {text!r}")


def chip_colour(position: int, partial: bool = False, special: bool = False) -> str:
    if partial:
        return PARTIAL_COLOUR
    if special:
        return SPECIAL_COLOUR
    return CHIP_COLOURS[position % len(CHIP_COLOURS)]


def chip_views(token_ids: Sequence[int], token_bytes: Sequence[bytes],
               special_ids: frozenset[int] | set[int] = frozenset()) -> list[ChipView]:
    """One ``ChipView`` per token, from ids and each token's raw bytes."""
    if len(token_ids) != len(token_bytes):
        raise ValueError(f"{len(token_ids)} ids but {len(token_bytes)} byte strings")
    chips = []
    for position, (token_id, data) in enumerate(zip(token_ids, token_bytes)):
        partial = is_partial_utf8(data)
        special = int(token_id) in special_ids
        label = visible_whitespace(bytes_display(data) if partial else data.decode("utf-8"))
        chips.append(ChipView(position, int(token_id), label or EMPTY, bytes(data), partial, special,
                              chip_colour(position, partial, special)))
    return chips


def tokenizer_chips(tokenizer: Tokenizer, token_ids: Sequence[int]) -> list[ChipView]:
    """Chips for ``token_ids`` with the exact bytes from ``tokenizer``."""
    ids = [int(i) for i in token_ids]
    return chip_views(ids, [tokenizer.token_bytes(i) for i in ids], tokenizer.special_ids)


def display_chips(token_ids: Sequence[int], displays: Sequence[str]) -> list[ChipView]:
    """Chips from a trace's ids and display strings alone (bytes read back from the displays)."""
    return chip_views([int(i) for i in token_ids], [display_bytes(d) for d in displays])


def one_hot(token_id: int, vocab_size: int) -> np.ndarray:
    """The one-hot row vector of ``token_id`` over the vocabulary (float32, shape (V,))."""
    if not 0 <= token_id < vocab_size:
        raise ValueError(f"token id {token_id} is outside the vocabulary [0, {vocab_size})")
    vector = np.zeros(vocab_size, dtype=np.float32)
    vector[token_id] = 1.0
    return vector
