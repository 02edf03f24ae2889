"""Background work for the window: loading checkpoints and running traces off the GUI thread.

The GUI thread builds a small immutable request, a superqt worker (a QRunnable on the global
QThreadPool) runs it, and the result comes back through a queued signal to be applied on the GUI
thread (napari's ``_layer_slicer`` protocol). Requests carry increasing ids and only the newest is
ever applied, so a slow, stale result can never overwrite a newer one.

The functions the workers run (``load_model_steps``, ``run_trace``) are plain and Qt-free apart from
their arguments, so they can be called directly in tests. torch is only imported inside them.
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, QTimer, Signal
from superqt.utils import create_worker

from explorer.core.cancel import Cancel, Cancelled
from explorer.core.errors import ExplorerError, InternalError, LoadCancelled
from explorer.core.trace import CaptureSpec, Trace
from explorer.ui.session.lifetime import release_when_finished
from explorer.ui.session.priority import background

if TYPE_CHECKING:
    from explorer.core.loaded import LoadedModel

log = logging.getLogger(__name__)

# a panel's prepare, bound to a snapshot taken on the GUI thread (Panel.preparer): runs on the worker
# it returns the panel's typed view of the trace (a frozen PanelView) or None (a panel that draws from the trace)
Preparer = Callable[[Trace], object]


def error_message(exc: BaseException) -> str:
    """What the user reads: an ExplorerError's own message; anything else is an internal error (a bug)."""
    if isinstance(exc, ExplorerError):
        return str(exc)
    return str(InternalError.wrap(exc))


def error_details(exc: BaseException) -> str:
    """The traceback, for a dialog's details pane (empty for an ExplorerError that is not an internal error)."""
    if isinstance(exc, ExplorerError) and not isinstance(exc, InternalError):
        return ""
    return "".join(traceback.format_exception(exc))


def run_in_background(func: Callable[..., Any], *args: Any, on_done: Callable[[Any], None] | None = None,
                      on_error: Callable[[BaseException], None] | None = None, **kwargs: Any):
    """Run ``func(*args, **kwargs)`` in the thread pool; ``on_done``/``on_error`` run on the GUI thread."""
    worker = create_worker(func, *args, _start_thread=False, _ignore_errors=True, **kwargs)
    if on_done is not None:
        worker.returned.connect(on_done)
    if on_error is not None:
        worker.errored.connect(on_error)
    else:
        worker.errored.connect(lambda exc: log.error("background task failed: %s", error_message(exc)))
    release_when_finished(worker)
    worker.start()
    return worker


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
        try:
            model = load_checkpoint(source, request.device, request.dtype, progress=progress, cancel=cancel,
                                    placement=placement)
        except LoadCancelled:
            raise
        except Exception as exc:  # noqa: BLE001 - every failure becomes a message, the next source is tried
            first = first or exc
            errors.append(f"{source or 'default model'}: {error_message(exc)}")
            continue
        return LoadResult(request, model, source, tuple(errors))
    assert first is not None
    raise first


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
        self._latest = 0
        self._running = 0
        self._workers: set[Any] = set()
        self._cancels: dict[int, Cancel] = {}
        self.last_error_details = ""  # the traceback of the last failure when it was a bug (details pane)
        self._tensor_read.connect(self._on_tensor_read)

    def cancel(self) -> None:
        """Stop the newest load at the next tensor boundary (its ``cancelled`` signal follows)."""
        event = self._cancels.get(self._latest)
        if event is not None:
            event.set()

    def cancel_all(self) -> None:
        """Stop every running load (closing the window): none of them will be applied."""
        for event in self._cancels.values():
            event.set()
        self._latest += 1  # whatever still finishes is stale

    @property
    def busy(self) -> bool:
        return self._running > 0

    def load(self, request: LoadRequest) -> LoadRequest:
        self._latest += 1
        request = LoadRequest(request.source, request.device, request.dtype, request.fallbacks,
                              request.quiet, self._latest)
        cancel = self._cancels[request.id] = Cancel()
        last = [-1]

        def progress(i: int, n: int, name: str, rid: int = request.id) -> None:  # worker thread
            step = (i * 100) // max(n, 1)
            if step != last[0] and not cancel.is_set():  # at most ~100 queued signals per load
                last[0] = step
                try:
                    self._tensor_read.emit(rid, i, n)
                except RuntimeError:  # the loader was deleted meanwhile (its window closed): nobody listens
                    cancel.set()

        worker = create_worker(load_model_steps, request, progress, cancel, _start_thread=False, _ignore_errors=True)
        worker.yielded.connect(lambda text, i=request.id: self._on_stage(i, text))
        worker.returned.connect(self._on_returned)
        worker.errored.connect(lambda exc, r=request: self._on_errored(r, exc))
        worker.finished.connect(lambda w=worker, rid=request.id: self._on_finished(w, rid))
        release_when_finished(worker)
        self._workers.add(worker)
        self._running += 1
        if self._running == 1:
            self.busy_changed.emit(True)
        worker.start()
        return request

    def _on_stage(self, request_id: int, text: str) -> None:
        if request_id == self._latest:
            self.stage.emit(text)

    def _on_returned(self, result: LoadResult) -> None:
        if result.request.id == self._latest:
            self.loaded.emit(result)

    def _on_tensor_read(self, request_id: int, i: int, n: int) -> None:
        if request_id == self._latest:
            self.progress.emit(i, n)

    def _on_errored(self, request: LoadRequest, exc: BaseException) -> None:
        if request.id != self._latest:
            return
        if isinstance(exc, LoadCancelled):
            self.cancelled.emit(request)
        else:
            self.last_error_details = error_details(exc)
            self.failed.emit(error_message(exc), request)

    def _on_finished(self, worker: Any, request_id: int) -> None:
        self._cancels.pop(request_id, None)
        self._workers.discard(worker)
        self._running -= 1
        if self._running == 0:
            self.busy_changed.emit(False)


