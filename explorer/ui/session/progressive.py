"""Progressive, demand-driven views: a panel's expensive work runs after its cheap drawing, in the
background, only while the panel is shown, newest selection first, and never lands on a stale view.

After a forward pass the window applies the trace at once: each shown panel draws what is cheap and,
for each expensive view (the logit lens grid, a neuron's vocabulary effect, statistics over all
heads), shows "computing…" and calls ``Panel.later(key, compute, apply)``. Those jobs go to one
background lane (``ProgressiveWork``), which runs one at a time (so they never fight each other or
the next forward pass for the CPU), highest priority first, each through ``compute(check)`` on a
worker thread and ``apply(value)`` on the GUI thread.

A job is *stale*, and is cancelled (``check()`` raises ``Cancelled`` at its next boundary) and never
applied, when:

* its panel shows another trace (a newer edit), or the same ``key`` was asked for again (a newer
  selection: the lens column of another token, another neuron);
* its panel is hidden (a tab behind another one): the job waits, computing nothing, and runs again
  when the panel is shown;
* a new trace is requested (``park_all``) or the window closes (``shutdown``). A requested trace may
  never come (its pass fails: the shown trace stays): the jobs it stopped are kept, parked, and run
  again then (``resume_parked``); they are forgotten once a trace is shown (``discard_parked``).

``apply`` runs only when the panel still shows the job's trace and the job is still the newest for
its key, so a view never shows numbers of an older prompt or selection.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import shiboken6
from PySide6.QtCore import QCoreApplication, QEvent, QObject, Signal

from explorer.core.cancel import Cancel
from explorer.ui.session import background
from explorer.ui.session.frame import Timing

if TYPE_CHECKING:
    from explorer.core.trace import Trace

log = logging.getLogger(__name__)

_order = itertools.count()
START_EVENT = QEvent.Type(QEvent.registerEventType())  # "start the next job" (ProgressiveWork._start_after_paint)
AFTER_PAINT_PRIORITY = -2  # below Qt.LowEventPriority (-1), at which Qt posts a window's repaint


@dataclass(eq=False)
class Job:
    """One expensive view of one panel: ``compute(check)`` on the worker, ``apply(value)`` on the GUI thread."""

    owner: object  # the panel (with a ``trace`` attribute: the trace it shows)
    key: Any
    trace: Trace | None
    compute: Callable[[Callable[[], None]], Any]
    apply: Callable[[Any], None]
    priority: int = 0  # lower runs first
    cancel: Cancel = field(default_factory=Cancel)
    failed: Callable[[str], None] | None = None  # ``compute`` raised: the message (GUI thread; if still current)
    order: int = field(default_factory=lambda: next(_order))

    def current(self) -> bool:
        """Whether the result still belongs on screen: the panel shows this job's trace."""
        return getattr(self.owner, "trace", None) is self.trace and not self.cancel.is_set()


