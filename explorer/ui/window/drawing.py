"""What the window does around the presenter's drawing (``PanelDrawing``, a collaborator of ``MainWindow``).

The presenter (``explorer.ui.session.presenter``) owns the trace on screen and draws it on the panels;
this part of the window tells it which panels are on screen (a dock not hidden, its tab raised, the
window shown) and shows what it says: the token count when a trace is shown, the status bar's timings
and memory once every panel has drawn it, the NaN warning once the numbers are checked, a panel's
drawing error as a notice. It also hands freed memory back to the OS once the app has been idle a while.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import shiboken6
from PySide6.QtCore import QObject, QTimer, Signal

from explorer.core.budget import global_budget
from explorer.ui.session import background
from explorer.ui.session.frame import COMPARISON, Frame
from explorer.ui.session.session import Session
from explorer.ui.window.chrome.prompt_editor import PromptEditor
from explorer.ui.window.chrome.status_bar import StatusBar
from explorer.ui.window.docks import PanelDock

TRIM_IDLE_MS = 1000  # freed memory goes back to the OS once the app has been idle this long (release_memory)


class PanelDrawing(QObject):
    """The window's side of the drawing (see the module docstring).

    Signals: ``applied(Trace)`` once every shown panel has the trace (the presenter's ``drawn`` of a
    panels' frame). ``window_visible()`` says whether the window is on screen (hidden, every dock
    counts as shown)."""

    applied = Signal(object)

    def __init__(self, session: Session, docks: Sequence[PanelDock], prompt: PromptEditor, status: StatusBar,
                 window_visible: Callable[[], bool], parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.session, self.docks, self.prompt, self.status = session, list(docks), prompt, status
        self.presenter = session.presenter
        self._window_visible = window_visible
        self._by_id = {dock.panel_id: dock for dock in self.docks}
        self.last_update_seconds: float | None = None
        self._trim_pending = False
        # the trim waits for the app to be idle: glibc's malloc_trim holds each arena's lock while it trims it,
        # and the GUI thread's own allocations wait for it (20-220 ms after a 1024-token edit, benchmarks/ui.py)
        self._trim_timer = QTimer(self)
        self._trim_timer.setSingleShot(True)
        self._trim_timer.setInterval(TRIM_IDLE_MS)
        self._trim_timer.timeout.connect(self._trim_now)
        self.closed = False
        self.presenter.set_panels([(dock.panel_id, dock.panel) for dock in self.docks], self._shows_id)
        self.presenter.shown.connect(self._on_shown)
        self.presenter.drawn.connect(self._on_drawn)
        self.presenter.checked.connect(self._show_nonfinite)
        self.presenter.failed.connect(status.notice)
        session.controller.requested.connect(self._on_requested)
        session.controller.busy_changed.connect(self._on_lane_busy)  # the pass's end, if it came after the drawing
        session.progressive.busy_changed.connect(self._on_lane_busy)
        for dock in self.docks:
            dock.visibilityChanged.connect(lambda visible, d=dock: self._on_dock_visible(d, visible))

    def shows(self, dock: PanelDock) -> bool:
        # a tab behind another one is "visible" to Qt; its dock's visibilityChanged says it is not on screen
        return not dock.isHidden() and (not self._window_visible() or (dock.isVisible() and dock.panel.on_screen))

    def _shows_id(self, panel_id: str) -> bool:
        return self.shows(self._by_id[panel_id])

    def shutdown(self) -> None:
        """The window closes: whatever is still being prepared or drawn stops."""
        self.closed = True
        self.presenter.shutdown()

    def _on_shown(self, frame: Frame) -> None:
        trace = frame.trace
        self.prompt.show_tokens(trace.n_tokens, trace.meta.truncated_from)

    def _on_drawn(self, frame: Frame) -> None:
        """Every shown panel has the trace: the status bar says so, ``applied``, then the memory trim."""
        if self.closed or frame.source.kind == COMPARISON:
            return
        trace = frame.trace
        self.last_update_seconds = time.perf_counter() - frame.source.requested_at
        self.status.show_trace(trace.n_tokens, trace.meta.forward_seconds, self.last_update_seconds)
        self.status.show_memory(global_budget().describe())
        self.applied.emit(trace)
        self._trim_pending = True
        self.release_memory()

    def _show_nonfinite(self, found: Any) -> None:
        if not self.closed and shiboken6.isValid(self):  # (not valid: the window was deleted without close())
            self.status.set_warning(None if found is None else
                                    f"The model's numbers are not finite: {found.describe()}")

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

        background.run(release_freed_memory)

    def _on_dock_visible(self, dock: PanelDock, visible: bool) -> None:
        if self.closed or not shiboken6.isValid(self.session):
            # a window dropped without close(): Python may free its Session (and the lane in it) before
            # the window's widgets, whose docks then say they are hidden ("Signal source has been deleted")
            return
        dock.panel.set_on_screen(visible)
        if visible:
            self.presenter.panel_shown(dock.panel_id)
