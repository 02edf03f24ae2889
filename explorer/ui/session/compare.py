"""``Comparing``: a second model beside the Session's, on the same tokens (no widgets).

``open(source)`` loads model B on a worker (the same loader and checks as any model) and refuses it,
with one line, when it does not read the shown prompt as the same token ids (``compare.same_tokens``).
Then every trace the presenter shows (model A's) is compared with B's trace of the same ids, on a
worker (``core.analysis.compare.compare_traces``), and handed back to the presenter, which draws the
comparison views and says so (``drawn``, a COMPARISON frame): residual cosines and relative differences, each
head's Jensen-Shannon divergence, the next-token KL per position, where they first diverge; models
of different depth by relative depth, with a note. Only the newest comparison is applied.

B's trace holds only what the comparison needs (``compare_spec``: the residual stream, the logits,
q and k), and once compared only what B's lens reads (``lens_only``). With ``early`` (the default),
B's forward pass starts on a thread of its own (``background.run(own_thread=True)``: it must not take
a pool thread A's panels need) as soon as a trace of A is requested (the text is known then), beside A's, at a lower CPU priority (A's panels come first); the comparison then waits for it, or traces B again if A's ids turned out
different (pinned ids of generated text). A newer request cancels B's pass and the comparison
still waiting for it (they end without a word).

Signals: ``loading(str)``, ``ready(CompareResult)``, ``failed(str)`` (one line), ``closed()``.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, Signal

from explorer.core.cancel import Cancel
from explorer.ui.session import background
from explorer.ui.session.background import Newest
from explorer.ui.session.frame import Frame
from explorer.ui.session.presenter import Presenter
from explorer.ui.session.workers import LoadResult, TraceController

if TYPE_CHECKING:
    from explorer.core.analysis.compare import Comparison
    from explorer.core.loaded import LoadedModel
    from explorer.core.trace import Trace


@dataclass(frozen=True, eq=False)
class CompareResult:
    """Model A's shown trace, model B's trace of the same ids and their comparison."""

    a: Trace
    b: Trace
    comparison: Comparison
    name_a: str
    name_b: str
    seconds: float = 0.0  # B's forward pass and the comparison, on the worker
    b_forward: float = 0.0  # B's forward pass alone (beside A's when it started early)
    compare_seconds: float = 0.0  # the comparison alone


def b_trace(a_or_ids: Any, other: Any, cancel: Any = None) -> Trace:
    """B's trace of these ids with what the comparison needs (``compare_spec``), where B computes."""
    from explorer.core.analysis.compare import compare_spec

    ids = list(a_or_ids)
    storage = "host" if getattr(other.device, "type", str(other.device)) == "cpu" else "device"
    return other.trace_ids(ids, compare_spec(storage), cancel=cancel)


# how much lower B's early pass runs than A's (itself 10 below the GUI thread, ui/session/priority.py): nice 19,
# weight 15 against A's 110, about the 1 to 9 that A at 0 and B at 10 had: A's panels first, B on what is left
NICE = 9


def lower_priority(nice: int = NICE) -> None:
    """Lower this thread's CPU priority below the workers' (``explorer.ui.session.priority``; Linux: per
    thread, inherited by the threads it starts, so by torch's own threads for it); elsewhere nothing."""
    from explorer.ui.session import priority

    priority.lower_this_thread(priority.NICE + nice)


class EarlyB:
    """B's forward pass of a request's text, on a thread of its own, started when the request is made."""

    def __init__(self, other: Any, text: str) -> None:
        self.other, self.text, self.cancel = other, text, Cancel()
        self.ids: tuple[int, ...] | None = None
        self.trace: Trace | None = None
        self.seconds = 0.0
        self.done = threading.Event()
        background.run(self._run, own_thread=True)

    def _run(self) -> None:
        lower_priority()
        try:
            ids, _ = self.other.encode(self.text)
            self.ids = tuple(int(i) for i in ids)
            t0 = time.perf_counter()
            self.trace = b_trace(self.ids, self.other, self.cancel)
            self.seconds = time.perf_counter() - t0
        except Exception:  # noqa: BLE001 (cancelled or failed: the comparison traces B itself)
            self.trace = None
        finally:
            self.done.set()

    def trace_for(self, ids: tuple[int, ...]) -> Trace | None:
        """B's trace when it is of ``ids`` (waits for it), else None."""
        self.done.wait()
        return self.trace if self.trace is not None and self.ids == ids else None


def compare_pair(a: Trace, other: Any, early: EarlyB | None = None) -> tuple[Trace, Comparison, float, float, float]:
    """On the worker: B's trace of A's ids (the early one when it is of the same ids), and the comparison.
    Returns (B's trace, the comparison, seconds of both on this worker, B's forward seconds, the comparison's)."""
    from explorer.core.analysis.compare import compare_traces, lens_only

    from explorer.core.cancel import Cancelled

    t0 = time.perf_counter()
    ids = tuple(int(i) for i in a.token_ids)
    b = early.trace_for(ids) if early is not None else None
    if early is not None and early.cancel.is_set():
        raise Cancelled()  # a newer request came: this comparison is stale
    forward = early.seconds if b is not None else 0.0
    if b is None:
        b = b_trace(ids, other)
        forward = time.perf_counter() - t0
    t1 = time.perf_counter()
    comparison = compare_traces(a, b)
    t2 = time.perf_counter()
    return lens_only(b), comparison, t2 - t0, forward, t2 - t1


