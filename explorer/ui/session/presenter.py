"""``Presenter``: the one owner of the trace on screen (after napari's ``components/_layer_slicer.py``).

Every trace source hands it a trace: a prompt pass (``present``, with the first panel's view already
prepared on the trace worker), a timeline step, a trace file or a remote trace (``present_trace``: the
first panel is prepared on a worker first), and a comparison (``present_comparison``: the second
model's result for the trace on screen). The presenter alone then

1. takes the panels' snapshots (``requests``: the shown panels, the focused one first, each panel's
   ``prepare`` bound to a copy of the selection and its options, on the GUI thread);
2. makes the trace the shown one (``frame``), clamps the selection to it and says so: ``shown(Frame)``;
3. draws the first shown panel at once; prepares the others on a worker (``prepare_panels``) and draws
   them one per turn of a 1 ms timer, each painted at once, so the window's own timers and repaints run
   between them (drawing while the others were still preparing was measured and dropped: on two cores
   it doubled the GUI thread's stalls); a panel behind another tab is marked stale and drawn when shown;
4. checks the numbers for NaN (``nonfinite``) on a worker of its own, beside the preparation;
5. holds the progressive lane while it draws and releases it once every shown panel is drawn;
6. says so: ``drawn(Frame)`` (with every shown panel's view), then ``checked(found)`` once the NaN check
   is known (None: all finite);

and newest wins throughout: a newer trace stops the older one's preparation and drawing. ``timed(Timing)``
says how long each step took (benchmarks/ui.py reads it). ``is_idle()`` is the one "nothing more is
coming" predicate (tests, docs scripts and benchmarks use it; ``wait_until_idle`` pumps events until it
holds): no source has work in flight, every shown panel is drawn and complete, the lane and the NaN check
are done.

The presenter knows panels only by id and through the panel contract (``snapshot`` and ``prepare``, made
into a ``PanelRequest``; ``set_trace``, ``repaint``, ``computing``, ``on_screen``, ``title``); the window
tells it which are shown (``set_panels``).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import shiboken6
from PySide6.QtCore import QCoreApplication, QEventLoop, QObject, Qt, QTimer, Signal

from explorer.core.cancel import Cancel, Cancelled
from explorer.core.analysis.layer_maps import max_maps
from explorer.ui.session import background
from explorer.ui.session.background import Newest
from explorer.ui.session.frame import COMPARISON, Frame, PanelRequest, Source, Timing
from explorer.ui.session.progressive import ProgressiveWork
from explorer.ui.session.selection import Selection

if TYPE_CHECKING:
    from explorer.core.trace import Trace
    from explorer.ui.session.workers import TraceResult

log = logging.getLogger(__name__)


class Idle(Protocol):
    def is_idle(self) -> bool: ...


def nonfinite(trace: Trace) -> Any:
    """Where the trace's numbers first stop being finite (None if they never do), computed once per trace."""
    from explorer.core.analysis.numerics import first_nonfinite

    return trace.memo(("nonfinite",), lambda: first_nonfinite(trace, check_logits=False))


def prepare_panels(trace: Trace, requests: Sequence[PanelRequest], cancel: Cancel) -> tuple[tuple[str, Any], ...]:
    """On a worker: each request's view, one at a time (``Cancelled`` between two once ``cancel`` is set).
    A prepare that fails is logged and its view is None: its panel then prepares when it draws."""
    views = []
    for request in requests:
        cancel.check()
        view = None
        try:
            view = request(trace)
        except Cancelled:
            raise
        except Exception:  # noqa: BLE001 - one panel's bug leaves the others drawn
            log.exception("preparing the %s panel failed", request.panel)
        views.append((request.panel, view))
    cancel.check()
    return tuple(views)


