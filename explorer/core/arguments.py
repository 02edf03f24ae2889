"""Arguments of the Python API checked at the door: a wrong type or value is one ``ArgumentError`` line naming
the argument (never an ``AttributeError`` from deep inside, or an internal error)."""

from __future__ import annotations

import operator
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from explorer.core.errors import ArgumentError, PromptError
from explorer.core.text import shown


def _kind(value: object) -> str:
    """What ``value`` is, for a message: its type (an article before it) and, for a plain value, the value."""
    if value is None:
        return "None"
    name = type(value).__name__
    article = "an" if name[:1].lower() in "aeiou" else "a"
    plain = isinstance(value, (str, bytes, int, float, list, tuple, dict, set))
    return f"{article} {name} ({shown(repr(value), 40)})" if plain else f"{article} {name}"


def instance(value: Any, cls: type | tuple[type, ...], name: str, what: str, none: bool = False) -> Any:
    """``value`` when it is an instance of ``cls`` (or None, with ``none``)."""
    if value is None and none:
        return value
    if not isinstance(value, cls):
        raise ArgumentError(f"{name} must be {what}, not {_kind(value)}")
    return value


def text(value: Any, name: str = "text") -> str:
    return instance(value, str, name, "text (a str)")


def whole(value: Any, name: str, lowest: int | None = None, none: bool = False) -> int | None:
    """``value`` as an int (a bool or a float is refused), at least ``lowest`` when given."""
    if value is None and none:
        return None
    try:
        if isinstance(value, bool):
            raise TypeError
        number = operator.index(value)
    except TypeError:
        raise ArgumentError(f"{name} must be a whole number, not {_kind(value)}") from None
    if lowest is not None and number < lowest:
        raise ArgumentError(f"{name} must be at least {lowest}, not {shown(number, 40)}")
    return number


def path(value: Any, name: str) -> Path:
    """A file or folder path (str or os.PathLike)."""
    return Path(instance(value, (str, os.PathLike), name, "a path (a str or a pathlib.Path)"))


def function(value: Any, name: str, none: bool = True) -> Callable | None:
    if value is None and none:
        return None
    if not callable(value):
        raise ArgumentError(f"{name} must be a function{' or None' if none else ''}, not {_kind(value)}")
    return value


def sequence_of(value: Any, cls: type, name: str, what: str) -> tuple:
    """A list or tuple whose items are ``cls`` instances (a str is not a sequence of anything here)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (Sequence, set, frozenset)):
        raise ArgumentError(f"{name} must be a list of {what}, not {_kind(value)}")
    for item in value:
        if not isinstance(item, cls):
            raise ArgumentError(f"{name} must be a list of {what}; it holds {_kind(item)}")
    return tuple(value)


def names_in(value: Any, known: Sequence[str], name: str) -> frozenset[str]:
    """A set of names, each one of ``known`` (a bare str is not a set of names)."""
    if isinstance(value, str) or not isinstance(value, (set, frozenset, list, tuple)):
        raise ArgumentError(f"{name} must be a set of names such as {set(known[:2])}, not {_kind(value)}")
    unknown = sorted(str(v) for v in set(value) - set(known))
    if unknown:
        raise ArgumentError(f"unknown {name} {shown(unknown, 80)}; known: {', '.join(known)}")
    return frozenset(value)


def numbers(value: Any, name: str) -> frozenset[int]:
    """A set of whole numbers from 0 (layer numbers, say)."""
    if isinstance(value, str) or not isinstance(value, (set, frozenset, list, tuple, range)):
        raise ArgumentError(f"{name} must be a set of whole numbers, not {_kind(value)}")
    return frozenset(whole(v, name, 0) for v in value)


def checked_ids(ids: Any, vocab_size: int, n_ctx: int) -> list[int]:
    """Token ids as a list of ints in the vocabulary, no longer than the context; else one ``PromptError`` line
    (an id of 10**9 is not an IndexError deep in the embedding, 1.7 is not silently token 1)."""
    if isinstance(ids, (str, bytes)) or not isinstance(ids, Sequence) and not hasattr(ids, "__iter__"):
        raise PromptError(f"token ids should be a list of whole numbers, not a {type(ids).__name__}")
    out = []
    for i, value in enumerate(ids):
        try:
            if isinstance(value, bool):
                raise TypeError
            token = operator.index(value)
        except TypeError:
            raise PromptError(f"token id {i} is {shown(repr(value), 40)}, not a whole number") from None
        if not 0 <= token < vocab_size:
            raise PromptError(f"token id {shown(token, 40)} (at {i}) is outside the vocabulary (0 to {vocab_size - 1})")
        out.append(token)
    if not out:
        raise PromptError("no token ids: give at least one")
    if len(out) > n_ctx:
        raise PromptError(f"{len(out)} token ids are more than the model's context of {n_ctx}")
    return out
