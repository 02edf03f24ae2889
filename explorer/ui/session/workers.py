"""Background work for the window: loading checkpoints and running traces off the GUI thread.

The GUI thread builds a small immutable request, a worker started through the one door
(``explorer.ui.session.background``) runs it, and the result comes back to the GUI thread (napari's
``_layer_slicer`` protocol). Requests carry increasing ids (``Newest``) and only the newest is ever
applied, so a slow, stale result can never overwrite a newer one. The trace goes on to the presenter.

The functions the workers run (``load_model_steps``, ``run_trace``) are plain and Qt-free apart from
their arguments, so they can be called directly in tests. torch is only imported inside them.
"""

from __future__ import annotations

import dataclasses

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, QTimer, Signal

from explorer.core.cancel import Cancel, Cancelled
from explorer.core.trace import CaptureSpec, Trace
from explorer.ui.session import background
from explorer.ui.session.background import Failure, Newest, error_message
from explorer.ui.session.frame import PanelRequest
from explorer.ui.session.lifetime import disconnect_all

if TYPE_CHECKING:
    from explorer.core.loaded import LoadedModel


# --- loading -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class LoadRequest:
    """Load ``source`` (None: the default model); if it fails, try each of ``fallbacks`` in turn."""

    source: str | None
    device: str = "auto"
    dtype: str = "float32"
    fallbacks: tuple[str | None, ...] = ()
    quiet: bool = False  # report a failure of ``source`` as a notice, not a dialog (startup)
    id: int = 0
    fit: bool = False  # lay the model out across GPU, CPU memory and disk (core/placement.py fit_to_machine)
    weights: str = "auto"  # how the weights are held (core/quant/storage.py): auto, keep, dequantize, bfloat16, float16


@dataclass(frozen=True)
class LoadResult:
    request: LoadRequest
    model: LoadedModel
    source: str | None  # the source that loaded (a fallback if the requested one failed)
    errors: tuple[str, ...] = ()  # messages of the sources that failed before it


def load_model_steps(request: LoadRequest, progress: Callable[[int, int, str], None] | None = None,
                     cancel: Cancel | None = None) -> Iterator[str]:
    """Yields stage texts, returns a ``LoadResult``; raises the first failure if nothing loads.

    ``progress(i, n, tensor name)`` is called from the worker thread before each tensor is read;
    setting ``cancel`` stops the load between two tensors (``LoadCancelled``; no fallback is tried).
    """
    yield "Starting the model engine…"
    from explorer.core.checkpoint import load_checkpoint
    from explorer.core.placement import fit_to_machine

    placement = fit_to_machine() if request.fit else None
    errors: list[str] = []
    first: BaseException | None = None
    for source in (request.source, *request.fallbacks):
        yield f"Loading {source or 'the default model'} on {request.device} ({request.dtype})…"
        memory = _memory_line(source, request)
        if memory:  # before any weight is read: what this way of holding them takes, and the others
            yield f"Loading {source}: {memory}…"
        try:
            model = load_checkpoint(source, request.device, request.dtype, progress=progress, cancel=cancel,
                                    placement=placement, weights="dequantize" if placement else request.weights)
        except Cancelled:  # LoadCancelled: the user's Cancel, no fallback
            raise
        except Exception as exc:  # noqa: BLE001 - every failure becomes a message, the next source is tried
            first = first or exc
            errors.append(f"{source or 'default model'}: {error_message(exc)}")
            continue
        return LoadResult(request, model, source, tuple(errors))
    assert first is not None
    raise first


def _memory_line(source: str | None, request: LoadRequest) -> str:
    """``quant.plan.one_line`` for ``source`` (headers only); "" where it cannot say (a built-in model)."""
    if source is None:
        return ""
    from explorer.core.quant.plan import memory_options, one_line

    try:
        return one_line(memory_options(source, request.device, request.dtype), request.weights)
    except Exception:  # noqa: BLE001 - the load itself reports what is wrong with the files
        return ""


