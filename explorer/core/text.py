"""Untrusted text (a file's name, a tensor's name, a config value) as it may appear in one message line.

``shown`` escapes every character that is not printable (control characters, line breaks, ANSI
escape sequences, bidirectional overrides) the way Python's ``repr`` does, so a name can neither
clear the terminal nor split the line, and cuts it to ``limit`` characters, saying how much was left out.
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