# --- tracing -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class TraceRequest:
    id: int
    model: LoadedModel | None  # only the worker calls into it (None: a trace read from a file)
    text: str
    preparers: tuple[Preparer, ...] = ()
    spec: CaptureSpec | None = None
    requested_at: float = field(default_factory=time.perf_counter)
    ids: tuple[int, ...] | None = None  # exact token ids for ``text`` (generated text), else encode it
    cancel: Cancel = field(default_factory=Cancel, compare=False)  # set: stale, stop at the next layer
    interventions: tuple = ()  # explorer.core.interventions.spec.Intervention, applied to the run


@dataclass(frozen=True)
class TraceResult:
    request: TraceRequest
    trace: Trace
    worker_seconds: float  # encode + forward + the first panel's prepare
    rest: tuple[Preparer, ...] = ()  # the other panels' prepares (their snapshots of request time), not run yet
    baseline: Trace | None = None  # the same ids without interventions (only when the trace has some)
    prepared: tuple[tuple[Preparer, object], ...] = ()  # the first panel's prepare and the view it returned


def nonfinite(trace: Trace) -> Any:
    """Where the trace's numbers first stop being finite (None if they never do), computed once per trace."""
    from explorer.core.analysis.numerics import first_nonfinite

    return trace.memo(("nonfinite",), lambda: first_nonfinite(trace, check_logits=False))


def run_trace(request: TraceRequest) -> TraceResult:
    """Encode, run the forward pass, then let the first visible panel prepare what it will draw, so
    that it is drawn as soon as the trace exists; the other panels' prepares come back in ``rest``
    for the window to run in the background one by one, each panel drawn as its own is done
    (``explorer.ui.window.drawing``). Expensive views are computed later, per panel, by
    ``explorer.ui.session.progressive``.

    Raises ``Cancelled`` at the next layer boundary (or between panels) once ``request.cancel`` is set."""
    t0 = time.perf_counter()
    background()  # below the GUI thread, with torch's threads (explorer.ui.session.priority)
    if request.ids is not None:
        ids, truncated_from = list(request.ids), None
    else:
        ids, truncated_from = request.model.encode(request.text)
    request.cancel.check()
    trace = request.model.trace_ids(ids, request.spec, truncated_from, cancel=request.cancel,
                                    interventions=request.interventions)
    baseline = None
    if request.interventions:  # the run without them, for "what changed" (TraceResult.baseline)
        storage = CaptureSpec.default_for(request.model.device).storage  # on the device for an accelerator
        baseline = request.model.trace_ids(ids, CaptureSpec.compact(storage=storage), truncated_from,
                                           cancel=request.cancel)
    first, rest = request.preparers[:1], request.preparers[1:]
    prepared = []
    for prepare in first:
        request.cancel.check()
        prepared.append((prepare, prepare(trace)))
    return TraceResult(request, trace, time.perf_counter() - t0, tuple(rest), baseline, tuple(prepared))


def prepare_panels(trace: Trace, preparers: Sequence[Preparer], cancel: Cancel):
    """The other panels' prepares, one at a time (a generator for a worker thread): yields each
    one's index when it is done; returns each prepare with the view it returned (the window checks
    the numbers for NaN, ``nonfinite``, on a worker of its own meanwhile). A prepare that fails is
    logged and skipped (its view is None): its panel then computes what it needs when it draws."""
    background()
    views: list[tuple[Preparer, object]] = []
    for i, prepare in enumerate(preparers):
        cancel.check()
        view = None
        try:
            view = prepare(trace)
        except Cancelled:
            raise
        except Exception:  # noqa: BLE001 - one panel's bug leaves the others drawn
            log.exception("preparing a panel failed")
        views.append((prepare, view))
        yield i
    cancel.check()
    return views


