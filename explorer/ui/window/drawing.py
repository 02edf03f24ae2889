"""How the window puts the Session's new trace on its panels (``PanelDrawing``, a collaborator of
``MainWindow``).

The first shown panel's ``prepare`` ran on the trace worker, so it is drawn at once; the other shown
panels' prepares run on a background thread (``workers.prepare_panels``, with the snapshots taken
when the trace was requested; the NaN check, ``nonfinite``, on a worker of its own beside them), then
those panels are drawn one per turn of a 1 ms timer, each painted at once, so the window's own timers
and repaints run between them. The panels' expensive views (the progressive lane) wait until every
panel is drawn. A newer trace stops the rest. A panel behind
another tab is marked stale and drawn when it is shown. Drawing while the others were still
preparing was measured and dropped: on two cores it doubled the GUI thread's stalls.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import shiboken6
from PySide6.QtCore import QObject, QTimer, Signal
from superqt.utils import create_worker

from explorer.core.budget import global_budget
from explorer.core.cancel import Cancel, Cancelled
from explorer.core.trace import Trace
from explorer.ui.panels.base import Panel, PanelView
from explorer.ui.session.session import Session
from explorer.ui.session.workers import (
    Preparer,
    TraceResult,
    nonfinite,
    prepare_panels,
    run_in_background,
)
from explorer.ui.session.lifetime import release, release_when_finished
from explorer.ui.window.chrome.prompt_editor import PromptEditor
from explorer.ui.window.chrome.status_bar import StatusBar
from explorer.ui.window.docks import PanelDock

log = logging.getLogger(__name__)

TRIM_IDLE_MS = 1000  # freed memory goes back to the OS once the app has been idle this long (release_memory)


def _by_panel(prepared: object) -> dict[Panel, PanelView | None]:
    """Each panel's prepared view, from (``Panel.preparer()``, what it returned) pairs."""
    pairs = prepared if isinstance(prepared, (list, tuple)) else ()
    return {prepare.func.__self__: view if isinstance(view, PanelView) else None for prepare, view in pairs}