class ProgressiveWork(QObject):
    """One background lane for the panels' expensive views (see the module docstring).

    Signals: ``busy_changed(bool)``, ``applied(object)`` (a job's result reached its panel), ``timed(Timing)``
    (a job's "compute" on the worker and its "apply" on the GUI thread).
    """

    busy_changed = Signal(bool)
    applied = Signal(object)
    timed = Signal(object)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._queue: list[Job] = []
        self._running: Job | None = None
        self._closed = False
        self._held: set[str] = set()  # why no job starts now ("drawing": a new trace's panels; "forward": a pass runs)
        self._start_posted = False  # a start is posted (see _start_after_paint)
        self._parked: list[Job] = []  # stopped by a request whose trace has not come (see park_all)
        self.computed: list[tuple[Any, Any]] = []  # (owner, key) of every job computed: tests read it

    # --- asking ------------------------------------------------------------------------------
    def submit(self, job: Job) -> Job:
        """Queue ``job``; an older job of the same panel and key is cancelled (it is stale)."""
        if self._closed:
            job.cancel.set()
            return job
        self._drop(lambda j: j.owner is job.owner and j.key == job.key)
        self._parked = [j for j in self._parked if not (j.owner is job.owner and j.key == job.key)]  # older
        self._queue.append(job)
        self._start_after_paint()
        return job

    def _start_after_paint(self) -> None:
        """Start the next job once the events now queued are done, the window's repaint included:
        a job asked for inside a selection switch would otherwise start its worker thread while the
        switch's handlers and the repaint still run on the GUI thread, and the two share the
        interpreter lock (the switch's handlers took ~14.5 against ~10 ms of CPU with the start deferred).
        Qt posts the repaint (``UpdateRequest``) at ``Qt.LowEventPriority``; this event is posted
        below it, so it comes after."""
        if self._start_posted or self._running is not None or self._closed:
            return
        self._start_posted = True
        QCoreApplication.postEvent(self, QEvent(START_EVENT), AFTER_PAINT_PRIORITY)

    def event(self, event: QEvent) -> bool:
        if event.type() == START_EVENT:
            self._start_posted = False
            self._next()
            return True
        return super().event(event)

    def cancel_owner(self, owner: Any) -> list[Job]:
        """Cancel every job of ``owner``; returns the ones that had not finished (to run again later)."""
        return self._drop(lambda j: j.owner is owner)

    def cancel_owner_key(self, owner: Any, key: Any) -> list[Job]:
        return self._drop(lambda j: j.owner is owner and j.key == key)

    def cancel_all(self) -> None:
        self._parked = []
        self._drop(lambda j: True)

    def park_all(self) -> None:
        """A new trace is requested: stop every job now (their views are stale once it is shown, and
        the forward pass needs the cores), keeping a fresh copy of each unfinished one for
        ``resume_parked``: if the pass fails, the shown trace stays and its views must still complete
        (else a panel says "computing…" for ever)."""
        for job in sorted(self._drop(lambda j: True), key=lambda j: (j.priority, j.order)):  # first runs first
            self._parked.append(Job(job.owner, job.key, job.trace, job.compute, job.apply, job.priority,
                                    failed=job.failed))

    def resume_parked(self) -> None:
        """The requested trace will not come (its pass failed): run the parked jobs whose panel still
        shows their trace and has asked for nothing newer under the same key. A panel hidden since
        keeps them until it is shown (its ``defer``)."""
        parked, self._parked = self._parked, []
        for job in parked:
            if not job.current() or any(j.owner is job.owner and j.key == job.key for j in self.pending()):
                continue
            if getattr(job.owner, "on_screen", True) is False and hasattr(job.owner, "defer"):
                job.owner.defer(job)
            else:
                self.submit(job)

    def discard_parked(self) -> None:
        """A trace is shown: the parked jobs (an older trace's) are stale."""
        self._parked = []

    def shutdown(self) -> None:
        """The window closes: cancel everything and accept nothing more."""
        self._closed = True
        self.cancel_all()

    def hold(self, held: bool, reason: str = "drawing") -> None:
        """While held (for any ``reason``), queued jobs wait and none starts. The window holds the lane
        while it prepares and draws a new trace's panels ("drawing"), so that the GUI thread and the
        preparation do not share two cores with the expensive views too (the views start as soon as
        every panel is drawn); the session holds it while a forward pass runs ("forward"): the views
        of the trace on screen are stale once it ends, and on two cores they would slow it down."""
        if held:
            self._held.add(reason)
        else:
            self._held.discard(reason)
            self._next()

    @property
    def held(self) -> bool:
        return bool(self._held)

    @property
    def busy(self) -> bool:
        return self._running is not None or bool(self._queue)

    def pending(self, owner: Any | None = None) -> list[Job]:
        jobs = ([self._running] if self._running is not None else []) + self._queue
        return [j for j in jobs if not j.cancel.is_set() and (owner is None or j.owner is owner)]

    # --- running -----------------------------------------------------------------------------
    def _drop(self, which: Callable[[Job], bool]) -> list[Job]:
        dropped = [j for j in self._queue if which(j)]
        self._queue = [j for j in self._queue if not which(j)]
        if self._running is not None and which(self._running) and not self._running.cancel.is_set():
            dropped.append(self._running)
        for job in dropped:
            job.cancel.set()
        if not self.busy and shiboken6.isValid(self):  # (at exit Python may free a lane's C++ side first)
            self.busy_changed.emit(False)
        return dropped

    def _next(self) -> None:
        if self._running is not None or self._closed or self._held:
            return
        self._queue = [j for j in self._queue if not j.cancel.is_set()]
        if not self._queue:
            return
        self._queue.sort(key=lambda j: (j.priority, j.order))
        job = self._queue.pop(0)
        self._running = job
        self.busy_changed.emit(True)
        background.run(_run, job, on_done=lambda got, j=job: self._on_returned(j, got),
                       on_error=lambda failure, j=job: self._on_failed(j, failure.message),
                       on_finished=lambda j=job: self._on_finished(j))

    def _on_failed(self, job: Job, message: str) -> None:
        log.error("computing %r failed: %s", job.key, message)
        if job.failed is not None and job.current():
            try:
                job.failed(message)
            except Exception:
                log.exception("reporting the failure of %r failed", job.key)

    def _on_returned(self, job: Job, got: tuple[Any, float, float]) -> None:
        value, start, end = got
        self.computed.append((job.owner, job.key))
        self.timed.emit(Timing("compute", job_name(job), start, end))
        if not job.current():
            return
        t0 = time.perf_counter()
        try:
            job.apply(value)
        except Exception:
            log.exception("applying %r failed", job.key)
            return
        finally:
            self.timed.emit(Timing("apply", job_name(job), t0, time.perf_counter()))
        self.applied.emit(job)

    def _on_finished(self, job: Job) -> None:
        if self._running is job:
            self._running = None
        self._next()
        if not self.busy:
            self.busy_changed.emit(False)


def job_name(job: Job) -> str:
    """A job as the benchmarks print it: its panel's title and its key."""
    key = job.key if isinstance(job.key, tuple) else (job.key,)
    return f"{getattr(job.owner, 'title', type(job.owner).__name__)} {' '.join(map(str, key))}"


def _run(job: Job) -> tuple[Any, float, float]:
    """On the lane's worker (started through ``background.run``: below the GUI thread): the value and
    when its computation started and ended."""
    start = time.perf_counter()
    job.cancel.check()
    value = job.compute(job.cancel.check)
    return value, start, time.perf_counter()


_LANE: ProgressiveWork | None = None


def lane() -> ProgressiveWork:
    """The application's one lane (made on first use, on the GUI thread)."""
    global _LANE
    if _LANE is None:
        _LANE = ProgressiveWork()
    return _LANE
