"""Abandoning work that nobody wants any more (Qt-free).

A long computation (a forward pass, a logit lens over every layer) checks a ``Cancel`` at its
natural boundaries (each block, each chunk of positions) and raises ``Cancelled`` when it is set,
so stale work stops within one layer instead of running to the end.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class Cancelled(Exception):
    """Raised inside a computation whose result is no longer wanted (not an error for the user)."""


class Cancel:
    """A flag one thread sets and another checks; ``check()`` raises ``Cancelled`` once it is set."""

    __slots__ = ("_event",)

    def __init__(self) -> None:
        self._event = threading.Event()

    def set(self) -> None:
        self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()

    def check(self) -> None:
        if self._event.is_set():
            raise Cancelled()

    def __call__(self) -> bool:  # usable where a "cancelled?" callable is expected
        return self._event.is_set()


def checker(cancel: Cancel | Callable[[], bool] | None) -> Callable[[], None]:
    """A function that raises ``Cancelled`` when ``cancel`` says so (does nothing for None)."""
    if cancel is None:
        return lambda: None
    if isinstance(cancel, Cancel):
        return cancel.check

    def check() -> None:
        if cancel():
            raise Cancelled()

    return check
