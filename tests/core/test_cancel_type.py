"""The one cancellation type: every form a caller may hold answers the same two questions."""

from __future__ import annotations

import threading

import pytest

from explorer.core.cancel import Cancel, Cancelled, asker, checker
from explorer.core.errors import ExplorerError, LoadCancelled


@pytest.mark.parametrize("kind", ["cancel", "event", "callable"])
def test_every_form_of_cancel_is_asked_and_checked_alike(kind):
    flag = Cancel()
    held = {"cancel": flag, "event": threading.Event(), "callable": flag.is_set}[kind]
    ask, check = asker(held), checker(held)
    assert ask() is False
    check()  # not set: nothing raised
    (held if kind == "event" else flag).set()
    assert ask() is True
    with pytest.raises(Cancelled):
        check()


def test_none_is_never_cancelled_and_a_load_cancelled_is_a_cancelled():
    assert asker(None)() is False
    checker(None)()
    assert issubclass(LoadCancelled, Cancelled) and issubclass(LoadCancelled, ExplorerError)
    with pytest.raises(TypeError, match="cancel must be"):
        asker(3)  # type: ignore[arg-type]
    flag = Cancel()
    assert flag.wait(0) is False
    flag.set()
    assert flag.wait(0) is True and flag() is True
