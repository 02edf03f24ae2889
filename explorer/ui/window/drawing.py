"""How the main window puts a new trace on its panels (a mixin of ``MainWindow``).

The first shown panel's ``prepare`` ran on the trace worker, so it is drawn at once; the other shown
panels' prepares run on a background thread (``workers.prepare_panels``, with the snapshots taken
when the trace was requested), then those panels are drawn one per turn of a 1 ms timer, each painted
at once, so the window's own timers and repaints run between them. The panels' expensive views (the
progressive lane) wait until every panel is drawn. A newer trace stops the rest. A panel behind
another tab is marked stale and drawn when it is shown. Drawing while the others were still
preparing was measured and dropped: on two cores it doubled the GUI thread's stalls.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from PySide6.QtCore import QTimer
from superqt.utils import create_worker

from explorer.core.cancel import Cancel, Cancelled
from explorer.ui.window.docks import PanelDock
from explorer.ui.panels.base import Panel
from explorer.ui.session.workers import (
    TraceResult,
    nonfinite,
    prepare_panels,
    run_in_background,
)

log = logging.getLogger(__name__)


class TraceDrawing:
    """The trace -> panels part of ``MainWindow`` (it provides ``docks``, ``trace``, ``selection``,
    ``prompt``, ``status``, ``progressive``, ``controller``, ``trace_applied`` and the state set in
    its ``__init__``: ``_drawing``, ``_drawing_worker``, ``_stale``, ``_closing``)."""

    def _shows(self, dock: PanelDock) -> bool:
        # a tab behind another one is "visible" to Qt; its dock's visibilityChanged says it is not on screen
        return not dock.isHidden() and (not self.isVisible() or (dock.isVisible() and dock.panel.on_screen))

    def _preparers(self) -> list:
        """Every shown panel's ``prepare``, bound to its snapshot taken now, on the GUI thread."""
        return [dock.panel.preparer() for dock in self.docks if self._shows(dock)]

    def _on_trace_ready(self, result: TraceResult) -> None:
        trace = result.trace
        self.trace = trace
        cfg = trace.config
        self.selection.clamp(cfg.n_layers, cfg.n_heads, trace.n_tokens)
        shown = []
        for dock in self.docks:
            if self._shows(dock):
                shown.append(dock)
                self._stale.discard(dock)
            else:
                self._stale.add(dock)
        self.prompt.show_tokens(trace.n_tokens, trace.meta.truncated_from)
        self._draw_panels(result, shown)

    def _draw_panels(self, result: TraceResult, docks: list[PanelDock]) -> None:
        """Draw the shown panels: the first one's preparation ran on the trace worker, so it is drawn
        at once; the others' prepares run on a background thread (``workers.prepare_panels``, with
        the snapshots of request time), then those panels are drawn one per turn of the event loop,
        each painted at once, so the window repaints and answers between them. (Drawing while the
        others prepare was tried: on two cores the GUI thread then stalls twice as long.) The
        expensive views wait until every panel is drawn. A newer trace stops the rest."""
        trace = result.trace
        if trace is not self.trace:  # a newer trace arrived meanwhile: it draws the panels
            return
        if self._drawing is not None:
            self._drawing.set()
        cancel = self._drawing = Cancel()
        self.progressive.hold(True)  # the expensive views start once every panel is drawn (_drawn)
        first, rest = docks[:1], docks[1:]
        for dock in first:
            self._draw_prepared(trace, dock, cancel)
        prepared = {p.func.__self__: p for p in result.rest}  # Panel.preparer(): partial(panel.prepare, snapshot=…)
        preparers = [prepared.get(dock.panel) or dock.panel.preparer() for dock in rest]  # newly shown: a fresh one
        worker = create_worker(prepare_panels, trace, preparers, cancel, _start_thread=False, _ignore_errors=True)
        worker.returned.connect(lambda _none: self._draw_rest(result, rest, cancel))
        worker.errored.connect(lambda exc: None if isinstance(exc, Cancelled) else
                               (log.error("preparing the panels failed", exc_info=exc),
                                self._draw_rest(result, rest, cancel)))
        self._drawing_worker = worker  # keep it referenced while it runs
        worker.start()

    def _draw_rest(self, result: TraceResult, docks: list[PanelDock], cancel: Cancel) -> None:
        """Draw the prepared panels one per turn of the event loop (a 1 ms timer, not a posted call,
        so the window's own timers run in between), then say the trace is applied."""
        if docks:
            self._draw_prepared(result.trace, docks[0], cancel)
            QTimer.singleShot(1, lambda: self._draw_rest(result, docks[1:], cancel))
        else:
            self._drawn(result, cancel)

    def _draw_prepared(self, trace: Any, dock: PanelDock, cancel: Cancel) -> None:
        if trace is not self.trace or cancel.is_set():
            return
        self._show_panel(dock.panel, trace)
        # paint it now: left to the window's next paint, every panel would be painted in one long turn
        dock.panel.repaint()

    def _drawn(self, result: TraceResult, cancel: Cancel) -> None:
        """Every shown panel has the trace: say so (status bar, ``trace_applied``)."""
        trace = result.trace
        if self._drawing is cancel:
            self.progressive.hold(False)  # the expensive views may start now
        if trace is not self.trace or cancel.is_set():
            return
        self.last_update_seconds = time.perf_counter() - result.request.requested_at
        self.status.show_trace(trace.n_tokens, trace.meta.forward_seconds, self.last_update_seconds)
        found = nonfinite(trace)
        self.status.set_warning(None if found is None else f"The model's numbers are not finite: {found.describe()}")
        self.trace_applied.emit(trace)
        self._trim_pending = True
        self._release_memory()

    def _release_memory(self, _busy: bool = False) -> None:
        """The previous trace is dropped: hand its freed blocks back to the OS (explorer.core.memory)
        once the panels' background work is done too (trimming holds the allocator's lock, so not
        while the GUI thread draws), off the GUI thread, so a long session's memory stays flat."""
        if self._closing or self.progressive.busy or not self.controller.is_idle():
            self._trim_pending = True  # again when the lane goes idle (busy_changed)
            return
        if _busy or not getattr(self, "_trim_pending", True):
            return
        self._trim_pending = False
        from explorer.core.memory import release_freed_memory

        run_in_background(release_freed_memory)

    def _show_panel(self, panel: Panel, trace: Any) -> None:
        try:
            panel.set_trace(trace)
        except Exception as exc:  # noqa: BLE001 - a drawing bug in one panel leaves the others working
            log.exception("panel %s failed to show the trace", panel.title)
            self.status.notice(f"{panel.title}: {type(exc).__name__}: {exc}")

    def _on_dock_visible(self, dock: PanelDock, visible: bool) -> None:
        dock.panel.set_on_screen(visible)
        if not visible or dock not in self._stale or self.trace is None:
            return
        trace = self.trace
        self._stale.discard(dock)

        def apply(_: object) -> None:
            if trace is self.trace:
                self._show_panel(dock.panel, trace)

        run_in_background(dock.panel.preparer(), trace, on_done=apply)

    # --- generation pane (explorer.ui.generation, docks.add_generation_dock) -------------------
