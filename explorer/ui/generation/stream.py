"""Generating in a worker and pacing what reaches the GUI thread.

The generator (``explorer.core.generation.generate.generate_steps``) runs in a superqt generator
worker (``stream_steps``); a ``Cancel`` (explorer.core.cancel) is its ``cancel``, so Stop ends it before the next
forward pass. Steps reach the GUI thread as they are made, but a fast model's steps are grouped once a
frame (``FRAME_MS``), one text edit and one repaint per group, and the bar chart follows the newest
step at most every ``BAR_INTERVAL_MS``, less often if redrawing it would take more than
``BAR_BUDGET`` of the time (``chart_delay_ms``): on the default model a signal and a repaint per token
cost the worker, which shares the CPU, far more than the 10% the pane may
(``benchmarks/generation_ui.py``).

``GenerationRun`` is the pane's running half (Generate, Continue from here, Stop and the worker's
results); ``GenerationPane`` mixes it in.
"""

from __future__ import annotations

import logging
import math
import secrets
import time
from collections.abc import Generator, Sequence
from typing import TYPE_CHECKING, Any

from superqt.utils import create_worker

from explorer.core.cancel import Cancel
from explorer.core.errors import ExplorerError
from explorer.core.generation.candidates import describe_params
from explorer.core.generation.sampling import SamplingParams
from explorer.ui.generation.controls import MAX_SEED
from explorer.ui.session.lifetime import release, release_when_finished
from explorer.ui.session.workers import error_message

if TYPE_CHECKING:  # explorer.core.generation.generate imports torch: only once a model is loaded
    from explorer.core.generation.generate import GenerationResult, Step
    from explorer.core.loaded import LoadedModel