class TraceController(QObject):
    """Turns prompt edits into traces: debounced, one forward at a time, newest wins.

    ``set_text`` (typing) restarts a ``debounce_ms`` timer; ``request`` runs at once. Every request
    gets the next id. While a forward runs, a new request waits as the single pending one (a newer
    request replaces it), so the CPU never works on more than one pass; when the running one ends,
    its result is applied only if its id is still the newest, and the pending one starts.

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

    def __init__(self, preparers: Callable[[], Sequence[Preparer]] = tuple, debounce_ms: int = 150,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._preparers = preparers
        self.spec: CaptureSpec | None = None
        self.interventions: tuple = ()  # applied to every trace from the next request on
        self.model: LoadedModel | None = None
        self.text = ""
        self._pinned: tuple[str, tuple[int, ...]] | None = None
        self._latest = 0
        self._running: TraceRequest | None = None
        self._pending: TraceRequest | None = None
        self._worker: Any = None
        self.debounce = QTimer(self)
        self.debounce.setSingleShot(True)
        self.debounce.setInterval(debounce_ms)
        self.debounce.timeout.connect(self.request)

    @property
    def latest_id(self) -> int:
        return self._latest

    @property
    def busy(self) -> bool:
        return self._running is not None

    def is_idle(self) -> bool:
        return self._running is None and self._pending is None and not self.debounce.isActive()

    def set_model(self, model: LoadedModel | None) -> None:
        """Use ``model`` from the next request on; results still running for the old one are stale."""
        self.model = model
        self._pinned = None

    def pin_ids(self, text: str, ids: list[int]) -> None:
        """Trace ``text`` as exactly ``ids`` whenever it is requested (generated text: encoding the
        decoded text again may cut it into other tokens)."""
        self._pinned = (text, tuple(int(i) for i in ids))

    def set_text(self, text: str) -> None:
        """A prompt edit: traced once the edits pause for ``debounce_ms``."""
        self.text = text
        self.debounce.start()

    def request(self, text: str | None = None) -> int:
        """Trace ``text`` (default: the last text given) now; returns the request id (0: no model)."""
        self.debounce.stop()
        if text is not None:
            self.text = text
        if self.model is None:
            return 0
        self._latest += 1
        ids = self._pinned[1] if self._pinned is not None and self._pinned[0] == self.text else None
        request = TraceRequest(self._latest, self.model, self.text, tuple(self._preparers()), self.spec, ids=ids,
                               interventions=tuple(self.interventions))
        self.requested.emit(request.id)
        if self._running is None:
            self._start(request)
        else:
            self._running.cancel.set()  # stale now: it stops at its next layer boundary
            self._pending = request
        return request.id

    def shutdown(self) -> None:
        """Stop everything (the window closes): no new pass starts, the running one is cancelled."""
        self.debounce.stop()
        self.model = None
        self._pending = None
        self._latest += 1  # nothing running now is ever applied
        if self._running is not None:
            self._running.cancel.set()

    def _start(self, request: TraceRequest) -> None:
        was_busy = self.busy
        self._running = request
        worker = create_worker(run_trace, request, _start_thread=False, _ignore_errors=True)
        worker.returned.connect(self._on_returned)
        worker.errored.connect(self._on_errored)
        worker.finished.connect(self._on_finished)
        release_when_finished(worker)
        self._worker = worker
        if not was_busy:
            self.busy_changed.emit(True)
        worker.start()

    def _on_returned(self, result: TraceResult) -> None:
        if result.request.id == self._latest:
            self.trace_ready.emit(result)
        else:
            self.dropped.emit(result.request.id)

    def _on_errored(self, exc: BaseException) -> None:
        if isinstance(exc, Cancelled):
            if self._running is not None:
                self.dropped.emit(self._running.id)
            return
        if self._running is not None and self._running.id == self._latest:
            if not isinstance(exc, ExplorerError):
                log.error("trace failed", exc_info=exc)
            self.failed.emit(error_message(exc))
        elif self._running is not None:
            self.dropped.emit(self._running.id)

    def _on_finished(self) -> None:
        self._running, self._worker = None, None
        pending, self._pending = self._pending, None
        if pending is not None:
            self._start(pending)
        else:
            self.busy_changed.emit(False)
