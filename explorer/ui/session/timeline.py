"""``Timeline``: a generation's steps as traces, from one trace of the whole sequence (no widgets).

After a generation, ``start(text, ids, n_prompt, scores)`` asks the Session for one trace of the whole
sequence (the prompt and every generated token). Step t is the prompt plus the first t generated
tokens: ``set_step(t)`` cuts it from that one trace (``core.analysis.timeline.trace_at_step``: views, no
forward pass, no copy) and makes it the Session's shown result, so every panel prepares and draws it
as any other trace; the token being produced at step t (generated token t) is predicted by the cut
trace's last position, which becomes the selected token. Only the whole sequence's trace is held (and
the step on screen, views into it): memory is that of one trace, whatever the number of steps.

Where a prefix of the trace is not the trace of the prefix (``why_not_sliceable``: encoders, RoPE
scaling that follows the length, mean-ablations), each step is traced afresh instead.

Signals: ``changed(object)``: the ``TimelineStep`` on screen now, or None when the timeline ended
(another prompt, another model).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, Signal

from explorer.core.analysis.timeline import trace_at_step, why_not_sliceable

if TYPE_CHECKING:
    from explorer.core.trace import Trace
    from explorer.ui.session.session import Session
    from explorer.ui.session.workers import TraceResult


@dataclass(frozen=True, eq=False)
class TimelineStep:
    """What the panels read of the timeline at step t (frozen; carried in their snapshots)."""

    full: Trace                    # the one trace of the whole sequence
    n_prompt: int
    step: int                      # t: the prompt plus the first t generated tokens are on screen
    total: int                     # T: generated tokens in all
    scores: Any = None             # generated token t's StepScores (sampling controls), where known

    @property
    def produced(self) -> int | None:
        """The sequence position of the token produced at this step (None at the last step: none)."""
        return self.n_prompt + self.step if self.step < self.total else None

    @property
    def predicting(self) -> int:
        """The position whose next-token prediction is that token: the last one on screen."""
        return self.n_prompt + self.step - 1

    def label(self) -> str:
        return f"step {self.step} of {self.total}"


class Timeline(QObject):
    """The Session's generation timeline (see the module docstring)."""

    changed = Signal(object)

    def __init__(self, session: Session) -> None:
        super().__init__(session)
        self.session = session
        self.full: TraceResult | None = None     # the whole sequence's trace (and baseline)
        self.text = ""
        self.ids: tuple[int, ...] = ()
        self.n_prompt = 0
        self.scores: tuple[Any, ...] = ()
        self.step = 0
        self.reason: str | None = None           # why steps are traced afresh (None: cut from one trace)
        self._pending: int | None = None         # the request of the whole sequence's trace
        self._shown: Trace | None = None
        self._switch = 0                         # the newest step switch (older ones are never shown)
        self.current: TimelineStep | None = None
        session.trace_ready.connect(self._on_trace_ready)
        session.model_changed.connect(lambda _r: self.stop())

    @property
    def active(self) -> bool:
        return self.full is not None

    @property
    def total(self) -> int:
        return len(self.ids) - self.n_prompt

    def start(self, text: str, ids: Sequence[int], n_prompt: int, scores: Sequence[Any] = (),
              step: int | None = None) -> int:
        """Trace ``ids`` (``n_prompt`` of them the prompt, the rest generated) once; then show ``step``
        (default: the last). ``scores``: each generated token's StepScores. The request id (0: no model)."""
        ids = tuple(int(i) for i in ids)
        if not 0 < n_prompt <= len(ids):
            raise ValueError(f"a prompt of 1..{len(ids)} tokens, not {n_prompt}")
        self.text, self.ids, self.n_prompt, self.scores = text, ids, int(n_prompt), tuple(scores)
        self.step = self.total if step is None else max(0, min(int(step), self.total))
        self.full, self._shown, self.reason = None, None, None
        self._pending = self.session.trace_ids(text, ids, _timeline=True)
        return self._pending

    def stop(self) -> None:
        if self.full is None and self._pending is None:
            return
        self.full, self._pending, self._shown, self.current = None, None, None, None
        self.changed.emit(None)

    def owns(self, ids: Sequence[int]) -> bool:
        """Whether ``ids`` are one of this timeline's steps (a generated token clicked)."""
        n = len(ids)
        return self.active and self.n_prompt <= n <= len(self.ids) and tuple(ids) == self.ids[:n]

    def set_step(self, t: int) -> None:
        """Show step ``t`` (clamped to 0..T) on every panel."""
        if self.full is None:
            return
        self.step = max(0, min(int(t), self.total))
        if self.reason is not None:  # each step its own trace
            self.session.trace_ids(self.text, self.ids[: self.n_prompt + self.step], _timeline=True)
            return
        full = self.full
        trace = trace_at_step(full.trace, self.n_prompt, self.step)
        baseline = None if full.baseline is None else trace_at_step(full.baseline, self.n_prompt, self.step)
        self._publish(trace)  # the selection and the step first: the panels' snapshots carry them
        ids = self.ids[: self.n_prompt + self.step]
        text = self.text if len(ids) == len(self.ids) else self.session.loaded.tokenizer.decode(list(ids))
        self.session.show_step(text, ids)  # the prompt box says what is on screen
        request = dataclasses.replace(full.request, text=text, ids=ids, requested_at=time.perf_counter())
        preparers = tuple(self.session.preparers())
        self._switch += 1
        switch = self._switch

        def prepare_first() -> tuple:  # on a worker: the GUI thread is free at once (holding ] steps on)
            return tuple((prepare, prepare(trace)) for prepare in preparers[:1])

        def show(prepared: tuple) -> None:
            if switch != self._switch or self.session.closed or self._shown is not trace:
                return  # a newer step (or another trace) came meanwhile
            self.session.show_result(TraceResult(request, trace, 0.0, preparers[1:], baseline, prepared))

        from explorer.ui.session.workers import TraceResult, run_in_background

        run_in_background(prepare_first, on_done=show, on_error=lambda _exc: show(()))

    def restart(self) -> int:
        """Trace the whole sequence again (the interventions changed), staying at this step."""
        return self.start(self.text, self.ids, self.n_prompt, self.scores, self.step)

    def step_by(self, delta: int) -> None:
        self.set_step(self.step + delta)

    def _publish(self, trace: Trace) -> None:
        self._shown = trace
        scores = self.scores[self.step] if self.step < len(self.scores) else None
        self.current = TimelineStep(self.full.trace, self.n_prompt, self.step, self.total, scores)
        # the position producing the token, selected without redrawing the panels on the old trace: the
        # snapshots taken now carry it, and the panels draw it with the step's trace
        selection = self.session.selection
        blocked = selection.blockSignals(True)
        try:
            selection.set_token(self.current.predicting)
        finally:
            selection.blockSignals(blocked)
        self.changed.emit(self.current)

    def _on_trace_ready(self, result: TraceResult) -> None:
        trace, ids = result.trace, result.request.ids
        if trace is self._shown:
            return
        if self._pending is not None and result.request.id == self._pending:
            self._pending = None
            self.full = result
            self.reason = why_not_sliceable(trace)
            if self.reason is None or self.step != self.total:
                self.set_step(self.step)
            else:
                self._publish(trace)
            return
        if self.active and self.reason is not None and ids is not None and self.owns(ids):
            self.step = len(ids) - self.n_prompt
            self._publish(trace)  # a step traced afresh
            return
        if self.active or self._pending is not None:
            if self._pending is not None and result.request.id < self._pending:
                return  # an older trace finishing before ours
            self.stop()  # another prompt or model: the timeline ends