log = logging.getLogger("explorer.ui.generation")

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
    """Generate / Continue / Stop and the worker's signals, for ``GenerationPane`` (a mixin: the
    widgets, signals and state it uses are the pane's)."""

    def generate(self) -> bool:
        """Continue the prompt box's text with the current controls. False if it could not start."""
        if self.loaded is None or self.running or getattr(self.loaded, "generation_blocked", None):
            return False
        try:
            ids = self._encode_prompt()
        except ExplorerError as exc:
            self._show_error(str(exc))
            return False
        return self._start(ids)

    def continue_from_here(self) -> bool:
        """Generate again from the selected step: prompt + generated tokens up to it are the new prompt."""
        if self.loaded is None or self.running or self.selected is None or not self.steps:
            return False
        ids = self.prompt_ids + [s.token_id for s in self.steps[: self.selected + 1]]
        self.set_prompt(self.loaded.tokenizer.decode(ids), ids)
        self._own_prompt = True
        return self._start(ids)

    def _start(self, ids: list[int]) -> bool:
        from explorer.core.generation.generate import IncrementalText

        seed = secrets.randbelow(MAX_SEED + 1) if self.random_seed.isChecked() else int(self.seed.value())
        if self.random_seed.isChecked():
            self.seed.setValue(seed)
        params = self.current_params(seed)
        self._gen_id += 1
        gen_id = self._gen_id
        self.prompt_ids, self.params_used = list(ids), params
        self._run_prompt = self.prompt_edit.toPlainText()
        self.steps, self.result, self.selected, self.table, self.error = [], None, None, None, None
        self._follow_latest, self._raw_probs = True, None
        self._incremental = IncrementalText(self.loaded.tokenizer, ids)
        self.prompt_text = self._incremental.prompt_text
        self.text_view.start(self.prompt_text)
        self.info.setText("")  # the chart keeps the last run's step until its first redraw: clearing it
        # would cost a repaint, and a short run then pays for three instead of two
        self.step_spin.blockSignals(True)
        self.step_spin.setRange(0, params.max_new_tokens - 1)  # set once: a new maximum is a new layout
        self.step_spin.setValue(0)
        self.step_spin.blockSignals(False)
        self._cancel = Cancel()
        worker = create_worker(stream_steps, self.loaded, list(ids), params, self._cancel,
                               interventions=self.interventions.active() if self.interventions is not None else (),
                               _start_thread=False, _ignore_errors=True)
        worker.yielded.connect(lambda steps, g=gen_id: self._on_steps(g, steps))
        worker.returned.connect(lambda result, g=gen_id: self._on_returned(g, result))
        worker.errored.connect(lambda exc, g=gen_id: self._on_errored(g, exc))
        worker.finished.connect(lambda g=gen_id: self._on_finished(g))
        release_when_finished(worker)
        self._worker = worker
        self.running = True
        self.status.setText(f"Generating… ({describe_params(params)}, seed {seed})")
        self.status.setStyleSheet("")
        self._update_buttons()
        worker.start()
        return True

    def stop(self) -> None:
        """Stop the running generation before its next step (its result comes back as "cancelled")."""
        if self._cancel is not None and self.running:
            self._cancel.set()
            self.status.setText("Stopping…")

    def has_output(self) -> bool:
        """Whether a continuation (running, finished or failed) is shown."""
        return bool(self.steps) or self.result is not None or self.running or self.error is not None

    def forget_run(self) -> None:
        """Stop what runs and clear the continuation, its status, the chart and the step selector."""
        self.stop()
        self._gen_id += 1  # whatever the old worker still sends is dropped
        self.running, self._worker = False, None
        self.steps, self.result, self.selected, self.table, self.error = [], None, None, None, None
        self._pinned, self._raw_probs = None, None
        self._bar_timer.stop()
        self.text_view.start("")
        self.chart.show_table(None, [])
        self.info.setText("")
        self.step_spin.blockSignals(True)
        self.step_spin.setRange(0, 0)
        self.step_spin.setValue(0)
        self.step_spin.blockSignals(False)
        self.status.setText("")
        self.status.setStyleSheet("")
        self._update_buttons()

    def shutdown(self) -> None:
        """The window closes: stop, and let nothing the worker still sends reach the (deleted) widgets."""
        self.stop()
        self._gen_id += 1
        release(self._worker)
        self._worker = None

    def _on_steps(self, gen_id: int, steps: list[Step]) -> None:
        """Steps from the worker (one frame's worth): one text edit, then ``step_added`` for each."""
        if gen_id != self._gen_id:
            return
        self.steps.extend(steps)
        self.text_view.append_tokens([(s.index, self._incremental.push(s.token_id), s.model_prob) for s in steps])
        if self._follow_latest:
            self.selected = steps[-1].index  # the step box follows when the chart does (_draw_bars)
        if self._follow_latest:
            self._schedule_bars()
        for step in steps:
            self.step_added.emit(step.index)

    def _on_returned(self, gen_id: int, result: GenerationResult) -> None:
        if gen_id != self._gen_id:
            return
        self.result = result
        self.text_view.extend_last(self._incremental.flush())
        n = result.n_new
        rate = f", {result.tokens_per_second:.0f} tokens/s" if n and result.elapsed > 0 else ""
        self.status.setText(f"Stopped: {result.stop_description} — {n} token{'s' if n != 1 else ''} in "
                            f"{result.elapsed:.2f} s{rate} · {describe_params(self.params_used)} · "
                            f"seed {self.params_used.seed}")

    def _on_errored(self, gen_id: int, exc: BaseException) -> None:
        if gen_id != self._gen_id:
            return
        if not isinstance(exc, ExplorerError):
            log.error("generation failed", exc_info=exc)
        self._show_error(error_message(exc))

    def _on_finished(self, gen_id: int) -> None:
        if gen_id != self._gen_id:
            return
        self.running, self._worker = False, None
        self._bar_timer.stop()
        if self.selected is not None:
            self.text_view.set_selected(self.selected)
        self._draw_bars()
        self._update_buttons()
        self.generation_finished.emit(self.result)

    def _show_error(self, message: str) -> None:
        self.error = message
        self.status.setText(message)
        self.status.setStyleSheet("QLabel { color: #8a1c1c; }")

    def _update_buttons(self) -> None:
        ready = self.loaded is not None and not getattr(self.loaded, "generation_blocked", None)
        self.generate_button.setEnabled(ready and not self.running)
        self.stop_button.setEnabled(self.running)
        self.continue_button.setEnabled(ready and not self.running and self.selected is not None)
        self.export_button.setEnabled(not self.running and self.result is not None)
    def _schedule_bars(self) -> None:
        """Redraw the chart soon: after ``BAR_INTERVAL_MS``, or later if a redraw (re-scoring and
        painting) costs more than ``BAR_BUDGET`` of the time in between."""
        if not self._bar_timer.isActive():
            self._bar_timer.start(chart_delay_ms(self._bar_seconds + self.chart.paint_seconds))
