"""One step of a generation in detail: the step selector, the step's line (what was chosen, at which
probability before and after the controls) and the candidate chart, redrawn at a paced rate while
the steps stream in (``stream.chart_delay_ms``).

``StepView`` is an object ``GenerationPane`` owns: it builds these widgets, keeps which step is shown
and reads the run's steps, the model and the controls through callbacks; it reads nothing of the pane.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QLabel, QSpinBox, QVBoxLayout, QWidget

from explorer.core.generation.candidates import N_CANDIDATES, CandidateTable, candidate_table, controls_equal, describe_params
from explorer.core.generation.sampling import SamplingParams, softmax
from explorer.ui.generation.candidate_chart import AFTER_BRUSH, CandidateChart, token_label
from explorer.ui.generation.controls import row
from explorer.ui.generation.stream import chart_delay_ms
from explorer.ui.generation.token_text import TokenText

if TYPE_CHECKING:  # explorer.core.generation.generate imports torch: only once a model is loaded
    from explorer.core.generation.generate import Step


class StepView:
    """The shown step's candidates. ``steps()``: the run's steps; ``loaded()``: the model (None: none);
    ``params()``: the controls now; ``params_used()``: the run's; ``selected_changed()``: the shown
    step changed (the pane's buttons follow). ``text_view`` marks the shown step's token."""

    def __init__(self, parent: QWidget, text_view: TokenText, *, steps: Callable[[], list[Step]],
                 loaded: Callable[[], Any], params: Callable[[], SamplingParams],
                 params_used: Callable[[], SamplingParams | None], selected_changed: Callable[[], None],
                 step_chosen: Callable[[int], None] = lambda _t: None) -> None:
        self.text_view = text_view
        self._steps, self._loaded, self._params, self._params_used = steps, loaded, params, params_used
        self._selected_changed = selected_changed
        self._step_chosen = step_chosen  # the user chose a step in the box (the timeline follows it)
        self.at_end = False  # the box says T: every generated token on screen, none being produced
        self.selected: int | None = None
        self.table: CandidateTable | None = None
        self.follow_latest = True
        self._raw_probs: tuple[Step, np.ndarray] | None = None
        self._bar_seconds = 0.0  # the last chart update's time (painting apart)

        self.step_spin = QSpinBox(parent)
        self.step_spin.setToolTip("The step whose candidates are shown")
        self.step_spin.setPrefix("step ")
        self.info = QLabel("", parent)
        self.info.setObjectName("step-info")
        self.info.setWordWrap(True)
        self.info.setTextFormat(Qt.TextFormat.RichText)
        self.info.setFixedHeight(3 * self.info.fontMetrics().lineSpacing() + 4)  # no relayout per step
        self.info.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)
        self.chart = CandidateChart(parent)
        self.widget = QWidget(parent)
        layout = QVBoxLayout(self.widget)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addWidget(row(parent, self.step_spin, self.info, grow=1))
        layout.addWidget(self.chart, 1)
        self.bar_timer = QTimer(parent)
        self.bar_timer.setSingleShot(True)
        self.bar_timer.timeout.connect(self.draw)
        self.step_spin.valueChanged.connect(self._on_step_spin)

    # --- a run's life ------------------------------------------------------------------------------
    def start(self, params: SamplingParams) -> None:
        """A run starts: no step shown, follow the newest; the selector's range set once."""
        self.selected, self.table = None, None
        self.follow_latest, self._raw_probs = True, None
        self.info.setText("")  # the chart keeps the last run's step until its first redraw: clearing it
        # would cost a repaint, and a short run then pays for three instead of two
        self.step_spin.blockSignals(True)
        self.step_spin.setRange(0, params.max_new_tokens - 1)  # set once: a new maximum is a new layout
        self.step_spin.setValue(0)
        self.step_spin.blockSignals(False)

    def steps_added(self, steps: list[Step]) -> None:
        if self.follow_latest:
            self.selected = steps[-1].index  # the step box follows when the chart does (draw)
            self.schedule()

    def finished(self) -> None:
        self.bar_timer.stop()
        steps = self._steps()
        if steps and self.step_spin.maximum() < len(steps):  # room for the end: step T, as the timeline counts
            self.step_spin.blockSignals(True)
            self.step_spin.setMaximum(len(steps))
            self.step_spin.blockSignals(False)
        if self.selected is not None:
            self.text_view.set_selected(self.selected)
        self.draw()

    def clear(self) -> None:
        """Nothing shown: the chart, the step's line and the selector emptied."""
        self.selected, self.table, self._raw_probs = None, None, None
        self.bar_timer.stop()
        self.chart.show_table(None, [])
        self.info.setText("")
        self.step_spin.blockSignals(True)
        self.step_spin.setRange(0, 0)
        self.step_spin.setValue(0)
        self.step_spin.blockSignals(False)

    # --- choosing a step ---------------------------------------------------------------------------
    def select(self, index: int, follow: bool = False) -> None:
        """Show step ``index``'s candidates (``follow``: keep following the newest step while streaming)."""
        if not 0 <= index < len(self._steps()):
            return
        self.follow_latest = follow
        self.at_end = False
        self.selected = index
        self.text_view.set_selected(index)
        self.draw()
        self._selected_changed()

    def _on_step_spin(self, value: int) -> None:
        steps = self._steps()
        if value < len(steps):
            self.select(value)
            self._step_chosen(value)
        elif steps and value == len(steps) and self.step_spin.maximum() == len(steps):  # the end (after a run)
            self.show_end(value)
            self._step_chosen(value)
        elif steps:  # not generated (yet)
            self.select(len(steps) - 1, follow=self.follow_latest)

    def show_end(self, total: int) -> None:
        """The timeline's last step T (the box says T too): every generated token is on screen and none is being
        produced, so there are no candidates to show."""
        self.at_end = True
        self.selected, self.table = None, None
        self.bar_timer.stop()
        self.step_spin.blockSignals(True)
        if self.step_spin.maximum() < total:
            self.step_spin.setMaximum(total)
        self.step_spin.setValue(total)
        self.step_spin.blockSignals(False)
        self.chart.show_table(None, [])
        self.info.setText(f"<b>step {total}</b>: the end: every generated token is on screen and none is being "
                          "produced (step back to see a token's candidates)")
        self._selected_changed()

    # --- drawing -----------------------------------------------------------------------------------
    def schedule(self) -> None:
        """Redraw the chart soon: after ``BAR_INTERVAL_MS``, or later if a redraw (re-scoring and
        painting) costs more than ``BAR_BUDGET`` of the time in between."""
        if not self.bar_timer.isActive():
            self.bar_timer.start(chart_delay_ms(self._bar_seconds + self.chart.paint_seconds))

    def draw(self) -> None:
        steps, loaded = self._steps(), self._loaded()
        if self.selected is None or not steps or loaded is None:
            return
        t0 = time.perf_counter()
        step = steps[self.selected]
        if self.step_spin.value() != step.index:
            self.step_spin.blockSignals(True)
            self.step_spin.setValue(step.index)
            self.step_spin.blockSignals(False)
        if self._raw_probs is None or self._raw_probs[0] is not step:
            self._raw_probs = (step, softmax(step.scores.logits))
        params, used = self._params(), self._params_used()
        self.table = table = candidate_table(step, params, N_CANDIDATES, self._raw_probs[1])
        display = loaded.tokenizer.display
        self.chart.show_table(table, [token_label(display(int(i))) for i in table.ids])
        rank, prob = table.chosen_after
        now = f"p {prob:.3g} (rank {rank + 1})" if rank is not None else "removed"  # ranks shown from 1
        same = used is not None and controls_equal(params, used)
        drawn = "" if same else f" · drawn at p {step.prob:.3g} with {describe_params(used)}"
        self.info.setText(
            f"<b>step {step.index}</b>: chose <b>“{_html(token_label(step.text, 24))}”</b> · "
            f"<span style='color:{AFTER_BRUSH}'>{now} after the controls</span>, "
            f"{table.chosen_before:.3g} from the model alone · {table.num_possible:,} of {table.vocab_size:,} "
            f"possible{drawn}")
        self.info.setToolTip(f"Controls now: {describe_params(params)}" + (
            "" if same else f"\nThe token was drawn with {describe_params(used)}"))
        self._bar_seconds = time.perf_counter() - t0

    def chart_data(self) -> tuple[np.ndarray, list[str] | None, list[str] | None]:
        return self.chart.values, list(self.chart.labels), ["model's own", "after the controls"]


def _html(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