class Presenter(QObject):
    """The trace on screen and its drawing (see the module docstring)."""

    shown = Signal(object)    # Frame: the trace on screen now; its panels are drawn next
    drawn = Signal(object)    # Frame: every shown panel has drawn it (a comparison: the comparison view)
    checked = Signal(object)  # the NaN check of the drawn trace: a FirstNonfinite, or None when all is finite
    failed = Signal(str)      # a panel could not draw the trace (one line)
    timed = Signal(object)    # Timing

    def __init__(self, selection: Selection, lane: ProgressiveWork, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.selection, self.lane = selection, lane
        self.frame: Frame | None = None
        self.closed = False
        self._panels: dict[str, Any] = {}  # id -> panel, in the window's order
        self._shows: Callable[[str], bool] = lambda _id: True
        self._focus: str | None = None
        self._views: dict[str, Callable[[Any], None]] = {}  # views drawn from a comparison frame (the compare dock)
        self._sources: list[Idle] = []
        self._stale: set[str] = set()
        self._catching_up: set[str] = set()  # panels shown since the trace was drawn, being prepared (panel_shown)
        self._newest = Newest()  # the sources' traces: only the newest is shown
        self._first: background.Task | None = None  # a present_trace's first panel, being prepared
        self._drawing: Cancel | None = None  # set: the drawing of the shown frame is stale
        self._checking: Trace | None = None  # the trace whose numbers are being checked (a worker)
        self._applied: Trace | None = None  # the last trace every shown panel has drawn
        self._comparison: tuple | None = None  # a comparison that came before its trace's panels were drawn
        lane.timed.connect(self.timed)

    # --- what the window tells it -------------------------------------------------------------------
    def set_panels(self, panels: Sequence[tuple[str, Any]], shows: Callable[[str], bool]) -> None:
        """The window's panels (id, panel), in order, and whether the panel of an id is on screen now."""
        self._panels, self._shows = dict(panels), shows

    def add_view(self, name: str, draw: Callable[[Any], None]) -> None:
        """A view drawn from a comparison frame's ``extra`` (the window's compare dock)."""
        self._views[name] = draw

    def add_source(self, source: Idle) -> None:
        """A trace source (or other background work the window waits for): ``is_idle`` asks it too."""
        self._sources.append(source)

    def set_focus(self, panel_id: str | None) -> None:
        """The panel the user works in: prepared and drawn first when it is shown."""
        self._focus = panel_id

    @property
    def focus(self) -> str | None:
        return self._focus

    def panel(self, panel_id: str) -> Any:
        return self._panels.get(panel_id)

    def shown_ids(self) -> list[str]:
        """The ids of the panels on screen now, the focused one first."""
        ids = [pid for pid in self._panels if self._shows(pid)]
        if self._focus in ids:
            ids.remove(self._focus)
            ids.insert(0, self._focus)
        return ids

    def requests(self) -> tuple[PanelRequest, ...]:
        """Every shown panel's request, its snapshot taken now (on the GUI thread). A selection at the last
        position of the trace on screen is asked for as "the last position" (token None): it follows the
        end of the next trace (``follows_end``)."""
        at_end = self.follows_end(self.trace)
        return tuple(self._request(pid, at_end) for pid in self.shown_ids())

    def follows_end(self, trace: Trace | None) -> bool:
        """Whether the selected token is the last position of ``trace``: the selection then stays at the end
        when the next trace is longer or shorter (an edit at the end of the prompt; issue 42, item 2)."""
        return trace is not None and self.selection.token == trace.n_tokens - 1

    def _request(self, panel_id: str, at_end: bool = False) -> PanelRequest:
        panel = self._panels[panel_id]
        snapshot = panel.snapshot()
        if at_end and getattr(snapshot, "token", None) is not None:
            snapshot = dataclasses.replace(snapshot, token=None)  # prepared for the last position of the new trace
        return PanelRequest(panel_id, snapshot, panel.prepare)

    # --- what is shown -------------------------------------------------------------------------------
    @property
    def trace(self) -> Trace | None:
        return self.frame.trace if self.frame is not None else None

    @property
    def baseline(self) -> Trace | None:
        return self.frame.baseline if self.frame is not None else None

    @property
    def checking(self) -> bool:
        """Whether the shown trace's numbers are still being checked for NaN."""
        return self._checking is not None and self._checking is self.trace

    def is_idle(self) -> bool:
        """Nothing more is coming: no source has work in flight, the shown trace is drawn on every shown
        panel and complete (no view computing), the lane and the NaN check are done."""
        if any(not source.is_idle() for source in self._sources) or self._first is not None or self._catching_up:
            return False
        if self.frame is not None and self._applied is not self.frame.trace:
            return False
        return (not self.lane.busy and not self.checking
                and not any(p.computing() for p in self._panels.values() if p.on_screen))

    def wait_until_idle(self, timeout_s: float = 60.0) -> bool:
        """Handle events until ``is_idle`` (docs scripts and benchmarks; a test waits with qtbot.waitUntil).
        False if it did not happen within ``timeout_s``. Idleness changes only while this (the GUI) thread
        handles an event (a worker's result, a timer), so it sleeps in the event loop until the next one comes
        (WaitForMoreEvents) and asks again; a timer due at the deadline wakes it then."""
        deadline = time.perf_counter() + timeout_s
        wake = QTimer()
        wake.setSingleShot(True)
        wake.setTimerType(Qt.TimerType.PreciseTimer)
        try:
            while not self.is_idle():
                left = deadline - time.perf_counter()
                if left <= 0:
                    return False
                wake.start(min(2**31 - 1, max(1, math.ceil(left * 1000))))  # (again each turn: never a wait past it)
                QCoreApplication.processEvents(QEventLoop.ProcessEventsFlag.AllEvents
                                               | QEventLoop.ProcessEventsFlag.WaitForMoreEvents)
            return True
        finally:
            wake.stop()

    # --- the sources ---------------------------------------------------------------------------------
    def present(self, result: TraceResult, source: Source) -> None:
        """Show a prompt pass's trace (``result``: its baseline, the first panel's view from the trace worker
        and the other shown panels' requests of request time)."""
        if self.closed:
            return
        self._newest.drop()  # a step or file still preparing its first panel is older: never shown
        self._first = None
        frame = Frame(result.trace, result.baseline, dict(result.prepared), source, result.worker_seconds)
        self._show(frame, result.rest)

    def present_trace(self, trace: Trace, source: Source, baseline: Trace | None = None) -> None:
        """Show a trace made elsewhere (a timeline step, a trace file, a remote trace): its first shown
        panel is prepared on a worker (the GUI thread is free at once), then it is shown and drawn; a newer
        trace meanwhile wins."""
        if self.closed:
            return
        requests = self.requests()
        first, rest = requests[:1], requests[1:]
        started = time.perf_counter()

        def shown(prepared: tuple) -> None:
            self._first = None
            if not self.closed:
                seconds = time.perf_counter() - started
                self._show(Frame(trace, baseline, dict(prepared), source, seconds), rest)

        self._first = background.run(prepare_panels, trace, first, Cancel(), newest=self._newest,
                                     on_done=shown, on_error=lambda _failure: shown(()))

    def present_comparison(self, trace: Trace, result: Any, label: str = "") -> None:
        """A comparison of ``trace`` (the one on screen) with a second model: the comparison views draw
        ``result`` and ``drawn`` says so (a frame of the same trace, ``source.kind`` COMPARISON), once the
        panels have drawn the trace."""
        frame = self.frame
        if self.closed or frame is None or frame.trace is not trace:
            return
        if self._applied is not trace:  # the panels first: the comparison follows their ``drawn``
            self._comparison = (trace, result, label)
            return
        self._comparison = None
        start = time.perf_counter()
        for name, draw in self._views.items():
            try:
                draw(result)
            except Exception as exc:  # noqa: BLE001 - the panels stay
                log.exception("the %s view failed to draw the comparison", name)
                self.failed.emit(f"{name}: {type(exc).__name__}: {exc}")
            self.timed.emit(Timing("draw", name, start, time.perf_counter()))
        source = Source(COMPARISON, frame.source.text, frame.source.request_id, frame.source.ids, label,
                        frame.source.requested_at)
        self.drawn.emit(dataclasses.replace(frame, source=source, extra=result))

    # --- drawing ---------------------------------------------------------------------------------------
    def _show(self, frame: Frame, rest: Sequence[PanelRequest]) -> None:
        trace = frame.trace
        previous = self.trace
        self.frame = frame
        self.lane.discard_parked()  # a trace is shown: views stopped for an older one are stale
        cfg = trace.config
        if previous is not None and previous is not trace and self.follows_end(previous):
            self.selection.set_token(trace.n_tokens - 1)  # the end followed (as the snapshots were taken)
        self.selection.clamp(cfg.n_layers, max_maps(cfg), trace.n_tokens)  # a hybrid: its widest layer's heads
        start = time.perf_counter()
        self.shown.emit(frame)
        self.timed.emit(Timing("shown", "", start, time.perf_counter()))
        if self.frame is not frame or self.closed:
            return
        shown = self.shown_ids()
        self._stale = {pid for pid in self._panels if pid not in shown}
        if self._drawing is not None:
            self._drawing.set()
        cancel = self._drawing = Cancel()
        self.lane.hold(True)  # the expensive views start once every panel is drawn (_drawn)
        first, others = shown[:1], shown[1:]
        views = dict(frame.views)
        for pid in first:
            self._draw(frame, pid, cancel, views.get(pid))
        asked = {request.panel: request for request in rest}
        requests = [asked.get(pid) or self._request(pid) for pid in others]  # newly shown: a fresh one
        background.run(prepare_panels, trace, requests, cancel,
                       on_done=lambda done: self._draw_rest(frame, others, cancel, {**views, **dict(done)}),
                       on_error=lambda _failure: self._draw_rest(frame, others, cancel, views))
        self._check_numbers(trace)

    def _draw_rest(self, frame: Frame, ids: list[str], cancel: Cancel, views: dict[str, Any]) -> None:
        """Draw the prepared panels one per turn of the event loop (a 1 ms timer, not a posted call,
        so the window's own timers run in between), then say the frame is drawn."""
        if cancel.is_set():
            return
        if ids:
            self._draw(frame, ids[0], cancel, views.get(ids[0]))
            QTimer.singleShot(1, self, lambda: self._draw_rest(frame, ids[1:], cancel, views))
        else:
            self._drawn(frame, cancel, views)

    def _draw(self, frame: Frame, panel_id: str, cancel: Cancel, view: Any) -> None:
        if frame is not self.frame or cancel.is_set():
            return
        panel = self._panels.get(panel_id)
        if panel is None:
            return
        start = time.perf_counter()
        self._set_trace(panel_id, frame.trace, view)
        end = time.perf_counter()
        panel.repaint()  # now: left to the window's next paint, every panel would be painted in one long turn
        self.timed.emit(Timing("draw", panel_id, start, end, time.perf_counter()))

    def _set_trace(self, panel_id: str, trace: Trace, view: Any) -> None:
        panel = self._panels[panel_id]
        try:
            panel.set_trace(trace, view)
        except Exception as exc:  # noqa: BLE001 - a drawing bug in one panel leaves the others working
            log.exception("panel %s failed to show the trace", panel_id)
            self.failed.emit(f"{panel.title}: {type(exc).__name__}: {exc}")

    def _drawn(self, frame: Frame, cancel: Cancel, views: dict[str, Any]) -> None:
        if self._drawing is cancel:
            self.lane.hold(False)  # the expensive views may start now
        if frame is not self.frame or cancel.is_set():
            return
        trace = frame.trace
        self._applied = trace
        done = dataclasses.replace(frame, views=views)
        self.frame = done
        self.timed.emit(Timing("drawn", "", frame.source.requested_at, time.perf_counter()))
        self.drawn.emit(done)
        if not self.checking and self.trace is trace:  # checked already (kept with the trace); else its end says it
            self.checked.emit(nonfinite(trace))
        if self._comparison is not None and self._comparison[0] is trace:
            self.present_comparison(*self._comparison)

    def _check_numbers(self, trace: Trace) -> None:
        """The NaN check on a worker of its own, beside the panels' preparation (after it, on the same
        worker, it held the drawing of every panel but the first back: ~0.1 s at 1024 tokens)."""
        self._checking = trace

        def done(found: object) -> None:
            if self._checking is trace:
                self._checking = None
            if not self.closed and trace is self.trace and self._applied is trace and shiboken6.isValid(self):
                self.checked.emit(found)

        def failed(failure: background.Failure) -> None:
            if self._checking is trace:
                self._checking = None
            log.error("checking the numbers failed: %s", failure.message)

        background.run(nonfinite, trace, on_done=done, on_error=failed)

    def panel_shown(self, panel_id: str) -> None:
        """The panel of ``panel_id`` came on screen: if it missed the shown trace (behind a tab), it is
        prepared on a worker and drawn."""
        if self.closed or panel_id not in self._stale or self.frame is None:
            return
        self._stale.discard(panel_id)
        trace = self.frame.trace
        self._catching_up.add(panel_id)  # not idle until it has drawn (or failed to prepare) the shown trace

        def draw(view: object) -> None:
            if not self.closed and trace is self.trace:
                self._set_trace(panel_id, trace, view)

        background.run(self._request(panel_id), trace, on_done=draw, on_error=lambda _failure: draw(None),
                       on_finished=lambda: self._catching_up.discard(panel_id))

    def shutdown(self) -> None:
        """The window closes: whatever is still prepared or drawn stops, nothing more is shown."""
        self.closed = True
        self._newest.drop()
        self._first = None
        if self._drawing is not None:
            self._drawing.set()
