"""The panel contract.

A panel is a QWidget that shows one aspect of a ``Trace``. It gets the trace through
``set_trace`` and the shared ``Selection`` at construction; it draws with pyqtgraph and never
runs the model. Each plot it draws is registered with ``add_exportable`` so that right-click
export, "export all plots" and the CLI's ``export --plots`` find it.

Work before drawing runs on the worker thread (``prepare``). It reads no widget and not
``self.selection``: it gets a ``PanelSnapshot``, a frozen copy of the selection and the panel's
options taken on the GUI thread when the trace is requested (``snapshot``; the presenter pairs it with
``prepare`` in a ``PanelRequest``).

Prepare returns what is drawn: every panel's ``prepare`` returns a frozen ``PanelView`` subclass
(built from the trace and the snapshot: ``EmbeddingsView``, ``AttentionView``, ``NeuronsView``, …);
the window carries it from the worker to ``set_trace(trace, view)``, which hands it to ``draw``. (A
view that is missing or was made for another trace is prepared again on the GUI thread.) Nothing is
passed from ``prepare`` to drawing through ``trace.memo``: the memo holds only values derived from
that trace alone (memoised analysis results such as a layer's activations or the logit lens).

The presenter (``explorer.ui.session.presenter``) takes the snapshot (``snapshot``) with each trace
request, runs ``prepare`` on a worker and calls ``set_trace`` on the GUI thread; the panel never asks for
a trace itself.

Adding a panel: a pure function in ``explorer/core`` with a headless test, a module here with a
``Panel`` subclass, one ``PanelSpec`` line in ``explorer/ui/panels/registry.py``'s ``PANELS`` (its id,
titles and explanation page), one pytest-qt test.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QToolButton, QVBoxLayout, QWidget

from explorer.core.paths import resources_dir
from explorer.core.trace import Trace
from explorer.ui.explanations import ExplanationWindow
from explorer.ui.export.menu import Exportable, attach_export_menu
from explorer.ui.panels.registry import spec_of
from explorer.ui.session.progressive import Job, ProgressiveWork, lane
from explorer.ui.session.interventions import InterventionState
from explorer.ui.session.selection import Selection

if TYPE_CHECKING:
    from explorer.ui.session.session import Session
    from explorer.ui.session.workers import LoadResult

__all__ = ["Exportable", "Panel", "PanelSnapshot", "PanelView"]


@dataclass(frozen=True)
class PanelSnapshot:
    """What a panel's worker-thread work may read, copied on the GUI thread: the shared selection
    (layer, head, token) and the model's tokenizer. Panels with options (a checkbox, a top-K box)
    subclass it with more fields (see ``Panel.snapshot``)."""

    layer: int = 0
    head: int = 0
    token: int | None = None
    tokenizer: Any = None  # Qt-free; read-only use (display strings, vocab_size)
    timeline: Any = None  # the generation timeline's step on screen (session.timeline.TimelineStep), else None

    @property
    def produced(self) -> int | None:
        """At a timeline step, the position whose prediction is the token being produced (else None)."""
        return None if self.timeline is None else self.timeline.predicting


@dataclass(frozen=True)
class PanelView:
    """What a panel's ``prepare`` made of one trace for ``draw`` (subclassed per panel)."""

    trace: Trace


def clamp_token(token: int | None, n: int) -> int:
    """The position a panel shows for the selected ``token``: the last of ``n`` when none is selected
    or the selection lies past this trace (it is clamped only when the next trace is applied)."""
    return n - 1 if token is None or not 0 <= token < n else token


class _FromSpec:
    """A class attribute read from the panel's ``PanelSpec`` (its registry record); "" for a panel without one."""

    def __init__(self, field: str) -> None:
        self.field = field

    def __get__(self, obj: object, cls: type) -> str:
        record = spec_of(cls)
        return getattr(record, self.field) if record is not None else ""


