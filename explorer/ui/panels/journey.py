"""The journey of the token produced at a step of the generation timeline.

For generated token t (the timeline's step, ``Session.timeline``): its rank and probability at every
layer boundary (the logit lens at the position that predicts it), which earlier tokens each layer's
heads read from that position (a (layer, head) x earlier positions heatmap of attention weights), and which sampling controls changed the choice (the chosen
token's rank and probability after each control that was on). Computed on the worker from the one
trace of the whole sequence the timeline holds (``core.analysis.timeline.journey``, ``control_stages``).
Without a timeline it says how to get one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QSizePolicy, QTableWidget, QTableWidgetItem, QWidget

from explorer.core.analysis.timeline import ControlStage, Journey, control_stages, journey
from explorer.core.display.tokens import quoted, vocab_quoted
from explorer.core.trace import Trace
from explorer.ui.panels.base import Panel, PanelSnapshot, PanelView
from explorer.ui.session.selection import Selection
from explorer.ui.widgets.heatmap import Heatmap
from explorer.ui.widgets.layer_chart import LayerChart

NO_TIMELINE = ("No timeline: generate a continuation (the Generation pane), then step through it with the "
               "timeline slider or [ and ] to follow each generated token's journey.")
LAST_STEP = "The last step: every generated token is on screen and none is being produced. Step back with [."


@dataclass(frozen=True)
class JourneyView(PanelView):
    """The journey at the snapshot's timeline step, or the line saying why there is none."""

    journey: Journey | None = None
    stages: tuple[ControlStage, ...] = ()
    message: str = ""
    step_label: str = ""


def make_journey(trace: Trace, timeline: Any, vocab_size: int | None = None) -> JourneyView:
    """The view of ``timeline`` (a TimelineStep) on the worker: the journey from its whole-sequence trace
    (or from ``trace``, the step's own, where the timeline has none)."""
    if timeline is None:
        return JourneyView(trace, message=NO_TIMELINE)
    if timeline.produced is None:
        return JourneyView(trace, message=LAST_STEP, step_label=timeline.label())
    # the whole sequence's trace, or (a generation streaming in, steps traced on their own) the step's own
    # trace, which ends just before the token produced: its id comes with the step
    full = timeline.full if timeline.full is not None else trace
    token_id = None if timeline.full is not None else timeline.produced_id
    j = full.memo(("journey", timeline.n_prompt, timeline.step, token_id),
                  lambda: journey(full, timeline.n_prompt, timeline.step, vocab_size=vocab_size, token_id=token_id))
    stages = ()
    scores = timeline.scores
    if scores is not None and getattr(scores, "chosen_id", None) is not None:
        stages = control_stages(scores)
    return JourneyView(trace, journey=j, stages=stages, step_label=timeline.label())


