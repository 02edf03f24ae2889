"""``Timeline``: a generation's steps as traces, from one trace of the whole sequence (no widgets).

After a generation, ``start(text, ids, n_prompt, scores)`` asks the trace controller for one trace of the
whole sequence (the prompt and every generated token). Step t is the prompt plus the first t generated
tokens: ``set_step(t)`` cuts it from that one trace (``core.analysis.timeline.trace_at_step``: views, no
forward pass, no copy) and hands it to the presenter (a trace source), so every panel prepares and draws
it as any other trace; the token being produced at step t (generated token t) is predicted by the cut
trace's last position, which becomes the selected token. Only the whole sequence's trace is held (and
the step on screen, views into it): memory is that of one trace, whatever the number of steps.

Where a prefix of the trace is not the trace of the prefix (``why_not_sliceable``: encoders, RoPE
scaling that follows the length, mean-ablations), each step is traced afresh instead.

While a generation streams in (``stream``, each time tokens arrive) there is no whole sequence yet:
step t is traced on its own, the prompt plus the first t tokens, through the controller's requests (a
worker; the panels prepare and draw it as any trace). The timeline follows the newest step (one trace
in flight at a time, and where ``paced`` once every panel has drawn it: then the newest) unless the user chose a step, where it stays ("paused at t");
``waiting`` is the step asked for whose trace is not on screen yet (the bar says "computing step t…").
When the generation ends (``finish``, also after Stop) the whole sequence is traced once, as above,
and the step on screen stays.

The memory budget (``core.budget``): before the whole sequence is traced, its bytes (``estimate_nbytes``
from the trace on screen) are reserved in the global budget; once it exists the trace holds its own
bytes (a Trace holds what it stores) and the reservation is given back; both end with the timeline.
If it does not fit, no whole-sequence trace is made: each step is traced on its own when asked
(``budget_reason`` says so in the bar).

It reads the presenter (``shown``: which trace is on screen; ``drawn``: a followed step's panels are all
drawn, where ``paced``) and asks the controller for traces; it never calls the Session.

Signals: ``changed(object)``: the ``TimelineStep`` on screen now (or being computed), or None when the
timeline ended (another prompt, another model); ``prompt_shown(str)``: the prompt box says this text now
(the step's).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, Signal

from explorer.core.analysis.timeline import estimate_nbytes, trace_at_step, why_not_sliceable
from explorer.core.budget import format_size, global_budget
from explorer.ui.session.frame import STEP, Frame, Source
from explorer.ui.session.presenter import Presenter
from explorer.ui.session.selection import Selection
from explorer.ui.session.workers import TraceController

if TYPE_CHECKING:
    from explorer.core.trace import Trace


@dataclass(frozen=True, eq=False)
class TimelineStep:
    """What the panels read of the timeline at step t (frozen; carried in their snapshots)."""

    full: Trace | None             # the one trace of the whole sequence (None: the step is traced on its own)
    n_prompt: int
    step: int                      # t: the prompt plus the first t generated tokens are on screen
    total: int                     # T: generated tokens in all (so far, while streaming)
    scores: Any = None             # generated token t's StepScores (sampling controls), where known
    produced_id: int | None = None  # generated token t's id (None at the last step)

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
    prompt_shown = Signal(str)

    def __init__(self, presenter: Presenter, controller: TraceController, selection: Selection,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.presenter, self.controller, self.selection = presenter, controller, selection
        self.full: Frame | None = None           # the whole sequence's trace (and baseline)
        self.text = ""
        self.ids: tuple[int, ...] = ()
        self.n_prompt = 0
        self.scores: tuple[Any, ...] = ()
        self.step = 0
        self.reason: str | None = None           # why steps are traced afresh (None: cut from one trace)
        self.streaming = False                   # a generation streams in: each step traced on its own
        self.follow = True                       # while streaming: show the newest step as tokens arrive
        self.budget_reason: str | None = None    # the whole sequence does not fit the memory budget
        self.waiting: int | None = None          # the step asked for whose trace is not on screen yet
        self.run_key: Any = None                 # the generation streaming in (its run id)
        self._ended_run: Any = None              # a run whose timeline the user ended (another prompt)
        self._reservation: Any = None            # the whole sequence's bytes, until its trace holds them
        self._step_request: tuple[int, int] | None = None  # (request id, step) of a step traced on its own
        self.paced = True                        # following waits for ``drawn`` (every panel has the step)
        self._drawing = False                    # a followed step is on screen, its panels not all drawn yet
        self._pending: int | None = None         # the request of the whole sequence's trace
        self._shown: Trace | None = None
        self.current: TimelineStep | None = None
        self.chat: Any = None                    # the whole sequence's ChatSpans (a conversation's reply), else None
        presenter.shown.connect(self._on_shown)
        presenter.drawn.connect(lambda frame: self.drawn(frame.trace))

    @property
    def on_demand(self) -> bool:
        """Whether each step is traced on its own when asked (streaming, or over the memory budget)."""
        return self.streaming or self.budget_reason is not None

    @property
    def active(self) -> bool:
        return self.full is not None or (self.on_demand and bool(self.ids))

    @property
    def total(self) -> int:
        return len(self.ids) - self.n_prompt

    @property
    def reserving(self) -> bool:
        """Whether the whole sequence's bytes are reserved in the memory budget (until its trace holds them)."""
        return self._reservation is not None

    def is_idle(self) -> bool:
        """Whether no step is being computed (a trace source for the presenter's ``is_idle``)."""
        return self.waiting is None and self._pending is None and self._step_request is None

    def status(self) -> str:
        """What the bar says beside the step: computing, following, paused, traced on its own."""
        if self.waiting is not None:
            return f"computing step {self.waiting}\u2026"
        if self.streaming:
            return "following" if self.follow else f"paused at {self.step}"
        if self.budget_reason is not None:
            return "each step traced on its own (memory budget)"
        return ""

    # --- a generation streaming in ---------------------------------------------------------------
    def stream(self, key: Any, prompt_ids: Sequence[int], generated: Sequence[int], scores: Sequence[Any] = (),
               chat: Any = None) -> None:
        """Tokens of the generation ``key`` arrived (``generated``: all so far): the range grows; the
        newest step is traced and shown unless the user chose a step. ``chat``: the ChatSpans of the prompt
        and the tokens so far (an assistant's reply to a conversation), kept with every step's trace."""
        if key == self._ended_run or not generated:
            return
        self.chat = chat
        if not self.streaming or key != self.run_key:  # a new generation: the old timeline is dropped
            self._release()
            self.full, self._pending, self._shown, self.current, self.reason = None, None, None, None, None
            self.run_key, self.streaming, self.follow, self.budget_reason = key, True, True, None
            self.n_prompt, self.step, self.text, self._step_request = len(prompt_ids), 0, "", None
            self.ids, self.waiting = (), None
        ids = tuple(int(i) for i in prompt_ids) + tuple(int(i) for i in generated)
        if len(ids) == len(self.ids):
            return
        self.ids, self.scores = ids, tuple(scores)
        if self.follow and self._step_request is None and not self._drawing:
            self._goto(self.total)
        else:  # the range grows; a followed step in flight asks for the newest when it arrives
            self._set_current()
            self.changed.emit(self.current)

    def finish(self, key: Any, text: str, ids: Sequence[int], n_prompt: int, scores: Sequence[Any] = (),
               chat: Any = None) -> int:
        """The generation ``key`` ended (finished, stopped or cancelled): its whole sequence becomes the
        timeline, the step on screen staying where the user put it. The request id (0: none)."""
        if key is not None and key == self._ended_run:
            return 0
        paused = self.streaming and key == self.run_key and not self.follow
        self.streaming = False
        return self.start(text, ids, n_prompt, scores, self.step if paused else None, chat)

    # --- the whole sequence ----------------------------------------------------------------------
    def start(self, text: str, ids: Sequence[int], n_prompt: int, scores: Sequence[Any] = (),
              step: int | None = None, chat: Any = None) -> int:
        """Trace ``ids`` (``n_prompt`` of them the prompt, the rest generated) once; then show ``step``
        (default: the last). ``scores``: each generated token's StepScores; ``chat``: the ids' ChatSpans. The
        request id (0: no model; -1: over the memory budget, each step traced on its own)."""
        ids = tuple(int(i) for i in ids)
        self.chat = chat if chat is not None and chat.n_tokens >= len(ids) else None
        if not 0 < n_prompt <= len(ids):
            raise ValueError(f"a prompt of 1..{len(ids)} tokens, not {n_prompt}")
        self._release()
        self.text, self.ids, self.n_prompt, self.scores = text, ids, int(n_prompt), tuple(scores)
        self.step = self.total if step is None else max(0, min(int(step), self.total))
        self.streaming, self.budget_reason, self._step_request, self._drawing = False, None, None, False
        self.full, self.reason = None, None
        shown = self._shown
        on_screen = shown is not None and tuple(shown.token_ids) == ids[: self.n_prompt + self.step]
        self.budget_reason = self._reserve(len(ids))
        if self.budget_reason is not None:  # each step on its own, from the one on screen
            self._pending = None
            if on_screen:
                self.waiting = None
                self._set_current()
                self.changed.emit(self.current)
            else:
                self._goto(self.step)
            return -1
        self._shown = None
        streamed = self.current is not None
        if streamed:  # before the request: the panels' snapshots carry the step (the range: every token)
            self._set_current()
        self._pending = self._trace(text, ids)
        self.waiting = None if on_screen else self.step
        if streamed:
            self.changed.emit(self.current)
        return self._pending

    def _reserve(self, n_tokens: int) -> str | None:
        """Reserve the whole sequence's bytes in the budget; why not, where they do not fit."""
        like = self.presenter.trace
        if like is None:
            return None
        need = estimate_nbytes(like, n_tokens)
        budget = global_budget()
        self._reservation = budget.reserve(need)
        if self._reservation is not None:
            return None
        return (f"the whole sequence's trace ({format_size(need)}) does not fit the memory budget "
                f"({format_size(budget.limit)}, {format_size(budget.held)} held): each step is traced on its own")

    def _release(self) -> None:
        if self._reservation is not None:
            self._reservation.release()
            self._reservation = None

    def stop(self) -> None:
        self._release()
        if self.streaming:
            self._ended_run = self.run_key  # the rest of that generation does not bring it back
        if self.full is None and self._pending is None and not self.active:
            self.streaming, self.budget_reason, self.waiting = False, None, None
            return
        self.full, self._pending, self._shown, self.current = None, None, None, None
        self.streaming, self.budget_reason, self.waiting, self._step_request = False, None, None, None
        self.ids = ()
        self.changed.emit(None)

    def owns(self, ids: Sequence[int]) -> bool:
        """Whether ``ids`` are one of this timeline's steps (a generated token clicked)."""
        n = len(ids)
        return self.active and self.n_prompt <= n <= len(self.ids) and tuple(ids) == self.ids[:n]

    # --- steps -------------------------------------------------------------------------------------
    def set_step(self, t: int) -> None:
        """Show step ``t`` (clamped to 0..T) on every panel (while streaming: the user chose it, so the
        timeline stays there as tokens arrive, unless it is the newest)."""
        if not self.active:
            return
        t = max(0, min(int(t), self.total))
        if self.streaming:
            self.follow = t >= self.total
        if self.on_demand:
            self._goto(t)
            return
        self.step = t
        if self.reason is not None:  # each step its own trace
            self._trace(self.text, self.ids[: self.n_prompt + self.step])
            return
        full = self.full
        trace = trace_at_step(full.trace, self.n_prompt, self.step)
        baseline = None if full.baseline is None else trace_at_step(full.baseline, self.n_prompt, self.step)
        self._publish(trace)  # the selection and the step first: the panels' snapshots carry them
        ids = self.ids[: self.n_prompt + self.step]
        text = self.text if len(ids) == len(self.ids) else self._decode(ids)
        self.controller.pin_ids(text, ids, self.chat_for(ids))  # the prompt box says what is on screen
        self.controller.text = text
        self.prompt_shown.emit(text)
        # the first panel prepared on a worker (the GUI thread is free at once: holding ] steps on); a newer
        # step, or another trace, meanwhile wins
        self.presenter.present_trace(trace, Source(STEP, text, ids=ids, label=self.current.label()), baseline)

    def _decode(self, ids: Sequence[int]) -> str:
        model = self.controller.model
        return model.tokenizer.decode(list(ids)) if model is not None else self.text

    def _trace(self, text: str, ids: Sequence[int]) -> int:
        """Ask for a trace of ``text`` as exactly ``ids`` (the prompt box says ``text``); the request id."""
        model = self.controller.model
        if model is None:
            return 0
        ids = list(ids)[: model.config.n_ctx]
        self.controller.pin_ids(text, ids, self.chat_for(ids))
        self.controller.text = text
        self.prompt_shown.emit(text)
        return self.controller.request(text)

    def _goto(self, t: int) -> None:
        """Trace step ``t`` on its own (the prompt plus the first t tokens) through the Session's requests."""
        self.step, self._drawing = t, False
        ids = self.ids[: self.n_prompt + t]
        self._set_current()  # before the request: the panels' snapshots carry the step and its selection
        self.waiting = t
        self._step_request = (self._trace(self._decode(ids), ids), t)
        self.changed.emit(self.current)

    def drawn(self, trace: Trace) -> None:
        """Every shown panel has ``trace`` (the presenter's ``drawn``, where ``paced``): a followed step's
        panels are complete, so the newest step is traced next (following never leaves them half drawn)."""
        if trace is not self._shown or not self._drawing:
            return
        self._drawing = False
        if self.streaming and self.follow and self.step < self.total and self._step_request is None:
            self._goto(self.total)

    def restart(self) -> int:
        """Trace the whole sequence again (the interventions changed), staying at this step."""
        if self.on_demand:
            self._goto(self.step)
            return self._step_request[0]
        return self.start(self.text, self.ids, self.n_prompt, self.scores, self.step, self.chat)

    def chat_for(self, ids: Sequence[int]) -> Any:
        """The ChatSpans of the first ``len(ids)`` tokens of the sequence (None: not a conversation's reply)."""
        return self.chat.cut(len(ids)) if self.chat is not None and self.chat.n_tokens >= len(ids) else None

    def step_by(self, delta: int) -> None:
        self.set_step(self.step + delta)

    def _set_current(self) -> None:
        scores = self.scores[self.step] if self.step < len(self.scores) else None
        produced = self.ids[self.n_prompt + self.step] if self.step < self.total else None
        full = self.full.trace if self.full is not None else None
        self.current = TimelineStep(full, self.n_prompt, self.step, self.total, scores, produced)
        # the position producing the token, selected without redrawing the panels on the old trace: the
        # snapshots taken now carry it, and the panels draw it with the step's trace
        selection = self.selection
        blocked = selection.blockSignals(True)
        try:
            selection.set_token(self.current.predicting)
        finally:
            selection.blockSignals(blocked)

    def _publish(self, trace: Trace) -> None:
        self._shown = trace
        self.waiting = None
        self._set_current()
        self.changed.emit(self.current)

    def _on_shown(self, frame: Frame) -> None:
        trace, ids, request_id = frame.trace, frame.source.ids, frame.source.request_id
        if trace is self._shown or frame.source.kind == STEP:
            return
        if self._step_request is not None and request_id == self._step_request[0]:
            self._step_request, self._shown = None, trace  # a step traced on its own, on screen now
            self._drawing = self.paced and self.streaming and self.follow
            if self.streaming and self.follow and self.step < self.total and not self._drawing:
                self._goto(self.total)  # tokens came meanwhile: the newest next
                return
            self.waiting = None
            self._set_current()
            self.changed.emit(self.current)
            return
        if self._pending is not None and request_id == self._pending:
            self._pending = None
            self.full = frame
            self._release()  # the trace holds its own bytes now (Trace holds what it stores)
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
            if self._pending is not None and 0 < request_id < self._pending:
                return  # an older trace finishing before ours
            self.stop()  # another prompt or model: the timeline ends
