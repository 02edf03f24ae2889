"""A conversation as the user gives it: a list of ``{"role", "content"}`` messages, checked.

Roles: ``system``, ``developer`` (gpt-oss's instructions), ``user``, ``assistant``. ``content`` is text.
An assistant message may carry its reasoning as ``thinking`` (also read under ``reasoning_content`` and
``reasoning``, the names templates use). Anything else is one ``ChatError`` line naming the message.
The JSON file of ``--chat`` is read with a size cap.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from explorer.core.errors import ExplorerError
from explorer.core.text import shown

ROLES = ("system", "developer", "user", "assistant")
REASONING_KEYS = ("thinking", "reasoning_content", "reasoning")
MAX_MESSAGES = 2048
MAX_CHARS = 4_000_000  # all the messages' text together: far beyond any context window
MAX_FILE_BYTES = 16 * 2**20


class ChatError(ExplorerError):
    """A conversation that cannot be used (wrong JSON, role, type or size): one line naming the problem."""


def checked_messages(value: Any) -> list[dict[str, str]]:
    """The conversation as plain dicts ``{"role", "content"[, "thinking"]}``, or one ``ChatError`` line."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise ChatError(f"a conversation is a list of messages, not {type(value).__name__}")
    if not value:
        raise ChatError("the conversation is empty: give at least one message")
    if len(value) > MAX_MESSAGES:
        raise ChatError(f"the conversation has {len(value)} messages, more than {MAX_MESSAGES}")
    out, total = [], 0
    for i, message in enumerate(value):
        where = f"message {i + 1}"
        if not isinstance(message, dict):
            raise ChatError(f"{where} is a {type(message).__name__}, not an object with a role and a content")
        unknown = [k for k in message if k not in ("role", "content", *REASONING_KEYS)]
        if unknown:
            raise ChatError(f"{where} has a key {shown(str(unknown[0]), 40)!r} that is not role, content or thinking")
        role, content = message.get("role"), message.get("content")
        if not isinstance(role, str) or role not in ROLES:
            raise ChatError(f"{where}: the role {shown(repr(role), 40)} is not one of {', '.join(ROLES)}")
        if not isinstance(content, str):
            raise ChatError(f"{where}: the content should be text, not {type(content).__name__}")
        clean = {"role": role, "content": content}
        reasoning = [message[k] for k in REASONING_KEYS if message.get(k) is not None]
        if reasoning:
            if role != "assistant":
                raise ChatError(f"{where}: only an assistant message can carry thinking")
            if not isinstance(reasoning[0], str):
                raise ChatError(f"{where}: the thinking should be text, not {type(reasoning[0]).__name__}")
            clean["thinking"] = reasoning[0]
        for text in clean.values():
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:
                raise ChatError(f"{where} contains a lone surrogate, which is not a character") from None
            total += len(text)
        out.append(clean)
    if total > MAX_CHARS:
        raise ChatError(f"the conversation has {total:,} characters, more than {MAX_CHARS:,}")
    return out


def template_messages(messages: list[dict[str, str]]) -> list[dict[str, str]]:
    """The messages as a template sees them: the reasoning under every name templates read
    (transformers' ``_alias_reasoning_fields``: ``thinking`` and ``reasoning_content``)."""
    out = []
    for m in messages:
        if "thinking" in m:
            m = {"thinking": m["thinking"], **m, "reasoning_content": m["thinking"]}
        out.append(dict(m))
    return out


def read_chat_file(path: str | Path) -> list[dict[str, str]]:
    """A ``--chat`` file: JSON, a list of messages (or ``{"messages": [...]}``), checked."""
    path = Path(path)
    try:
        if not path.is_file():
            raise ChatError(f"{shown(path)}: no such file")
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise ChatError(f"{shown(path)} is {size / 2**20:.0f} MB, more than the {MAX_FILE_BYTES // 2**20} MB "
                            "a conversation file may have")
        raw = path.read_bytes()
    except OSError as exc:
        raise ChatError(f"cannot read {shown(path)}: {exc.strerror}") from None
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ChatError(f"{shown(path)} is not valid JSON: {shown(str(exc), 120)}") from None
    except RecursionError:
        raise ChatError(f"{shown(path)} is nested too deeply to be a conversation") from None
    if isinstance(data, dict) and set(data) == {"messages"}:
        data = data["messages"]
    try:
        return checked_messages(data)
    except ChatError as exc:
        raise ChatError(f"{shown(path.name)}: {exc}") from None


def write_chat_file(path: str | Path, messages: list[dict[str, str]]) -> None:
    """The conversation as JSON (atomically), readable by ``read_chat_file``."""
    from explorer.core.export import write_text

    write_text(path, json.dumps(checked_messages(messages), indent=2, ensure_ascii=False) + "\n")
