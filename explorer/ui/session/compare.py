"""``Comparing``: a second model beside the Session's, on the same tokens (no widgets).

``open(source)`` loads model B on a worker (the same loader and checks as any model) and refuses it,
with one line, when it does not read the shown prompt as the same token ids (``compare.same_tokens``).
Then every trace the Session shows (model A's) is compared with B's trace of the same ids, on a
worker (``core.analysis.compare.compare_traces``): residual cosines and relative differences, each
head's Jensen-Shannon divergence, the next-token KL per position, where they first diverge; models
of different depth by relative depth, with a note. Only the newest comparison is applied.

Signals: ``loading(str)``, ``ready(CompareResult)``, ``failed(str)`` (one line), ``closed()``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, Signal

from explorer.ui.session.workers import error_message, run_in_background

if TYPE_CHECKING:
    from explorer.core.analysis.compare import Comparison
    from explorer.core.loaded import LoadedModel
    from explorer.core.trace import Trace
    from explorer.ui.session.session import Session
    from explorer.ui.session.workers import TraceResult


@dataclass(frozen=True, eq=False)
class CompareResult:
    """Model A's shown trace, model B's trace of the same ids and their comparison."""

    a: Trace
    b: Trace
    comparison: Comparison
    name_a: str
    name_b: str
    seconds: float = 0.0  # B's forward pass and the comparison, on the worker


def compare_pair(a: Trace, other: Any) -> tuple[Trace, Comparison, float]:
    """On the worker: B's trace of A's ids, and the comparison."""
    from explorer.core.analysis.compare import compare_traces
    from explorer.core.trace import CaptureSpec

    t0 = time.perf_counter()
    b = other.trace_ids(list(a.token_ids), CaptureSpec.compact())
    return b, compare_traces(a, b), time.perf_counter() - t0


def check_tokenizers(a: Any, b: Any, prompt: str) -> str | None:
    """Why B cannot be compared with A on ``prompt`` (one line), or None."""
    from explorer.core.analysis.compare import TokenizerMismatch, same_tokens

    try:
        same_tokens(a, b, prompt or "The")
    except TokenizerMismatch as exc:
        return str(exc)
    return None


class Comparing(QObject):
    """The Session's second model and the comparison of each shown trace (see the module docstring)."""

    loading = Signal(str)
    ready = Signal(object)
    failed = Signal(str)
    closed = Signal()

    def __init__(self, session: Session) -> None:
        super().__init__(session)
        self.session = session
        self.other: LoadedModel | None = None
        self.result: CompareResult | None = None
        self._latest = 0
        session.trace_ready.connect(self._on_trace_ready)
        session.model_changed.connect(self._on_model_changed)

    @property
    def active(self) -> bool:
        return self.other is not None

    def open(self, source: str) -> None:
        """Load ``source`` as model B in the background; compare once it is there."""
        if self.session.loaded is None:
            self.failed.emit("load a model first: the comparison needs a model to compare with")
            return
        self._latest += 1
        rid = self._latest
        self.loading.emit(f"Loading {source} to compare…")

        request = self.session.model_request  # B computes where A does (device, precision)
        device = request.device if request is not None else "cpu"
        dtype = request.dtype if request is not None else "float32"

        def load() -> Any:
            from explorer.core.checkpoint import load_checkpoint

            return load_checkpoint(source, device=device, dtype=dtype)

        run_in_background(load, on_done=lambda other: self._loaded(rid, other),
                          on_error=lambda exc: self._failed(rid, f"could not open {source}: {error_message(exc)}"))

    def _loaded(self, rid: int, other: Any) -> None:
        if rid != self._latest or self.session.closed or self.session.loaded is None:
            return
        reason = check_tokenizers(self.session.loaded, other, self.session.prompt)
        if reason is not None:
            self._failed(rid, f"{other.name} cannot be compared with {self.session.loaded.name}: {reason}")
            return
        self.other = other
        self.loading.emit("")
        self.refresh()

    def _failed(self, rid: int, message: str) -> None:
        if rid == self._latest and not self.session.closed:
            self.loading.emit("")
            self.failed.emit(message)

    def close(self) -> None:
        """Stop comparing (B is dropped)."""
        self._latest += 1
        self.other, self.result = None, None
        self.closed.emit()

    def _on_model_changed(self, _result: object) -> None:
        """A new model A: B stays only if it still reads the prompt the same (else one line, and B goes)."""
        if self.other is None or self.session.loaded is None:
            return
        reason = check_tokenizers(self.session.loaded, self.other, self.session.prompt)
        if reason is not None:
            self.failed.emit(f"comparing stopped: {reason}")
            self.close()

    def refresh(self) -> None:
        """Compare the shown trace again (a new model A, or B just loaded)."""
        if self.session.result is not None:
            self._on_trace_ready(self.session.result)

    def _on_trace_ready(self, result: TraceResult) -> None:
        other, loaded = self.other, self.session.loaded
        if other is None or loaded is None:
            return
        a = result.trace
        self._latest += 1
        rid = self._latest
        name_a, name_b = loaded.name, other.name
        same = other.name == loaded.name
        if same:
            name_a, name_b = f"A: {name_a}", f"B: {name_b}"
        run_in_background(compare_pair, a, other,
                          on_done=lambda got: self._compared(rid, a, name_a, name_b, got),
                          on_error=lambda exc: self._failed(rid, f"comparing failed: {error_message(exc)}"))

    def _compared(self, rid: int, a: Trace, name_a: str, name_b: str, got: tuple) -> None:
        if rid != self._latest or self.session.closed or self.other is None:
            return
        b, comparison, seconds = got
        self.result = CompareResult(a, b, comparison, name_a, name_b, seconds)
        self.ready.emit(self.result)
