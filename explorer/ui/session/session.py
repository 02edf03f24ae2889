"""``Session``: what one window's parts share, without a widget.

The loaded model, the prompt and its trace requests (debounced, newest wins: ``TraceController``),
the trace on screen with its baseline (the same prompt's run without interventions, a typed field of
``TraceResult``), the selection, the interventions, the panels' background lane and the loaders and
workers. Panels, the generation pane, the docks, the window state and the export actions get the
Session and talk to it through its verbs and signals; none of them gets the window.

Signals (all on the GUI thread)
-------------------------------
loading(str)
    A load's stage ("" when it ends).
load_progress(int, int)
    Tensors read and in all, for the newest load.
model_changed(LoadResult)
    A new model is in place (``loaded``); its first trace has not been asked for yet: panels take
    its tokenizer now, so that the snapshots of that request carry it.
model_loaded(LoadedModel)
    After ``model_changed``: the prompt for the new model is set and its trace requested.
load_failed(str)
    The newest load failed (the message); the previous model stays.
load_refused(str, LoadRequest)
    The same, with the request (the window decides between a dialog and a notice).
load_cancelled(LoadRequest)
prompt_changed(str)
    The session's prompt is ``text`` now (typed, chosen, or generated).
prompt_edited(str)
    The user typed ``text`` (``edit_prompt``) or chose it (``set_prompt``: a sample, a patching cell); also
    followed by ``prompt_changed``. A generated token clicked (``trace_ids``) is not an edit.
trace_requested(int)
    A trace was asked for (its id): whatever was computed for older traces is stale.
failed(str)
    The newest trace failed: the message for the user.
trace_file_opened(str)
    ``open_trace_file`` made a trace read from that file the shown one (there is no model now).
panel_requested(str)
    Someone (the diagram, the tour) asked to see a panel (its id): the window shows its dock.
asked(Question)
    Someone (a right-click on an attention cell, the tour) asked a question about a cell of the trace on
    screen (``question.py``); the panel it names answers it, and ``panel_requested`` follows.

A conversation (``conversation``: its turns and the chat template's options, ``explorer.ui.session.chat``) is
rendered on a worker and traced through ``trace_chat``: its ids pinned with their ``ChatSpans``, so that its
trace, and every retrace of it (interventions), arrives as a PROMPT frame whose ``meta.chat`` has the roles.

The trace on screen is the presenter's (``presenter``: ``shown(Frame)``, ``drawn(Frame)``, ``is_idle()``):
the prompt passes, the timeline's steps, trace files and the comparison hand it their traces.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, QThreadPool, Signal

from explorer.ui.session.chat import Conversation
from explorer.ui.session.compare import Comparing
from explorer.ui.session.corpus import CorpusState
from explorer.ui.session.features import FeatureState
from explorer.ui.session.frame import FILE, PROMPT, Frame, Source
from explorer.ui.session.interventions import Entry, InterventionState
from explorer.ui.session.lifetime import disconnect_all
from explorer.ui.session.presenter import Presenter
from explorer.ui.session.progressive import ProgressiveWork
from explorer.ui.session.selection import Selection
from explorer.ui.session.timeline import Timeline
from explorer.ui.session.workers import LoadRequest, LoadResult, ModelLoader, TraceController, TraceResult

if TYPE_CHECKING:
    from explorer.core.chat.encode import ChatEncoding
    from explorer.core.chat.spans import ChatSpans
    from explorer.core.interventions.spec import Intervention
    from explorer.core.loaded import LoadedModel
    from explorer.ui.session.question import Question
    from explorer.core.trace import Trace

CLOSE_WAIT_MS = 1000  # closing waits at most this long for cancelled work to reach a layer boundary


class Session(QObject):
    """One window's model, prompt, trace, selection, interventions and background work (see the module)."""

    loading = Signal(str)
    load_progress = Signal(int, int)
    model_changed = Signal(object)
    model_loaded = Signal(object)
    load_failed = Signal(str)
    load_refused = Signal(str, object)
    load_cancelled = Signal(object)
    prompt_changed = Signal(str)
    prompt_edited = Signal(str)
    trace_requested = Signal(int)
    failed = Signal(str)
    trace_file_opened = Signal(str)
    panel_requested = Signal(str)
    asked = Signal(object)

    def __init__(self, debounce_ms: int = 150, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.selection = Selection(self)
        self.interventions = InterventionState(self)
        self.features = FeatureState(lambda: self.loaded, self)  # the SAEs open for the model
        self.corpus = CorpusState(lambda: self.loaded, self)  # the corpus run open for the model
        self.progressive = ProgressiveWork(self)  # the panels' expensive views
        self.presenter = Presenter(self.selection, self.progressive, self)  # the trace on screen, its drawing
        self.loader = ModelLoader(self)
        self.controller = TraceController(self.presenter.requests, debounce_ms, self)
        self.loaded: LoadedModel | None = None
        self.model_request: LoadRequest | None = None  # the request that loaded ``loaded``
        self.source: str | None = None  # where ``loaded`` came from (reopened on another device)
        self.trace_file: str | None = None  # a trace opened from a file, without its model
        self.closed = False
        self._changing_model = False
        self.loader.stage.connect(self._relay_stage)
        self.loader.progress.connect(self.load_progress)
        self.loader.busy_changed.connect(lambda busy: None if busy or self.closed else self.loading.emit(""))
        self.loader.loaded.connect(self._on_loaded)
        self.loader.failed.connect(self._on_load_failed)
        self.loader.cancelled.connect(self._on_load_cancelled)
        self.controller.requested.connect(self._on_requested)
        self.controller.trace_ready.connect(self._on_trace_ready)
        self.controller.failed.connect(self._on_failed)
        # no panel's expensive view runs beside a forward pass: on two cores they slow each other down,
        # and the views of the trace on screen are stale once the pass ends (progressive.py)
        self.controller.busy_changed.connect(lambda busy: self.progressive.hold(busy, "forward"))
        self.interventions.changed.connect(self._on_interventions)
        # a generation's steps, cut from one trace of the whole sequence
        self.timeline = Timeline(self.presenter, self.controller, self.selection, self)
        self.timeline.prompt_shown.connect(self.prompt_changed)
        self.model_changed.connect(lambda _result: self.timeline.stop())
        # a second model beside this one (Models > Compare with another model…)
        self.compare = Comparing(self.presenter, self.controller, self)
        self.model_changed.connect(self.compare.model_changed)
        for source in (self.controller, self.loader, self.timeline, self.compare):
            self.presenter.add_source(source)
        self.conversation = Conversation(self)  # the turns traced through the model's chat template

    # --- what there is ---------------------------------------------------------------------------------
    @property
    def frame(self) -> Frame | None:
        """What the panels show (the presenter's): the trace, its baseline, its views, its source."""
        return self.presenter.frame

    @property
    def trace(self) -> Trace | None:
        return self.presenter.trace

    @property
    def baseline(self) -> Trace | None:
        """The shown prompt's run without interventions (None when there are none)."""
        return self.presenter.baseline

    def baseline_of(self, trace: Trace | None) -> Trace | None:
        """``trace``'s run without interventions, if ``trace`` is the shown one and has one."""
        frame = self.presenter.frame
        return frame.baseline if frame is not None and frame.trace is trace else None

    @property
    def prompt(self) -> str:
        return self.controller.text

    @property
    def last_error_details(self) -> str:
        return self.loader.last_error_details

    # --- verbs: the model ------------------------------------------------------------------------------
    def open(self, source: str | None, device: str = "auto", dtype: str = "float32",
             fallbacks: tuple[str | None, ...] = (), quiet: bool = False, fit: bool = False,
             weights: str = "auto") -> LoadRequest:
        """Load ``source`` (None: the default model) in a worker; the newest load wins. ``fit``: lay the model
        out across the GPU, CPU memory and disk (core/placement.py) when it does not fit one device;
        ``weights``: how its weights are held (auto, keep, dequantize, bfloat16, float16)."""
        request = LoadRequest(None if source is None else str(source), device, dtype, fallbacks, quiet, fit=fit,
                              weights=weights)
        self.loading.emit(f"Loading {source or 'the default model'}…")
        return self.loader.load(request)

    def cancel_load(self) -> None:
        self.loader.cancel()

    def _relay_stage(self, text: str) -> None:
        if not self.closed:
            self.loading.emit(text)

    def _on_loaded(self, result: LoadResult) -> None:
        if not self.closed:  # a load that finishes after the window closed starts nothing
            self.use_model(result)

    def use_model(self, result: LoadResult) -> None:
        """Make ``result``'s model the session's (a finished load; benchmarks hand one in directly) and
        trace the prompt with it (a ``model_changed`` listener may replace the prompt first: ``keep_prompt``)."""
        loaded = result.model
        self.loaded, self.model_request, self.trace_file = loaded, result.request, None
        self.source = getattr(loaded, "repo_id", None) or result.source or (
            loaded.name if loaded.source == "built-in" else loaded.source)
        self.controller.set_model(loaded)
        self._changing_model = True  # the interventions name the old model's heads: cleared, no trace yet
        try:
            self.interventions.clear()
        finally:
            self._changing_model = False
        self.features.close_all()  # their hook points name the old model's layers
        self.corpus.model_changed()  # a run describes the model that made it
        self.model_changed.emit(result)
        self._trace_now(self.prompt)  # model_loaded's listeners follow it
        self.model_loaded.emit(loaded)

    def keep_prompt(self, text: str) -> None:
        """The prompt is ``text`` now, traced by the next request (a new model's first trace: the window
        keeps the user's text only if the model can read it)."""
        self.controller.text = text

    def _on_load_failed(self, message: str, request: LoadRequest) -> None:
        if self.closed:
            return
        self.loading.emit("")
        self.load_refused.emit(message, request)
        self.load_failed.emit(message)

    def _on_load_cancelled(self, request: LoadRequest) -> None:
        if not self.closed:
            self.loading.emit("")
            self.load_cancelled.emit(request)

    # --- verbs: the prompt and its trace ---------------------------------------------------------------
    def edit_prompt(self, text: str) -> None:
        """The user typed: trace ``text`` once the edits pause (the debounce)."""
        self.controller.set_text(text)
        self.prompt_edited.emit(text)
        self.prompt_changed.emit(text)

    def set_prompt(self, text: str) -> int:
        """Make ``text`` the prompt and trace it now (a sample, a patching cell): whatever follows the typed
        prompt follows it too (``prompt_edited``, as when typed). The request id (0: no model)."""
        self.prompt_edited.emit(text)
        return self._trace_now(text)

    def _trace_now(self, text: str) -> int:
        self.controller.text = text
        self.prompt_changed.emit(text)
        return self.controller.request(text)

    def trace_ids(self, text: str, ids: Sequence[int], chat: ChatSpans | None = None) -> int:
        """Trace ``text`` as exactly ``ids`` (generated text: encoding it again may cut other tokens;
        ``chat``: their ``ChatSpans``, when they are a templated conversation). Ids that are a step of the
        generation timeline show that step, cut from its one trace."""
        if self.loaded is None:
            return 0
        if self.timeline.owns(ids) and self.timeline.reason is None:
            self.timeline.set_step(len(ids) - self.timeline.n_prompt)
            return self.controller.latest_id
        ids = list(ids)[: self.loaded.config.n_ctx]
        self.controller.pin_ids(text, ids, chat)
        return self._trace_now(text)  # not prompt_edited: the generation pane keeps the continuation clicked

    def trace_chat(self, encoding: ChatEncoding) -> int:
        """Trace a rendered conversation (``Conversation``): its template's ids, exactly, with their spans;
        the trace arrives as any prompt's, its ``meta.chat`` saying each token's turn, role and kind."""
        if self.loaded is None:
            return 0
        ids = list(encoding.ids)[: self.loaded.config.n_ctx]
        self.controller.pin_ids(encoding.text, ids, encoding.spans)
        return self._trace_now(encoding.text)

    def retrace(self) -> int:
        """Trace the prompt again now (the interventions changed)."""
        return self.controller.request()

    def _on_requested(self, request_id: int) -> None:
        self.progressive.park_all()  # a newer trace comes: the old one's views are stale (unless it fails)
        self.trace_requested.emit(request_id)

    def _on_trace_ready(self, result: TraceResult) -> None:
        if not self.closed:
            request = result.request
            self.presenter.present(result, Source(PROMPT, request.text, request.id, request.ids,
                                                  requested_at=request.requested_at))

    def _on_failed(self, message: str) -> None:
        if not self.closed:
            self.progressive.resume_parked()  # the shown trace stays: its views still complete
            self.failed.emit(message)

    def open_trace_file(self, trace: Trace, path: str, kind: str = FILE, requested: float | None = None) -> None:
        """Show ``trace`` read from ``path`` (``kind``: FILE, or REMOTE with a label for ``path``): there is no
        model now (a trace file has no weights)."""
        self.loaded, self.trace_file = None, path
        self.controller.set_model(None)
        self.features.close_all()
        self.corpus.model_changed()
        prompt = str(trace.meta.extra.get("prompt", "")) or "".join(trace.tokens)
        self.controller.text = prompt
        self.trace_file_opened.emit(path)
        self.prompt_changed.emit(prompt)
        source = Source(kind, prompt, ids=tuple(int(i) for i in trace.token_ids), label=path,
                        requested_at=requested if requested is not None else time.perf_counter())
        self.presenter.present_trace(trace, source)

    # --- verbs: panels --------------------------------------------------------------------------------
    def show_panel(self, name: str, layer: int | None = None, head: int | None = None,
                   token: int | None = None) -> None:
        """Select ``layer``, ``head`` and ``token`` (those given) and ask the window to show the panel ``name``
        (a panel id: "attention", ``explorer.ui.panels.registry``)."""
        if layer is not None:
            self.selection.set_layer(layer)
        if head is not None:
            self.selection.set_head(head)
        if token is not None:
            self.selection.set_token(token)
        self.panel_requested.emit(name)

    def ask(self, question: Question) -> None:
        """Ask ``question`` (why a head attends at a cell, what it moves: ``question.py``): its panel gets it
        (``asked``) and is shown with the question's layer, head and query selected."""
        self.asked.emit(question)
        self.show_panel(question.panel, question.layer, question.head, question.query)

    # --- verbs: interventions --------------------------------------------------------------------------
    def set_interventions(self, interventions: Sequence[Intervention]) -> None:
        """Replace the session's interventions with ``interventions`` (all on) and trace again."""
        self.interventions.entries = [Entry(i) for i in interventions]
        self.interventions.changed.emit()

    def _on_interventions(self) -> None:
        self.controller.interventions = self.interventions.active()
        if not self._changing_model and not self.closed:
            if self.timeline.active:
                self.timeline.restart()  # the whole sequence again, the same step on screen
            else:
                self.retrace()

    # --- the end ---------------------------------------------------------------------------------------
    def shutdown(self, wait_ms: int = CLOSE_WAIT_MS) -> None:
        """Stop every worker (a load at its next tensor, a trace at its next layer, the lane's views)
        and never apply what still finishes; nothing is emitted from here on."""
        if self.closed:
            return
        self.closed = True
        self.loader.cancel_all()
        self.controller.shutdown()
        self.presenter.shutdown()
        self.compare.shutdown()
        self.progressive.shutdown()
        # the connections among the session's own objects hold Python callables from C++, which the
        # garbage collector cannot see: cut them, so that the session is freed with its window
        for obj in (self, self.loader, self.controller, self.progressive, self.presenter, self.selection,
                    self.interventions, self.timeline, self.compare, self.features, self.corpus,
                    self.conversation):
            disconnect_all(obj)
        self.corpus.close()  # its database connection (no one hears the signal now)
        QThreadPool.globalInstance().waitForDone(wait_ms)
