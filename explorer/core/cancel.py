"""Abandoning work that nobody wants any more (Qt-free): the one cancellation type.

``Cancel`` is the flag: one thread sets it (a newer request, a Stop or Cancel button, a closing
window) and the work checks it at its natural boundaries: each block of a forward pass, each chunk
of a logit lens, each tensor of a load, each generated token, each batch of activation patching,
each head of an export. ``Cancelled`` is what a computation raises there when its result is no
longer wanted (not an error for the user); ``LoadCancelled`` (a load the user stopped) is one.

Every core function that can be cancelled takes a ``CancelLike``: a ``Cancel``, or for callers
that already hold one, a ``threading.Event`` or a ``() -> bool`` callable; ``asker`` and ``checker``
turn any of them into the two questions the work asks ("stop now?" and "raise if so").
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Union

from explorer.core.errors import ArgumentError, Cancelled  # noqa: F401  (Cancelled re-exported: its old home)


class Cancel:
    """A flag one thread sets and another checks; ``check()`` raises ``Cancelled`` once it is set."""

    __slots__ = ("_event",)

    def __init__(self) -> None:
        self._event = threading.Event()

    def set(self) -> None:
        self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the flag is set (or ``timeout`` seconds pass); whether it is set."""
        return self._event.wait(timeout)

    def check(self) -> None:
        if self._event.is_set():
            raise Cancelled()

    def __call__(self) -> bool:  # usable where a "cancelled?" callable is expected
        return self._event.is_set()


CancelLike = Union[Cancel, threading.Event, Callable[[], bool], None]  # noqa: UP007 (a runtime alias)


def asker(cancel: CancelLike) -> Callable[[], bool]:
    """A function that says whether ``cancel`` is set (always False for None)."""
    if cancel is None:
        return lambda: False
    if isinstance(cancel, (Cancel, threading.Event)) or hasattr(cancel, "is_set"):
        return cancel.is_set  # type: ignore[union-attr]
    if callable(cancel):
        return lambda: bool(cancel())
    raise ArgumentError(f"cancel must be a Cancel, a threading.Event, a callable or None, not a "
                        f"{type(cancel).__name__}")


def checker(cancel: CancelLike) -> Callable[[], None]:
    """A function that raises ``Cancelled`` when ``cancel`` says so (does nothing for None)."""
    if cancel is None:
        return lambda: None
    if isinstance(cancel, Cancel):
        return cancel.check
    ask = asker(cancel)

    def check() -> None:
        if ask():
            raise Cancelled()

    return check