class Panel(QWidget):
    title: ClassVar[str] = _FromSpec("title")  # type: ignore[assignment]
    explanation: ClassVar[str] = _FromSpec("explanation")  # type: ignore[assignment]  # resources/explanations/<name>.md

    def __init__(self, selection: Selection, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.selection = selection
        self.trace: Trace | None = None
        self._exportables: list[Exportable] = []
        self.tokenizer: Any = None  # the model's Tokenizer, set by the window (see set_tokenizer)
        self.session: Session | None = None  # the window's Session, once attached (attach)
        self.interventions: InterventionState | None = None  # the Session's (explorer/ui/interventions/)
        self.progressive: ProgressiveWork | None = None  # the Session's lane (else the application's)
        self._deferred: dict[Any, Job] = {}  # expensive views asked for while hidden: run when shown
        self.on_screen = True  # set by the window (set_on_screen): False while behind another tab
        self._selection_missed: list[str] = []  # selection changes while off screen: redrawn when shown
        self.body = QVBoxLayout(self)
        self.body.setContentsMargins(4, 4, 4, 4)
        self._build_explanation()
        self.setFocusPolicy(Qt.FocusPolicy.ClickFocus)  # a click anywhere makes it "the focused panel" (F1)
        selection.changed.connect(self._on_selection_changed)

    # --- what subclasses implement ---------------------------------------------------------
    def heightForWidth(self, width: int) -> int:  # noqa: N802 - Qt override
        """The panel's minimum height. A panel with word-wrapped lines has a height-for-width layout, whose answer
        is its preferred height: the dock's scroll area then made every such panel that tall (1,071 px in a 704 px
        dock at 1280x800, its plots below the fold). Given the minimum, the scroll area fits the panel to the dock
        and scrolls only when the dock is smaller than that."""
        return self.minimumSizeHint().height()

    def show_trace(self, trace: Trace) -> None:
        """Draw everything for a new trace, prepared here on the GUI thread (``set_trace`` is the usual way)."""
        self.draw(self.prepare(trace, self.snapshot()))

    def draw(self, view: PanelView) -> None:
        """Draw ``view`` (what ``prepare`` returned for the trace being shown), on the GUI thread."""
        raise NotImplementedError

    @classmethod
    def applies_to(cls, config: Any) -> bool:
        """Whether this panel has anything to show for a model of ``config`` (the window hides the dock
        of one that has not)."""
        return True

    def selection_changed(self, what: str) -> None:
        """Redraw what depends on the selection; ``what`` is "layer", "head" or "token"."""

    def snapshot(self) -> PanelSnapshot:
        """The selection and this panel's options now (GUI thread), for ``needed_keys``/``prepare``.

        A panel with options overrides it and returns a ``PanelSnapshot`` subclass made by
        ``self._snapshot(Subclass, option=value, ...)``."""
        return self._snapshot(PanelSnapshot)

    def _snapshot(self, cls: type[PanelSnapshot], **options: Any) -> Any:
        s = self.selection
        timeline = self.session.timeline.current if self.session is not None else None
        return cls(layer=s.layer, head=s.head, token=s.token, tokenizer=self.tokenizer, timeline=timeline, **options)

    @property
    def selected_token(self) -> int:
        """The selected token, or the last one when none (or one beyond this trace) is selected."""
        return clamp_token(self.selection.token, self.trace.n_tokens if self.trace is not None else 1)

    def needed_keys(self, trace: Trace, snapshot: PanelSnapshot) -> list[str]:
        """Trace keys this panel reads that may be derived on demand: the worker computes them
        before the trace reaches the GUI thread, so drawing never waits on the model.

        Called from the worker thread: read only the trace and ``snapshot``, touch no widget."""
        return []

    def prepare(self, trace: Trace, snapshot: PanelSnapshot) -> PanelView | None:
        """Work done on the worker thread before drawing; a panel returns its ``PanelView`` of the
        trace (this base computes ``needed_keys`` and returns None: subclasses call it, then build
        their view).

        Heavier values (a downsampled mosaic, a logit lens) may be memoised with the trace
        (``trace.memo(key, compute)``) when they derive from it alone, and are put in the view too.
        Same rule as ``needed_keys``: only the trace and the snapshot (taken on the GUI thread when the
        trace was requested), no widgets, not ``self.selection``.
        """
        trace.materialize(self.needed_keys(trace, snapshot))
        return None

    def tokenizer_changed(self) -> None:
        """A new model (and so ``self.tokenizer``) was loaded; the next trace follows."""

    # --- progressive views (explorer.ui.session.progressive) ---------------------------------------------
    def later(self, key: Any, compute: Callable[[Callable[[], None]], Any], apply: Callable[[Any], None],
              priority: int = 0, failed: Callable[[str], None] | None = None) -> Job:
        """Compute an expensive view of the current trace in the background and ``apply`` it here.

        ``compute(check)`` runs on a worker thread (same rules as ``prepare``: the trace and values
        captured now, no widgets) and calls ``check()`` at its boundaries, which raises when the job
        is stale. ``apply(value)`` runs on the GUI thread, only if this panel still shows the same
        trace and no newer job with the same ``key`` was asked for. While the panel is hidden the
        job waits and computes nothing. ``failed(message)``: ``compute`` raised (the view says so rather
        than "computing…" for ever)."""
        job = Job(self, key, self.trace, compute, apply, priority, failed=failed)
        work = self._lane()
        if self._hidden_in_window():
            work.cancel_owner_key(self, key)
            self._deferred[key] = job
            return job
        self._deferred.pop(key, None)
        return work.submit(job)

    def now_or_later(self, key: Any, cheap: bool, compute: Callable[[Callable[[], None]], Any],
                     apply: Callable[[Any], None], priority: int = 0) -> None:
        """``apply(compute())`` at once when ``cheap`` (a small model), else ``later``."""
        if cheap:
            self._lane().cancel_owner_key(self, key)
            self._deferred.pop(key, None)
            apply(compute(lambda: None))
        else:
            self.later(key, compute, apply, priority)

    def computing(self) -> bool:
        """Whether a view of this panel is still being computed (or waits for the panel to be shown)."""
        return bool(self._deferred) or bool(self._lane().pending(self))

    def defer(self, job: Job) -> None:
        """Keep ``job`` (of the trace shown) until this hidden panel is shown again."""
        if job.key not in self._deferred:
            self._deferred[job.key] = job

    def _lane(self) -> ProgressiveWork:
        return self.progressive if self.progressive is not None else lane()

    def _hidden_in_window(self) -> bool:
        return not self.on_screen

    def set_on_screen(self, visible: bool) -> None:
        """The window says whether this panel can be seen (a tab behind another one cannot, though
        Qt still calls it visible): hidden, its background views stop and wait and a selection change
        draws nothing; shown, they go on and the selection's changes meanwhile are drawn."""
        if visible == self.on_screen:
            return
        self.on_screen = visible
        if not visible:
            for job in self._lane().cancel_owner(self):  # hidden: compute nothing until shown again
                if job.trace is self.trace:
                    self._deferred[job.key] = Job(self, job.key, job.trace, job.compute, job.apply, job.priority,
                                                  failed=job.failed)
            return
        missed, self._selection_missed = self._selection_missed, []
        if missed and self.trace is not None:  # what the selection changed while hidden, drawn now (once each)
            for what in ("layer", "head", "token"):
                if what in missed:
                    self.selection_changed(what)
            self.refresh_marks()
        deferred, self._deferred = self._deferred, {}
        for job in deferred.values():
            if job.trace is self.trace:
                self._lane().submit(job)

    # --- shared machinery --------------------------------------------------------------------
    def set_trace(self, trace: Trace, view: PanelView | None = None) -> None:
        """Show ``trace``; ``view``: what ``prepare`` made of it on a worker (else prepared here)."""
        if self.trace is not trace:  # the old trace's views are stale
            self._lane().cancel_owner(self)
            self._deferred.clear()
        self._selection_missed = []  # drawn below with the selection as it is now
        self.trace = trace
        if view is None or view.trace is not trace:
            view = self.prepare(trace, self.snapshot())
        self.draw(view)
        self.refresh_marks()

    def attach(self, session: Session) -> None:
        """Work with ``session``: its lane for background views, its interventions, its model's tokenizer."""
        self.session = session
        self.progressive = session.progressive
        self.set_interventions(session.interventions)
        session.model_changed.connect(self._on_model_changed)
        session.trace_file_opened.connect(self._on_trace_file)

    def _on_model_changed(self, result: LoadResult) -> None:
        self.set_tokenizer(result.model.tokenizer)

    def _on_trace_file(self, _path: str) -> None:
        self.set_tokenizer(None)

    def set_interventions(self, state: InterventionState) -> None:
        """The session's interventions: right-click menus edit them, marks show the active ones."""
        self.interventions = state
        state.changed.connect(self.refresh_marks)

    def refresh_marks(self) -> None:
        """Redraw the crosses over switched-off components (a panel's ``intervention_targets``, drawn
        by ``explorer.ui.interventions.menu``)."""
        active = self.interventions.active() if self.interventions is not None else ()
        for marks in getattr(self, "_intervention_marks", []):
            marks.refresh(active)

    def set_tokenizer(self, tokenizer: Any) -> None:
        """The model's tokenizer (an ``explorer.core.tokenize.base.Tokenizer``; Qt- and torch-free)."""
        self.tokenizer = tokenizer
        self.tokenizer_changed()

    def explanation_path(self) -> Path | None:
        """``resources/explanations/<explanation>.md`` (None for a panel without one)."""
        return resources_dir() / "explanations" / f"{self.explanation}.md" if self.explanation else None

    def _build_explanation(self) -> None:
        """A "What am I looking at?" button above the panel's content; it opens the explanation,
        rendered from Markdown, in its own window (``explorer.ui.explanations``)."""
        self.explain_button = QToolButton(self)
        self.explain_button.setText("What am I looking at?")
        self.explain_button.setCheckable(True)
        self.explain_button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.explain_button.setArrowType(Qt.ArrowType.RightArrow)
        self.explain_button.setAutoRaise(True)
        self.explain_button.setToolTip("Open what this panel shows and how to read it, with its formulas (F1)")
        self.explain_button.toggled.connect(self.show_explanation)
        self.explain_window = ExplanationWindow(self.title or type(self).__name__, self)
        self.explain_window.finished.connect(lambda _: self.explain_button.setChecked(False))
        self.explain_text = self.explain_window.text
        path = self.explanation_path()
        self.explain_button.setVisible(bool(path and path.is_file()))
        self.body.addWidget(self.explain_button, 0, Qt.AlignmentFlag.AlignLeft)

    def show_explanation(self, on: bool = True) -> None:
        if self.explain_button.isChecked() != on:
            self.explain_button.setChecked(on)  # re-enters through toggled with the same value
            return
        self.explain_button.setArrowType(Qt.ArrowType.DownArrow if on else Qt.ArrowType.RightArrow)
        if on and self.explain_window.load(self.explanation_path()):
            self.explain_window.present()
        elif not on:
            self.explain_window.hide()

    def _on_selection_changed(self, what: str) -> None:
        if self.trace is None:
            return
        if not self.on_screen:  # behind another tab: nothing is drawn now, the change is drawn when shown
            if what not in self._selection_missed:
                self._selection_missed.append(what)
            return
        self.selection_changed(what)
        self.refresh_marks()

    def add_exportable(self, name: str, item: Any,
                       data: Callable[[], tuple[np.ndarray, list[str] | None, list[str] | None]]) -> Exportable:
        exportable = Exportable(name, item, data)
        self._exportables.append(exportable)
        attach_export_menu(exportable, self)  # right-click: Export PNG/SVG…, data as CSV/NPY…
        return exportable

    def exportables(self) -> list[Exportable]:
        return list(self._exportables)