class PanelDrawing(QObject):
    """Draws the Session's traces on the docks' panels (see the module docstring).

    Signals: ``applied(Trace)`` once every shown panel has the trace.
    ``window_visible()`` says whether the window is on screen (hidden, every dock counts as shown)."""

    applied = Signal(object)

    def __init__(self, session: Session, docks: Sequence[PanelDock], prompt: PromptEditor, status: StatusBar,
                 window_visible: Callable[[], bool], parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.session, self.docks, self.prompt, self.status = session, list(docks), prompt, status
        self._window_visible = window_visible
        self.trace: Trace | None = None
        self.last_update_seconds: float | None = None
        self._drawing: Cancel | None = None  # set: the panels' drawing of the last trace is stale
        self._drawing_worker: Any = None
        self._stale: set[PanelDock] = set()
        self._trim_pending = False
        # the trim waits for the app to be idle: glibc's malloc_trim holds each arena's lock while it trims it,
        # and the GUI thread's own allocations wait for it (20-220 ms after a 1024-token edit, benchmarks/ui.py)
        self._trim_timer = QTimer(self)
        self._trim_timer.setSingleShot(True)
        self._trim_timer.setInterval(TRIM_IDLE_MS)
        self._trim_timer.timeout.connect(self._trim_now)
        session.controller.requested.connect(self._on_requested)
        session.controller.busy_changed.connect(self._on_lane_busy)  # the pass's end, if it came after the drawing
        self._checking: Trace | None = None  # the trace whose numbers are being checked for NaN (a worker)
        self._applied: Trace | None = None  # the last trace every shown panel has drawn
        self.closed = False
        session.preparers = self.preparers
        session.trace_ready.connect(self._on_trace_ready)
        session.progressive.busy_changed.connect(self._on_lane_busy)
        for dock in self.docks:
            dock.visibilityChanged.connect(lambda visible, d=dock: self._on_dock_visible(d, visible))

    def shows(self, dock: PanelDock) -> bool:
        # a tab behind another one is "visible" to Qt; its dock's visibilityChanged says it is not on screen
        return not dock.isHidden() and (not self._window_visible() or (dock.isVisible() and dock.panel.on_screen))

    def preparers(self) -> list[Preparer]:
        """Every shown panel's ``prepare``, bound to its snapshot taken now, on the GUI thread."""
        return [dock.panel.preparer() for dock in self.docks if self.shows(dock)]

    def shutdown(self) -> None:
        """The window closes: whatever is still being prepared or drawn stops."""
        self.closed = True
        if self._drawing is not None:
            self._drawing.set()
        release(self._drawing_worker)
        self._drawing_worker = None

    def _on_trace_ready(self, result: TraceResult) -> None:
        if self.closed:
            return
        trace = result.trace
        self.trace = trace
        shown = []
        for dock in self.docks:
            if self.shows(dock):
                shown.append(dock)
                self._stale.discard(dock)
            else:
                self._stale.add(dock)
        self.prompt.show_tokens(trace.n_tokens, trace.meta.truncated_from)
        self._draw_panels(result, shown)

    def _draw_panels(self, result: TraceResult, docks: list[PanelDock]) -> None:
        """The first shown panel at once, the others' prepares in the background, then one per turn."""
        trace = result.trace
        if trace is not self.trace:  # a newer trace arrived meanwhile: it draws the panels
            return
        if self._drawing is not None:
            self._drawing.set()
        cancel = self._drawing = Cancel()
        self.session.progressive.hold(True)  # the expensive views start once every panel is drawn (_drawn)
        first, rest = docks[:1], docks[1:]
        views = _by_panel(result.prepared)  # the view the trace worker prepared for the first panel
        for dock in first:
            self._draw_prepared(trace, dock, cancel, views.get(dock.panel))
        prepared = {p.func.__self__: p for p in result.rest}  # Panel.preparer(): partial(panel.prepare, snapshot=…)
        preparers = [prepared.get(dock.panel) or dock.panel.preparer() for dock in rest]  # newly shown: a fresh one
        worker = create_worker(prepare_panels, trace, preparers, cancel, _start_thread=False, _ignore_errors=True)
        worker.returned.connect(lambda done: self._draw_rest(result, rest, cancel, _by_panel(done)))
        worker.errored.connect(lambda exc: None if isinstance(exc, Cancelled) else
                               (log.error("preparing the panels failed", exc_info=exc),
                                self._draw_rest(result, rest, cancel, {})))
        worker.finished.connect(self._prepared)
        release_when_finished(worker)
        self._drawing_worker = worker  # keep it referenced while it runs
        worker.start()
        self._check_numbers(trace)

    @property
    def checking(self) -> bool:
        """Whether the shown trace's numbers are still being checked for NaN (the status bar says so when done)."""
        return self._checking is not None and self._checking is self.trace

    def _check_numbers(self, trace: Trace) -> None:
        """The NaN check (``nonfinite``) on a worker of its own, beside the panels' preparation: after it, on
        the same worker, it held the drawing of every panel but the first back (~0.1 s at 1024 tokens)."""
        self._checking = trace

        def done(found: object) -> None:
            if self._checking is trace:
                self._checking = None
            if not self.closed and trace is self.trace and self._applied is trace and shiboken6.isValid(self):
                self._show_nonfinite(found)  # (not valid: the window was deleted without close())

        def failed(exc: BaseException) -> None:
            if self._checking is trace:
                self._checking = None
            log.error("checking the numbers failed", exc_info=exc)

        held = [trace]  # the worker lets go of the trace once it has it: a finished worker that PySide's thread
        # pool still references would otherwise keep a closed window's trace alive through its arguments

        def check() -> object:
            return nonfinite(held.pop())

        run_in_background(check, on_done=done, on_error=failed)

    def _show_nonfinite(self, found: object) -> None:
        self.status.set_warning(None if found is None else f"The model's numbers are not finite: {found.describe()}")

    def _prepared(self) -> None:
        # a finished worker held here would hold this object through its signals' connections
        if self._drawing_worker is not None and self.sender() is self._drawing_worker.signals:
            self._drawing_worker = None

    def _draw_rest(self, result: TraceResult, docks: list[PanelDock], cancel: Cancel,
                   views: dict[Panel, PanelView | None]) -> None:
        """Draw the prepared panels one per turn of the event loop (a 1 ms timer, not a posted call,
        so the window's own timers run in between), then say the trace is applied."""
        if cancel.is_set():
            return
        if docks:
            self._draw_prepared(result.trace, docks[0], cancel, views.get(docks[0].panel))
            QTimer.singleShot(1, self, lambda: self._draw_rest(result, docks[1:], cancel, views))
        else:
            self._drawn(result, cancel)

    def _draw_prepared(self, trace: Trace, dock: PanelDock, cancel: Cancel, view: PanelView | None) -> None:
        if trace is not self.trace or cancel.is_set():
            return
        self.show_panel(dock.panel, trace, view)
        # paint it now: left to the window's next paint, every panel would be painted in one long turn
        dock.panel.repaint()

    def _drawn(self, result: TraceResult, cancel: Cancel) -> None:
        """Every shown panel has the trace: say so (status bar, ``applied``)."""
        trace = result.trace
        if self._drawing is cancel:
            self.session.progressive.hold(False)  # the expensive views may start now
        if trace is not self.trace or cancel.is_set():
            return
        self.last_update_seconds = time.perf_counter() - result.request.requested_at
        self.status.show_trace(trace.n_tokens, trace.meta.forward_seconds, self.last_update_seconds)
        self.status.show_memory(global_budget().describe())
        self._applied = trace
        if self._checking is not trace:  # checked already (kept with the trace); else the check's end says it
            self._show_nonfinite(nonfinite(trace))
        self.applied.emit(trace)
        self._trim_pending = True
        self.release_memory()

    def _on_lane_busy(self, busy: bool) -> None:
        if not busy:
            self.release_memory()

    def release_memory(self) -> None:
        """The previous trace is dropped: hand its freed blocks back to the OS (explorer.core.memory)
        once the panels' background work is done too and nothing new was asked for ``TRIM_IDLE_MS``
        (trimming holds the allocator's lock, so not while the GUI thread draws or the next edit's trace
        arrives), off the GUI thread, so a long session's memory stays flat."""
        if self.closed or self.session.progressive.busy or not self.session.controller.is_idle():
            self._trim_pending = True  # again when the lane goes idle (busy_changed)
            return
        if not self._trim_pending:
            return
        self._trim_timer.start()  # (again) TRIM_IDLE_MS from now, if nothing new starts meanwhile

    @property
    def trim_waiting(self) -> bool:
        """Whether a trim waits for the app to stay idle (a new request puts it off again)."""
        return self._trim_timer.isActive()

    def _on_requested(self, _request_id: int) -> None:
        self._trim_timer.stop()  # a new trace comes: the trim waits for its work to end (release_memory again)

    def _trim_now(self) -> None:
        if self.closed or self.session.progressive.busy or not self.session.controller.is_idle():
            return  # still pending: the lane's or the next trace's end asks again
        if not self._trim_pending:
            return
        self._trim_pending = False
        from explorer.core.memory import release_freed_memory

        run_in_background(release_freed_memory)

    def show_panel(self, panel: Panel, trace: Trace, view: PanelView | None = None) -> None:
        try:
            panel.set_trace(trace, view)
        except Exception as exc:  # noqa: BLE001 - a drawing bug in one panel leaves the others working
            log.exception("panel %s failed to show the trace", panel.title)
            self.status.notice(f"{panel.title}: {type(exc).__name__}: {exc}")

    def _on_dock_visible(self, dock: PanelDock, visible: bool) -> None:
        if self.closed or not shiboken6.isValid(self.session):
            # a window dropped without close(): Python may free its Session (and the lane in it) before
            # the window's widgets, whose docks then say they are hidden ("Signal source has been deleted")
            return
        dock.panel.set_on_screen(visible)
        if not visible or dock not in self._stale or self.trace is None:
            return
        trace = self.trace
        self._stale.discard(dock)

        def apply(view: object) -> None:
            if trace is self.trace and not self.closed:
                self.show_panel(dock.panel, trace, view if isinstance(view, PanelView) else None)

        run_in_background(dock.panel.preparer(), trace, on_done=apply)