class JourneyPanel(Panel):
    def __init__(self, selection: Selection, parent: QWidget | None = None) -> None:
        super().__init__(selection, parent)
        self.view: JourneyView | None = None
        self.info = QLabel(NO_TIMELINE)
        self.info.setWordWrap(True)
        self.info.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)  # alone: at the top
        self.info.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.body.addWidget(self.info)
        # probability and rank on two charts over one depth axis: a probability near 0 is not flattened
        # beside a rank scale, and the boundaries' labels are thinned to fit the dock (widgets/layer_chart.py)
        self.lens = LayerChart()
        self.lens.setMinimumHeight(230)
        self.body.addWidget(self.lens, 3)
        self.controls = QTableWidget(0, 4)
        self.controls.setHorizontalHeaderLabels(["after", "rank", "p", "most likely"])
        self.controls.setToolTip("the chosen token's rank and probability after each sampling control that was on, "
                                 "in the order they run, and the most likely token then")
        self.controls.verticalHeader().setVisible(False)
        self.controls.setMaximumHeight(150)
        self.controls.horizontalHeader().setStretchLastSection(True)
        self.body.addWidget(self.controls, 1)
        self.reads = Heatmap(colormap="viridis", title="what each head reads from the predicting position")
        self.reads.cell_clicked.connect(self._on_cell_clicked)
        self.reads.setMinimumHeight(220)
        self.body.addWidget(self.reads, 3)
        self._parts = (self.lens, self.reads, self.controls)
        for part in self._parts:
            part.hide()
        self.add_exportable("journey lens", self.lens, self.lens.data)
        self.add_exportable("journey attention", self.reads, self._reads_data)

    @classmethod
    def applies_to(cls, config: Any) -> bool:
        return bool(getattr(config, "causal", True))  # encoders do not generate

    def prepare(self, trace: Trace, snapshot: PanelSnapshot) -> JourneyView:
        vocab = getattr(snapshot.tokenizer, "vocab_size", None)
        return make_journey(trace, snapshot.timeline, vocab)

    def draw(self, view: JourneyView) -> None:
        self.view = view
        j = view.journey
        if j is None:
            self.info.setText((f"{view.step_label}: " if view.step_label else "") + view.message)
            self.lens.clear_path()
            self.reads.set_data(np.zeros((0, 0)))
            self.controls.setRowCount(0)
            for part in self._parts:
                part.hide()
            return
        for part in self._parts:
            part.show()
        token = vocab_quoted(self.tokenizer, j.token_id) if self.tokenizer is not None else str(j.token_id)
        first = j.first_top_layer()
        top = (f"the top prediction from {j.labels[first]} on" if first is not None
               else f"never the top prediction (rank {int(j.ranks[-1]) + 1} at the output)")
        changed = [s.control for s in view.stages if s.changed]
        ctrl = ("; the sampling controls changed the choice at: " + ", ".join(changed)) if changed else (
            "; the sampling controls did not change it" if view.stages else "")
        self.info.setText(f"{view.step_label}: {token} produced at position {j.position}, predicted at "
                          f"{j.position - 1}:{quoted(view.trace.tokens[j.position - 1])}. It is {top}{ctrl}. "
                          "Click a row of the map to select its layer and head.")
        vocab = getattr(self.tokenizer, "vocab_size", None)
        self.lens.show_path(j.labels, j.probs, j.ranks, f"{token} across layers", vocab)
        matrix, rows, cols = self._reads_data()
        self.reads.row_groups = (j.attention.shape[0], j.attention.shape[1])  # rows named by layer: L0, L5, …
        top = float(np.nanmax(matrix, initial=0.0)) if np.isfinite(matrix).any() else 0.0  # NaN: a hybrid's gaps
        self.reads.set_data(matrix, rows, cols, levels=(0.0, max(1e-6, top)), value_name="attention")
        self.controls.setRowCount(len(view.stages))
        for row, stage in enumerate(view.stages):
            top_id = vocab_quoted(self.tokenizer, stage.top_id) if self.tokenizer is not None else str(stage.top_id)
            rank = "removed" if stage.chosen_rank is None else str(stage.chosen_rank + 1)
            for col, text in enumerate((stage.control + (" (changed)" if stage.changed else ""), rank,
                                        f"{stage.chosen_prob:.3f}", top_id)):
                self.controls.setItem(row, col, QTableWidgetItem(text))
        self.controls.resizeColumnsToContents()

    def _on_cell_clicked(self, row: int, col: int) -> None:
        j = self.view.journey if self.view is not None else None
        if j is None:
            return
        H = j.attention.shape[1]
        self.selection.set_layer_head(row // H, row % H)

    def _reads_data(self) -> tuple[np.ndarray, list[str], list[str]]:
        j = self.view.journey if self.view is not None else None
        if j is None:
            return np.zeros((0, 0)), [], []
        L, H, n = j.attention.shape
        tokens = self.view.trace.tokens
        return (j.attention.reshape(L * H, n), [f"L{l}H{h}" for l in range(L) for h in range(H)],
                [f"{p}:{tokens[p]}" for p in range(n)])

