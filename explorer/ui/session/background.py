"""One door for background work: every worker of the app starts through ``run`` (after napari's
``_qt/qthreading.py``, one thin wrapper over superqt's ``create_worker``).

``run(func, *args, on_done=..., on_error=..., newest=...)`` runs ``func`` on a pool thread (``own_thread``:
a thread of its own, for work that waits beside the pool's, such as compare's second model) and, on the
worker thread, before ``func``:

* lowers the CPU priority of the workers below the GUI thread (``priority.background``);
* takes ``func`` and its arguments out of the worker, so that a finished worker still referenced by
  the thread pool holds none of them (a closed window's trace, say);

and on the GUI thread, after it:

* applies newest-wins: with ``newest`` (a ``Newest``), the call takes the next request id and its
  ``on_done`` / ``on_yield`` / ``on_error`` run only while that id is still the newest (a stale result
  never lands); ``on_finished`` always runs (bookkeeping);
* maps an error to a ``Failure``: one line for the user (``message``), the traceback when it is a bug
  (``details``); a ``Cancelled`` (a stale computation stopped at a boundary) is no error: it goes to
  ``on_cancelled`` if given, else nowhere;
* cuts the worker's connections once it has finished and its receivers ran (``lifetime.release``): the
  closures connected to it (over a panel, a window) are not kept alive by it.
"""

from __future__ import annotations

import inspect
import logging
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from superqt.utils import create_worker

from explorer.core.cancel import Cancelled
from explorer.core.errors import ExplorerError, InternalError
from explorer.ui.session.lifetime import release, release_when_finished
from explorer.ui.session.priority import background

log = logging.getLogger(__name__)


def error_message(exc: BaseException) -> str:
    """What the user reads: an ExplorerError's own message; anything else is an internal error (a bug)."""
    if isinstance(exc, ExplorerError):
        return str(exc)
    return str(InternalError.wrap(exc))


def one_line(exc: BaseException) -> str:
    """``error_message`` on one line (a status bar, a label)."""
    return " ".join(error_message(exc).split())


def error_details(exc: BaseException) -> str:
    """The traceback, for a dialog's details pane (empty for an ExplorerError that is not an internal error)."""
    if isinstance(exc, ExplorerError) and not isinstance(exc, InternalError):
        return ""
    return "".join(traceback.format_exception(exc))


@dataclass(frozen=True)
class Failure:
    """A worker's error, as the user reads it."""

    message: str  # one line (``one_line``)
    details: str  # the traceback when it is a bug, else ""
    exc: BaseException

    @classmethod
    def of(cls, exc: BaseException) -> Failure:
        return cls(one_line(exc), error_details(exc), exc)


class Newest:
    """Request ids for newest-wins: each request takes the next id; a result is applied only while its id
    is still the newest (``current``). ``drop()`` makes whatever is in flight stale."""

    __slots__ = ("id",)

    def __init__(self) -> None:
        self.id = 0

    def next(self) -> int:
        self.id += 1
        return self.id

    def current(self, request_id: int) -> bool:
        return request_id == self.id

    def drop(self) -> None:
        self.id += 1


class Task:
    """A started (or, with ``start=False``, ready) background call: ``request_id`` (0 without ``newest``),
    ``running`` until its worker finished; ``release()`` cuts it off (nothing it still sends arrives)."""

    def __init__(self, worker: Any, request_id: int, own_thread: bool) -> None:
        self.worker, self.request_id, self.own_thread = worker, request_id, own_thread
        self.running = False
        self.started = False

    def start(self) -> Task:
        if self.started:
            return self
        self.started = self.running = True
        if self.own_thread:
            _OWN.add(self)
            threading.Thread(target=self.worker.run, name="background", daemon=True).start()
        else:
            self.worker.start()
        return self

    def release(self) -> None:
        release(self.worker)

    def _finished(self) -> None:
        self.running = False
        _OWN.discard(self)


_OWN: set[Task] = set()  # tasks on threads of their own, kept referenced while they run


def _call(box: list, lower: bool) -> Any:
    func, args, kwargs = box
    box.clear()  # the worker no longer holds them: only this frame does, until the call returns
    if lower:
        background()
    return func(*args, **kwargs)


def _call_generator(box: list, lower: bool):
    func, args, kwargs = box
    box.clear()
    if lower:
        background()
    return (yield from func(*args, **kwargs))


def run(func: Callable[..., Any], *args: Any, on_done: Callable[[Any], None] | None = None,
        on_error: Callable[[Failure], None] | None = None, on_yield: Callable[[Any], None] | None = None,
        on_cancelled: Callable[[], None] | None = None, on_finished: Callable[[], None] | None = None,
        newest: Newest | None = None, request_id: int | None = None, lower: bool = True, own_thread: bool = False, start: bool = True,
        **kwargs: Any) -> Task:
    """Run ``func(*args, **kwargs)`` in the background (see the module docstring); the callbacks run on
    the GUI thread. ``newest``: newest-wins, under ``request_id`` (an id its owner took from it earlier,
    e.g. for a request that waited) or the next one. ``start=False``: the caller starts it (``Task.start``)."""
    if request_id is None:
        request_id = newest.next() if newest is not None else 0
    name = getattr(func, "__qualname__", type(func).__name__)  # not ``func``: a bound method would hold its object
    box = [func, args, kwargs]
    body = _call_generator if inspect.isgeneratorfunction(func) else _call
    worker = create_worker(body, box, lower, _start_thread=False, _ignore_errors=True)
    task = Task(worker, request_id, own_thread)

    def current() -> bool:
        return newest is None or newest.current(request_id)

    if on_yield is not None:
        worker.yielded.connect(lambda value: on_yield(value) if current() else None)
    if on_done is not None:
        worker.returned.connect(lambda value: on_done(value) if current() else None)

    def errored(exc: BaseException) -> None:
        if isinstance(exc, Cancelled):  # a stale computation stopped (LoadCancelled too: the user's Cancel)
            if on_cancelled is not None and current():
                on_cancelled()
            return
        if not current():
            return
        failure = Failure.of(exc)
        if failure.details:
            log.error("background task %s failed", name, exc_info=exc)
        if on_error is not None:
            on_error(failure)

    worker.errored.connect(errored)
    # a closure, not the bound method: PySide holds a bound method's object weakly, and nothing else may hold the task
    worker.finished.connect(lambda: task._finished())
    if on_finished is not None:
        worker.finished.connect(on_finished)
    release_when_finished(worker)
    return task.start() if start else task
