"""How a token is shown, in every panel, the generation pane and the exported pictures: one set of glyphs.

A token's *display string* (``Tokenizer.display``, a trace's ``tokens``) is its text where its bytes
are whole UTF-8 characters and ``\\xNN`` for each byte that is only part of one (``bytes_display``).
Shown on screen, whitespace becomes a visible glyph (``GLYPHS``: " cat" and "cat" must not look the
same), other control characters are escaped, an empty string is ``EMPTY``:

* ``visible(text)``         the whole text with the glyphs (token chips, the generation pane's tooltips);
* ``short(text, n)``        the same, cut to ``n`` characters with an ellipsis (heatmap cells, chart labels);
* ``quoted(text, n)``       ``short`` in single quotes, for a token named inside a sentence (titles, tooltips);
* ``vocab_text(tok, id)``   a vocabulary id's display string, ``#id`` where there is none (no tokenizer,
                            a padded vocabulary row); ``vocab_quoted`` the same, quoted.

Data exports (CSV, NPY labels) keep the display strings as they are: they are data, not pictures.
Qt-free; any thread.
"""

from __future__ import annotations

from typing import Protocol

GLYPHS = {" ": "\u00b7", "\n": "\u21b5", "\t": "\u21e5", "\r": "\u240d", "\u00a0": "\u237d"}  # · ↵ ⇥ ␍ ⍽
LINE_GLYPHS = {c: GLYPHS[c] for c in "\n\t\r"}  # what a label that is not a token (an axis tick) gets
EMPTY = "\u2205"  # ∅
ELLIPSIS = "\u2026"
QUOTED_CHARS = 24


class Displays(Protocol):
    def display(self, token_id: int) -> str: ...


def bytes_display(b: bytes) -> str:
    """Text where the bytes are valid UTF-8; ``\\xNN`` for each byte that is only part of a character."""
    return b.decode("utf-8", errors="backslashreplace")


def visible(text: str) -> str:
    """``text`` with whitespace as visible glyphs and other control characters as ``\\xNN``."""
    return "".join(GLYPHS.get(c, c if c >= " " and c != "\x7f" else f"\\x{ord(c):02x}") for c in text)


def cut(text: str, max_chars: int) -> str:
    """``text`` cut to ``max_chars`` characters, the last one an ellipsis when it was longer."""
    return text if len(text) <= max_chars else text[:max(1, max_chars - 1)] + ELLIPSIS


def short(text: str, max_chars: int = 12) -> str:
    """A token for a small place: ``visible`` and ``cut``; ``EMPTY`` for an empty string."""
    return cut(visible(text), max_chars) if text else EMPTY


def quoted(text: str, max_chars: int = QUOTED_CHARS) -> str:
    """A token named in a sentence: ``'·cat'``."""
    return "'" + (cut(visible(text), max_chars) if text else "") + "'"


def vocab_text(tokenizer: Displays | None, token_id: int) -> str:
    """A vocabulary id's display string; ``#id`` without a tokenizer or for an id it cannot show."""
    if tokenizer is not None:
        try:
            return tokenizer.display(int(token_id))
        except Exception:  # noqa: BLE001 - an id the tokenizer cannot show (padded vocabulary rows)
            pass
    return f"#{token_id}"


def vocab_quoted(tokenizer: Displays | None, token_id: int, max_chars: int = QUOTED_CHARS) -> str:
    """``quoted(vocab_text(...))``, but ``#id`` unquoted where there is no display string."""
    text = vocab_text(tokenizer, token_id)
    return text if text == f"#{token_id}" else quoted(text, max_chars)
