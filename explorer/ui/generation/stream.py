"""Generating in a worker and pacing what reaches the GUI thread.

The generator (``explorer.core.generation.generate.generate_steps``) runs in a superqt generator
worker (``stream_steps``); a ``Cancel`` (explorer.core.cancel) is its ``cancel``, so Stop ends it before the next
forward pass. Steps reach the GUI thread as they are made, but a fast model's steps are grouped once a
frame (``FRAME_MS``), one text edit and one repaint per group, and the bar chart follows the newest
step at most every ``BAR_INTERVAL_MS``, less often if redrawing it would take more than
``BAR_BUDGET`` of the time (``chart_delay_ms``): on the default model a signal and a repaint per token
cost the worker, which shares the CPU, far more than the 10% the pane may
(``benchmarks/generation_ui.py``).

``GenerationRun`` is an object the pane owns: one generation at a time in a worker (start, Stop,
forget, shut down), the run's own data (prompt ids, steps, result, error, the controls used), and
what it writes itself (the streamed text, the status line). It is handed those two widgets and
callbacks for what the pane draws (the start, new steps, the end); it reads nothing of the pane.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Generator, Sequence
from typing import TYPE_CHECKING, Any

from explorer.core.cancel import Cancel
from explorer.core.generation.candidates import describe_params
from explorer.core.generation.sampling import SamplingParams
from explorer.ui.session import background

if TYPE_CHECKING:  # explorer.core.generation.generate imports torch: only once a model is loaded
    from explorer.core.generation.generate import GenerationResult, Step
    from explorer.core.loaded import LoadedModel
    from explorer.ui.generation.token_text import TokenText
    from PySide6.QtWidgets import QLabel

FRAME_MS = 40  # a fast model's new tokens are shown once a frame (see stream_steps)
BAR_INTERVAL_MS = 50  # while streaming, the chart (the newest step) is redrawn at most this often,
BAR_BUDGET = 0.03  # and less often if drawing it would take more than this share of the time


def stream_steps(loaded: LoadedModel, prompt_ids: Sequence[int], params: SamplingParams, cancel: Cancel,
                 frame_seconds: float | None = None, interventions: Sequence[Any] = ()) -> Generator[list[Step], None, GenerationResult]:
    """``generate_steps``, its steps handed on in groups (run in the worker; returns the result).

    A step is handed on at once when it is the first, when it took half a frame or more (a slow
    model: every step on its own) or when a frame has passed since the last group; otherwise it
    waits for the next ones. A fast model thus wakes the GUI thread once a frame rather than once a
    token (a queued signal and a repaint each), and a step is never held longer than a frame plus
    one step. ``cancel`` is checked before every step, so Stop still ends it within one step.
    """
    from explorer.core.generation.generate import generate_steps

    frame = FRAME_MS / 1e3 if frame_seconds is None else frame_seconds
    steps = generate_steps(loaded, prompt_ids, params, cancel, interventions=interventions)
    group: list[Step] = []
    last = -math.inf
    while True:
        try:
            step = next(steps)
        except StopIteration as done:
            if group:
                yield group
            return done.value
        group.append(step)
        now = time.perf_counter()
        if now - last >= frame or step.elapsed >= frame / 2:
            yield group
            group, last = [], now


def chart_delay_ms(cost_seconds: float) -> int:
    """How long to wait before redrawing the chart while streaming: ``BAR_INTERVAL_MS``, or longer
    when a redraw (re-scoring and painting) costs more than ``BAR_BUDGET`` of the time in between."""
    return max(BAR_INTERVAL_MS, int(1e3 * cost_seconds / BAR_BUDGET))


class GenerationRun:
    """One pane's generations, one at a time, in a worker.

    ``text_view`` gets the prompt and the streamed tokens, ``status`` the progress and the outcome.
    Callbacks: ``on_start(params)`` (a run starts: the pane resets its step view), ``on_steps(steps)``
    (steps were added to ``steps`` and to the text), ``on_finished(result)`` (the run ended, the
    result None if it failed). Whatever an older run's worker still sends is dropped."""

    def __init__(self, text_view: TokenText, status: QLabel, *, on_start: Callable[[SamplingParams], None],
                 on_steps: Callable[[list[Step]], None],
                 on_finished: Callable[[GenerationResult | None], None]) -> None:
        self.text_view, self.status = text_view, status
        self._on_start, self._on_steps, self._on_finished = on_start, on_steps, on_finished
        self.prompt_ids: list[int] = []
        self.prompt_text = ""  # the prompt as the text view shows it
        self.run_prompt = ""  # the prompt box's text the shown continuation was generated from
        self.params_used: SamplingParams | None = None
        self.steps: list[Step] = []
        self.result: GenerationResult | None = None
        self.error: str | None = None
        self.running = False
        self.cancel: Cancel | None = None
        self.worker: Any = None  # the run's background.Task
        self.requests = background.Newest()  # a new run, forget and shut down make the old one's output stale
        self._incremental: Any = None

    @property
    def run_id(self) -> int:
        """Which run the shown steps belong to (a new one at each start, forget and shut down)."""
        return self.requests.id

    def start(self, loaded: LoadedModel, ids: list[int], params: SamplingParams, prompt_box_text: str,
              interventions: Sequence[Any] = ()) -> None:
        """Continue ``ids`` with ``params`` in a worker (``prompt_box_text``: what the prompt box said)."""
        from explorer.core.generation.generate import IncrementalText

        self.prompt_ids, self.params_used = list(ids), params
        self.run_prompt = prompt_box_text
        self.steps, self.result, self.error = [], None, None
        self._incremental = IncrementalText(loaded.tokenizer, ids)
        self.prompt_text = self._incremental.prompt_text
        self.text_view.start(self.prompt_text)
        self._on_start(params)
        self.cancel = Cancel()
        rid = self.requests.next()
        self.worker = background.run(stream_steps, loaded, list(ids), params, self.cancel, interventions=interventions,
                                     newest=self.requests, request_id=rid, on_yield=self._steps,
                                     on_done=self._returned, on_error=lambda failure: self.show_error(failure.message),
                                     on_finished=lambda: self._finished(rid), start=False)
        self.running = True
        self.status.setText(f"Generating… ({describe_params(params)}, seed {params.seed})")
        self.status.setStyleSheet("")

    def launch(self) -> None:
        """Start the worker made by ``start`` (after the pane has updated its buttons)."""
        if self.worker is not None and self.running:
            self.worker.start()

    def stop(self) -> None:
        """Stop the running generation before its next step (its result comes back as "cancelled")."""
        if self.cancel is not None and self.running:
            self.cancel.set()
            self.status.setText("Stopping…")

    def has_output(self) -> bool:
        """Whether a continuation (running, finished or failed) is shown."""
        return bool(self.steps) or self.result is not None or self.running or self.error is not None

    def forget(self) -> None:
        """Stop what runs and forget it: whatever the old worker still sends is dropped."""
        self.stop()
        self.requests.drop()
        self.running, self.worker = False, None
        self.steps, self.result, self.error = [], None, None

    def shutdown(self) -> None:
        """The window closes: stop, and let nothing the worker still sends reach the (deleted) widgets."""
        self.stop()
        self.requests.drop()
        if self.worker is not None:
            self.worker.release()
        self.worker = None

    def show_error(self, message: str) -> None:
        self.error = message
        self.status.setText(message)
        self.status.setStyleSheet("QLabel { color: #8a1c1c; }")

    def _steps(self, steps: list[Step]) -> None:
        """Steps from the worker (one frame's worth): one text edit, then the pane's ``on_steps``."""
        self.steps.extend(steps)
        self.text_view.append_tokens([(s.index, self._incremental.push(s.token_id), s.model_prob) for s in steps])
        self._on_steps(steps)

    def _returned(self, result: GenerationResult) -> None:
        self.result = result
        self.text_view.extend_last(self._incremental.flush())
        n = result.n_new
        rate = f", {result.tokens_per_second:.0f} tokens/s" if n and result.elapsed > 0 else ""
        self.status.setText(f"Stopped: {result.stop_description} — {n} token{'s' if n != 1 else ''} in "
                            f"{result.elapsed:.2f} s{rate} · {describe_params(self.params_used)} · "
                            f"seed {self.params_used.seed}")

    def _finished(self, request_id: int) -> None:
        if not self.requests.current(request_id):
            return
        self.running, self.worker = False, None
        self._on_finished(self.result)