class ModelLoader(QObject):
    """Loads checkpoints in a worker; a newer ``load`` makes the results of older ones ignored.

    Signals
    -------
    stage(str)
        What the loader is doing now.
    progress(int, int)
        Tensors read so far and in all, for the newest load.
    loaded(LoadResult)
    failed(str, LoadRequest)
        The loader's message for the user.
    cancelled(LoadRequest)
        ``cancel()`` stopped the newest load between two tensors; the previous model stays.
    busy_changed(bool)
    """

    stage = Signal(str)
    progress = Signal(int, int)
    loaded = Signal(object)
    failed = Signal(str, object)
    cancelled = Signal(object)
    busy_changed = Signal(bool)
    _tensor_read = Signal(int, int, int)  # (request id, i, n), emitted from the worker thread

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.requests = Newest()  # only the newest load is applied
        self._running = 0
        self._cancels: dict[int, Cancel] = {}
        self.last_error_details = ""  # the traceback of the last failure when it was a bug (details pane)
        self._tensor_read.connect(self._on_tensor_read)

    def cancel(self) -> None:
        """Stop the newest load at the next tensor boundary (its ``cancelled`` signal follows)."""
        event = self._cancels.get(self.requests.id)
        if event is not None:
            event.set()

    def cancel_all(self) -> None:
        """Stop every running load (closing the window): none of them will be applied."""
        for event in self._cancels.values():
            event.set()
        self.requests.drop()  # whatever still finishes is stale

    @property
    def busy(self) -> bool:
        return self._running > 0

    def is_idle(self) -> bool:
        return self._running == 0

    def load(self, request: LoadRequest) -> LoadRequest:
        rid = self.requests.next()
        request = dataclasses.replace(request, id=rid)  # every other field as asked (fit, weights, ...)
        cancel = self._cancels[rid] = Cancel()
        last = [-1]

        def progress(i: int, n: int, name: str) -> None:  # worker thread
            step = (i * 100) // max(n, 1)
            if step != last[0] and not cancel.is_set():  # at most ~100 queued signals per load
                last[0] = step
                try:
                    self._tensor_read.emit(rid, i, n)
                except RuntimeError:  # the loader was deleted meanwhile (its window closed): nobody listens
                    cancel.set()

        self._running += 1
        if self._running == 1:
            self.busy_changed.emit(True)
        background.run(load_model_steps, request, progress, cancel, newest=self.requests, request_id=rid,
                       on_yield=self.stage.emit, on_done=self.loaded.emit,
                       on_cancelled=lambda: self.cancelled.emit(request),
                       on_error=lambda failure: self._on_failed(request, failure),
                       on_finished=lambda: self._on_finished(rid))
        return request

    def _on_tensor_read(self, request_id: int, i: int, n: int) -> None:
        if self.requests.current(request_id):
            self.progress.emit(i, n)

    def _on_failed(self, request: LoadRequest, failure: Failure) -> None:
        self.last_error_details = failure.details
        self.failed.emit(error_message(failure.exc), request)

    def _on_finished(self, request_id: int) -> None:
        self._cancels.pop(request_id, None)
        self._running -= 1
        if self._running == 0:
            self.busy_changed.emit(False)


# --- tracing -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class TraceRequest:
    id: int
    model: LoadedModel | None  # only the worker calls into it (None: a trace read from a file)
    text: str
    panels: tuple[PanelRequest, ...] = ()  # the shown panels' requests, taken when the trace was asked for
    spec: CaptureSpec | None = None
    requested_at: float = field(default_factory=time.perf_counter)
    ids: tuple[int, ...] | None = None  # exact token ids for ``text`` (generated text), else encode it
    cancel: Cancel = field(default_factory=Cancel, compare=False)  # set: stale, stop at the next layer
    interventions: tuple = ()  # explorer.core.interventions.spec.Intervention, applied to the run
    chat: Any = None  # the ids' ChatSpans (a templated conversation): the trace knows each token's turn and role


@dataclass(frozen=True)
class TraceResult:
    request: TraceRequest
    trace: Trace
    worker_seconds: float  # encode + forward + the first panel's prepare
    rest: tuple[PanelRequest, ...] = ()  # the other panels' requests (their snapshots of request time), not run yet
    baseline: Trace | None = None  # the same ids without interventions (only when the trace has some)
    prepared: tuple[tuple[str, object], ...] = ()  # (panel id, view) of the first panel, prepared on the worker


def run_trace(request: TraceRequest) -> TraceResult:
    """Encode, run the forward pass, then let the first visible panel prepare what it will draw, so
    that it is drawn as soon as the trace exists; the other panels' requests come back in ``rest``
    for the presenter to prepare in the background (``explorer.ui.session.presenter``). Expensive views
    are computed later, per panel, by ``explorer.ui.session.progressive``.

    Raises ``Cancelled`` at the next layer boundary (or between panels) once ``request.cancel`` is set."""
    t0 = time.perf_counter()
    if request.ids is not None:
        ids, truncated_from = list(request.ids), None
    else:
        ids, truncated_from = request.model.encode(request.text)
    request.cancel.check()
    trace = request.model.trace_ids(ids, request.spec, truncated_from, cancel=request.cancel,
                                    interventions=request.interventions, chat=request.chat)
    baseline = None
    if request.interventions:  # the run without them, for "what changed" (TraceResult.baseline)
        storage = CaptureSpec.default_for(request.model.device).storage  # on the device for an accelerator
        baseline = request.model.trace_ids(ids, CaptureSpec.compact(storage=storage), truncated_from,
                                           cancel=request.cancel)
    first, rest = request.panels[:1], request.panels[1:]
    prepared = []
    for panel in first:
        request.cancel.check()
        prepared.append((panel.panel, panel(trace)))
    return TraceResult(request, trace, time.perf_counter() - t0, tuple(rest), baseline, tuple(prepared))


