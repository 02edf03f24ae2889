"""Untrusted text (a file's name, a tensor's name, a config value) as it may appear in one message line.

``shown`` escapes every character that is not printable (control characters, line breaks, ANSI
escape sequences, bidirectional overrides) the way Python's ``repr`` does, so a name can neither
clear the terminal nor split the line, and cuts it to ``limit`` characters, saying how much was left out.
``capped_text`` and ``capped_token`` cut longer text read from files (a prompt, a token) before a widget
lays it out.
"""

from __future__ import annotations

LIMIT = 160  # a name inside a message
MESSAGE_LIMIT = 600  # a whole message line


def _escape(c: str) -> str:
    if c in "\n\r\t":
        return {"\n": "\\n", "\r": "\\r", "\t": "\\t"}[c]
    code = ord(c)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def shown(text: object, limit: int = LIMIT) -> str:
    """``text`` (str() of anything) on one line, non-printable characters escaped, at most ``limit`` characters."""
    text = text if isinstance(text, str) else str(text)
    head = text[: limit * 4 + 1]  # never escape a megabyte to show a few hundred characters
    out = "".join(c if c.isprintable() else _escape(c) for c in head)
    if len(out) <= limit and len(head) == len(text):
        return out
    return f"{out[:limit]}… ({len(text)} characters)"


# --- text from files that reaches a widget ---------------------------------------------------------
# Laying out a long line costs Qt time that grows faster than its length (a 1 MB one-line prompt took 90 s
# in the prompt editor, a 10 MB one froze the window; a 50 MB model name froze a label). Every string read
# from a trace file, a checkpoint or a GGUF's metadata is cut to these sizes, with a note, before it is shown.

TOKEN_LIMIT = 1_000  # a token's display text (real tokens are a few characters; long whitespace runs ~100)
PROMPT_LIMIT = 200_000  # a prompt read from a file, in all (a 16k-token context is ~70,000 characters)
LINE_LIMIT = 50_000  # one line of it (laid out in about 0.2 s)


def capped_token(text: str) -> str:
    """A token's display text, cut to ``TOKEN_LIMIT`` characters with a note of its length."""
    return text if len(text) <= TOKEN_LIMIT else f"{text[:TOKEN_LIMIT]}… ({len(text):,} characters)"


def capped_text(text: str, what: str = "text") -> str:
    """``text`` as it is, or cut where it passes ``PROMPT_LIMIT`` characters or a line passes ``LINE_LIMIT``,
    with a note on a line of its own saying how much is shown (cutting it again changes nothing)."""
    room = PROMPT_LIMIT - 200  # a cut text and its note fit the limit
    end, pos = (len(text) if len(text) <= PROMPT_LIMIT else room), 0
    while pos < end:
        newline = text.find("\n", pos, end)
        line_end = end if newline < 0 else newline
        if line_end - pos > LINE_LIMIT:
            end = min(pos + LINE_LIMIT, room)
            break
        pos = line_end + 1
    if end >= len(text):
        return text
    return f"{text[:end]}\n… ({what} cut here: the first {end:,} of its {len(text):,} characters are shown)"