def check_tokenizers(a: Any, b: Any, prompt: str) -> str | None:
    """Why B cannot be compared with A on ``prompt`` (one line), or None."""
    from explorer.core.analysis.compare import TokenizerMismatch, same_tokens

    try:
        same_tokens(a, b, prompt or "The")
    except TokenizerMismatch as exc:
        return str(exc)
    return None


class Comparing(QObject):
    """The second model and the comparison of each shown trace (see the module docstring): it listens to
    the controller's requests (B's early pass) and the presenter's frames, and hands its results back to
    the presenter (``present_comparison``). A trace source: ``is_idle`` while nothing is loading or comparing."""

    loading = Signal(str)
    ready = Signal(object)
    failed = Signal(str)
    closed = Signal()
    early = True  # start B's forward pass when A's is requested, beside it (see the module docstring)

    def __init__(self, presenter: Presenter, controller: TraceController, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.presenter, self.controller = presenter, controller
        self.other: LoadedModel | None = None
        self.result: CompareResult | None = None
        self.requests = Newest()  # a load of B or a comparison: only the newest is applied
        self._busy: set[int] = set()  # the requests in flight
        self._place = ("cpu", "float32")  # where A computes (B computes there too)
        self._shut = False
        self._early: EarlyB | None = None      # B's pass for the latest request, not yet taken
        self._taken: EarlyB | None = None      # the one the running comparison waits for
        controller.requested.connect(self._on_requested)
        presenter.shown.connect(self._on_shown)

    @property
    def active(self) -> bool:
        return self.other is not None

    def is_idle(self) -> bool:
        return not self._busy

    def _run(self, func: Any, *args: Any, on_done: Any, on_error: Any) -> None:
        rid = self.requests.next()
        self._busy.add(rid)
        background.run(func, *args, newest=self.requests, request_id=rid, on_done=on_done, on_error=on_error,
                       on_finished=lambda: self._busy.discard(rid))

    def open(self, source: str) -> None:
        """Load ``source`` as model B in the background; compare once it is there."""
        if self.controller.model is None:
            self.failed.emit("load a model first: the comparison needs a model to compare with")
            return
        self.loading.emit(f"Loading {source} to compare…")
        device, dtype = self._place  # B computes where A does (device, precision)

        def load() -> Any:
            from explorer.core.checkpoint import load_checkpoint

            return load_checkpoint(source, device=device, dtype=dtype)

        self._run(load, on_done=self._loaded,
                  on_error=lambda failure: self._failed(f"could not open {source}: {failure.message}"))

    def _loaded(self, other: Any) -> None:
        loaded = self.controller.model
        if self._shut or loaded is None:
            return
        reason = check_tokenizers(loaded, other, self.controller.text)
        if reason is not None:
            self._failed(f"{other.name} cannot be compared with {loaded.name}: {reason}")
            return
        self.other = other
        self.loading.emit("")
        self.refresh()

    def _failed(self, message: str) -> None:
        if not self._shut:
            self.loading.emit("")
            self.failed.emit(message)

    def close(self) -> None:
        """Stop comparing (B is dropped)."""
        self.requests.drop()
        self._drop_early()
        self.other, self.result = None, None
        self.closed.emit()

    def shutdown(self) -> None:
        """The window closes: nothing in flight is applied, B's early pass stops."""
        self._shut = True
        self.requests.drop()
        self._drop_early()

    def _drop_early(self) -> None:
        for early in (self._early, self._taken):
            if early is not None:
                early.cancel.set()
        self._early = self._taken = None

    def _on_requested(self, _request_id: int) -> None:
        """A trace of A is requested: start B's of the same text now, on its own thread."""
        self._drop_early()
        if self.early and self.other is not None and self.controller.model is not None:
            self._early = EarlyB(self.other, self.controller.text)

    def model_changed(self, result: LoadResult) -> None:
        """A new model A: B computes where it does; B stays only if it still reads the prompt the same (else
        one line, and B goes)."""
        self._place = (result.request.device, result.request.dtype)
        if self.other is None:
            return
        reason = check_tokenizers(result.model, self.other, self.controller.text)
        if reason is not None:
            self.failed.emit(f"comparing stopped: {reason}")
            self.close()

    def refresh(self) -> None:
        """Compare the shown trace again (a new model A, or B just loaded)."""
        if self.presenter.frame is not None:
            self._on_shown(self.presenter.frame)

    def _on_shown(self, frame: Frame) -> None:
        other, loaded = self.other, self.controller.model
        if other is None or loaded is None:
            return
        a = frame.trace
        name_a, name_b = loaded.name, other.name
        if other.name == loaded.name:
            name_a, name_b = f"A: {name_a}", f"B: {name_b}"
        early = self._taken = self._early
        self._early = None
        self._run(compare_pair, a, other, early,
                  on_done=lambda got: self._compared(a, name_a, name_b, got),
                  on_error=lambda failure: self._failed(f"comparing failed: {failure.message}"))

    def _compared(self, a: Trace, name_a: str, name_b: str, got: tuple) -> None:
        if self._shut or self.other is None:
            return
        b, comparison, seconds, forward, compared = got
        self.result = CompareResult(a, b, comparison, name_a, name_b, seconds, forward, compared)
        self.presenter.present_comparison(a, self.result, f"{name_a} against {name_b}")
        self.ready.emit(self.result)