class TraceController(QObject):
    """Turns prompt edits into traces: debounced, one forward at a time, newest wins.

    ``set_text`` (typing) restarts a ``debounce_ms`` timer; ``request`` runs at once. Every request
    gets the next id. While a forward runs, a new request waits as the single pending one (a newer
    request replaces it), so the CPU never works on more than one pass; when the running one ends,
    its result is applied only if its id is still the newest, and the pending one starts.
    ``panels()`` (the presenter's ``requests``) gives the shown panels' requests, taken with each request.

    Signals
    -------
    trace_ready(TraceResult)
        The newest request's result (GUI thread).
    failed(str)
        The newest request failed: the message for the user.
    dropped(int)
        A stale result was discarded, or its pass abandoned at a layer boundary (its request id).
    requested(int)
        A new request was made (its id): whatever was computed for older traces is stale now.
    busy_changed(bool)

    A running pass that becomes stale (a newer request, ``shutdown``) is cancelled: it stops at its
    next layer boundary instead of running to the end.
    """

    trace_ready = Signal(object)
    failed = Signal(str)
    dropped = Signal(int)
    requested = Signal(int)
    busy_changed = Signal(bool)

    def __init__(self, panels: Callable[[], Sequence[PanelRequest]] = tuple, debounce_ms: int = 150,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.panels = panels
        self.spec: CaptureSpec | None = None
        self.interventions: tuple = ()  # applied to every trace from the next request on
        self.model: LoadedModel | None = None
        self.text = ""
        self._pinned: tuple[str, tuple[int, ...], Any] | None = None  # (text, exact ids, their ChatSpans)
        self.requests = Newest()
        self._running: TraceRequest | None = None
        self._pending: TraceRequest | None = None
        self._debounce = QTimer(self)
        self._debounce.setSingleShot(True)
        self._debounce.setInterval(debounce_ms)
        self._debounce.timeout.connect(self.request)

    @property
    def latest_id(self) -> int:
        return self.requests.id

    @property
    def busy(self) -> bool:
        return self._running is not None

    @property
    def edit_pending(self) -> bool:
        """Whether a typed edit waits for the debounce (its trace is not asked for yet)."""
        return self._debounce.isActive()

    def is_idle(self) -> bool:
        return self._running is None and self._pending is None and not self._debounce.isActive()

    def set_debounce_ms(self, ms: int) -> None:
        """How long typing must pause before the trace is asked for."""
        self._debounce.setInterval(ms)

    def set_model(self, model: LoadedModel | None) -> None:
        """Use ``model`` from the next request on; results still running for the old one are stale."""
        self.model = model
        self._pinned = None

    def pin_ids(self, text: str, ids: Sequence[int], chat: Any = None) -> None:
        """Trace ``text`` as exactly ``ids`` whenever it is requested (generated text: encoding the
        decoded text again may cut it into other tokens; a conversation: its template's ids, with
        ``chat``, their ``ChatSpans``, kept with every trace of them)."""
        self._pinned = (text, tuple(int(i) for i in ids), chat)

    @property
    def chat(self) -> Any:
        """The ChatSpans of the text traced now (None: not a templated conversation)."""
        return self._pinned[2] if self._pinned is not None and self._pinned[0] == self.text else None

    def set_text(self, text: str) -> None:
        """A prompt edit: traced once the edits pause for ``debounce_ms``."""
        self.text = text
        self._debounce.start()

    def request(self, text: str | None = None) -> int:
        """Trace ``text`` (default: the last text given) now; returns the request id (0: no model)."""
        self._debounce.stop()
        if text is not None:
            self.text = text
        if self.model is None:
            return 0
        pinned = self._pinned if self._pinned is not None and self._pinned[0] == self.text else None
        request = TraceRequest(self.requests.next(), self.model, self.text, tuple(self.panels()), self.spec,
                               ids=pinned[1] if pinned else None, interventions=tuple(self.interventions),
                               chat=pinned[2] if pinned else None)
        self.requested.emit(request.id)
        if self._running is None:
            self._start(request)
        else:
            self._running.cancel.set()  # stale now: it stops at its next layer boundary
            self._pending = request
        return request.id

    def shutdown(self) -> None:
        """Stop everything (the window closes): no new pass starts, the running one is cancelled."""
        self._debounce.stop()
        disconnect_all(self._debounce)
        self.model = None
        self._pending = None
        self.requests.drop()  # nothing running now is ever applied
        if self._running is not None:
            self._running.cancel.set()

    def _start(self, request: TraceRequest) -> None:
        was_busy = self.busy
        self._running = request
        if not was_busy:
            self.busy_changed.emit(True)
        answered: list[bool] = []

        def done(result: TraceResult) -> None:
            answered.append(True)
            self.trace_ready.emit(result)

        def failed(failure: Failure) -> None:
            answered.append(True)
            self.failed.emit(error_message(failure.exc))

        background.run(run_trace, request, newest=self.requests, request_id=request.id, on_done=done,
                       on_error=failed, on_finished=lambda: self._on_finished(request, answered))

    def _on_finished(self, request: TraceRequest, answered: list[bool]) -> None:
        if not answered:  # stale (a newer request) or abandoned at a layer boundary
            self.dropped.emit(request.id)
        self._running = None
        pending, self._pending = self._pending, None
        if pending is not None:
            self._start(pending)
        else:
            self.busy_changed.emit(False)
