"""What changed: the run with the session's interventions against the run without them.

* below: the residual stream's relative change at every layer boundary and position
  (``stream_difference``), i.e. where in the model the interventions took effect;

* left: the next-token candidates at the selected token (the last if none), both probabilities
  side by side (grey: without the interventions, red: with them);
* right: at every position, how the log-probability of the token that actually comes next moved
  (``core/analysis/changes.py``: ``compare_runs``).

The trace controller runs the prompt a second time without interventions when there are any; the
Session keeps that run as the shown result's ``baseline`` (``Session.baseline_of``). This panel never
runs the model, and keeps what it compares with its own state (a value of two runs is not a value
derived from one trace, so it is not put in the trace's memo).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QSplitter, QWidget

from explorer.core.analysis.changes import RunComparison, compare_runs, stream_difference
from explorer.core.analysis.residual import boundary_labels
from explorer.core.display.labels import token_labels
from explorer.core.display.tokens import vocab_quoted
from explorer.core.trace import Trace
from explorer.ui.interventions.menu import install_targets
from explorer.ui.interventions.targets import Target, resid_cells
from explorer.ui.panels.base import Panel, PanelSnapshot, PanelView
from explorer.ui.session.selection import Selection
from explorer.ui.widgets.heatmap import Heatmap
from explorer.ui.widgets.steady_label import SteadyLabel
from explorer.ui.widgets.plots import fixed_plot
from explorer.ui.widgets.role_bands import trace_bands


BEFORE_BRUSH = pg.mkBrush(150, 150, 150)
AFTER_BRUSH = pg.mkBrush(220, 50, 50)
TOP = 10


@dataclass(frozen=True)
class WhatChangedSnapshot(PanelSnapshot):
    pass


def prob_text(p: float) -> str:
    """A probability with its digits: 0.123, or 2.0e-05 where three decimals would say 0.000."""
    return f"{p:.3f}" if p >= 0.001 or p == 0 else f"{p:.1e}"


def comparison(trace: Trace, baseline: Trace | None, position: int | None) -> RunComparison | None:
    """The comparison for ``position`` (None: the last); None without interventions."""
    if baseline is None or not trace.interventions:
        return None
    p = trace.n_tokens - 1 if position is None else position
    return compare_runs(baseline["logits"], trace["logits"], trace.token_ids, p, TOP)


def difference(trace: Trace, baseline: Trace | None) -> np.ndarray | None:
    """The residual stream's relative change at every boundary and position (None without interventions)."""
    if baseline is None or not trace.interventions:
        return None
    return stream_difference(trace, baseline)


@dataclass(frozen=True)
class WhatChangedView(PanelView):
    """The trace against its ``baseline`` (None without interventions): the stream's change and the
    comparison at the snapshot's token (``position``: None for the last)."""

    baseline: Trace | None = None
    stream: np.ndarray | None = None
    position: int | None = None
    comparison: RunComparison | None = None


class WhatChangedPanel(Panel):
    def __init__(self, selection: Selection, parent: QWidget | None = None) -> None:
        super().__init__(selection, parent)
        self.result: RunComparison | None = None
        self.baseline: Trace | None = None  # the shown trace's run without interventions (from the Session)
        self._stream: np.ndarray | None = None
        self._view: WhatChangedView | None = None  # what draw() drew last
        # wrapped at the panel's width, never wider (its height kept while the text changes): the whole line is
        # read at 1280x800, not cut after "(final n…" (issue 42, item 9)
        self.info = SteadyLabel("No interventions: right-click a head, a neuron or a residual cell to switch it off.")
        self.body.addWidget(self.info)
        self.candidates = fixed_plot(grid="x")
        self.candidates.setLabel("bottom", "probability")
        self.candidates.invertY(True)
        self.before_bars = pg.BarGraphItem(x0=[], y=[], height=0.4, width=[], brush=BEFORE_BRUSH, pen=None)
        self.after_bars = pg.BarGraphItem(x0=[], y=[], height=0.4, width=[], brush=AFTER_BRUSH, pen=None)
        self.candidates.addItem(self.before_bars)
        self.candidates.addItem(self.after_bars)
        legend = self.candidates.addLegend(offset=(-10, -10))  # bottom right: the bars start at the top
        legend.addItem(self.before_bars, "without")
        legend.addItem(self.after_bars, "with the interventions")
        self.deltas = fixed_plot()
        self.deltas.setLabel("left", "\u0394 log p(next token)")
        self.deltas.setLabel("bottom", "the token that comes next (position: token)")
        self.delta_bars = pg.BarGraphItem(x=[], height=[], width=0.8, brush=AFTER_BRUSH, pen=None)
        self.deltas.addItem(self.delta_bars)
        self.deltas.addItem(pg.InfiniteLine(pos=0, angle=0, pen=pg.mkPen("k", width=1)))
        self.stream_map = Heatmap(colormap="viridis", title="\u2016x with \u2212 x without\u2016 / \u2016x without\u2016: "
                                                              "where the residual stream changed")
        splitter = QSplitter()
        splitter.addWidget(self.candidates)
        splitter.addWidget(self.deltas)
        column = QSplitter(Qt.Orientation.Vertical)
        column.addWidget(splitter)
        column.addWidget(self.stream_map)
        column.setStretchFactor(0, 3)
        column.setStretchFactor(1, 2)
        self.body.addWidget(column, 1)
        self.add_exportable("what changed: next-token candidates", self.candidates, self._candidate_data)
        self.add_exportable("what changed: log p of the next token", self.deltas, self._delta_data)
        self.add_exportable("what changed: residual stream difference", self.stream_map, self._stream_data)
        install_targets(self)  # right-click a cell of the stream: switch it off there too

    def intervention_targets(self) -> list[Target]:
        return [resid_cells(self.stream_map)]

    # --- the panel contract ----------------------------------------------------------------------
    def snapshot(self) -> WhatChangedSnapshot:
        return self._snapshot(WhatChangedSnapshot)

    def prepare(self, trace: Trace, snapshot: PanelSnapshot) -> WhatChangedView:
        """The comparison with the trace's baseline. The baseline reaches the Session with the trace, so
        a view made on the worker before that has none; ``draw`` then makes it again (it is cheap)."""
        baseline = self._baseline_of(trace)
        return WhatChangedView(trace, baseline, difference(trace, baseline), snapshot.token,
                               comparison(trace, baseline, snapshot.token))

    def _baseline_of(self, trace: Trace) -> Trace | None:
        return self.session.baseline_of(trace) if self.session is not None else None

    def draw(self, view: WhatChangedView) -> None:
        if view.baseline is not self._baseline_of(view.trace):  # prepared before the baseline arrived
            view = self.prepare(view.trace, self.snapshot())
        self._view = view
        self.baseline = view.baseline
        self._stream = view.stream
        self._draw()
        matrix, rows, cols = self._stream_data()
        self.stream_map.set_data(matrix, rows, cols, value_name="relative change")
        self.stream_map.set_token_bands(cols=trace_bands(view.trace) if len(cols) else ())

    def selection_changed(self, what: str) -> None:
        if what == "token":
            self._draw()

    # --- drawing ---------------------------------------------------------------------------------
    def _draw(self) -> None:
        trace = self.trace
        view, token = self._view, self.selection.token
        if view is not None and view.trace is trace and view.position == token:
            self.result = view.comparison
        else:
            self.result = comparison(trace, self.baseline, token) if trace is not None else None
        if self.result is None:
            self._say("No interventions: right-click a head, a neuron or a residual cell to switch it off. "
                              "This panel then compares the run with them to the run without.")
            for bars in (self.before_bars, self.after_bars):
                bars.setOpts(x0=[], y=[], width=[])
            self.delta_bars.setOpts(x=[], height=[])
            return
        r = self.result
        labels = ", ".join(iv.label for iv in trace.interventions)
        token = trace.tokens[r.position]
        self._say(f"With {labels}: next-token distribution after {r.position}:{token!r} "
                          f"(KL {r.kl:.3f} nats); right: how the log-probability of each actual next token moved.")
        k = len(r.ids)
        y = np.arange(k, dtype=float)
        self.before_bars.setOpts(x0=np.zeros(k), y=y - 0.2, width=r.p_before)
        self.after_bars.setOpts(x0=np.zeros(k), y=y + 0.2, width=r.p_after)
        names = [self._display(int(i)) for i in r.ids]
        self.candidates.getAxis("left").setTicks([[(float(i), f"{n}  {prob_text(b)}\u2192{prob_text(a)}")
                                                   for i, (n, b, a) in enumerate(zip(names, r.p_before, r.p_after))]])
        top = float(max(r.p_before.max(initial=0), r.p_after.max(initial=0)))
        self.candidates.setXRange(0, max(top, 1e-12), padding=0.05)  # a flat distribution's bars stay visible
        self.candidates.setYRange(-0.6, k - 0.4, padding=0)
        delta = r.next_delta
        self.delta_bars.setOpts(x=np.arange(delta.size), height=delta,
                                brushes=[AFTER_BRUSH if d < 0 else pg.mkBrush(40, 120, 220) for d in delta])
        ticks = token_labels(trace.tokens)[1:]  # bar i: the token at i + 1, predicted at i
        step = max(1, round(len(ticks) / 6))
        self.deltas.getAxis("bottom").setTicks([[(i, ticks[i]) for i in range(0, len(ticks), step)]])
        self.deltas.setXRange(-0.6, max(delta.size, 1) - 0.4, padding=0)

    def _stream_data(self) -> tuple[np.ndarray, list[str], list[str]]:
        diff = self._stream if self.trace is not None else None
        if diff is None:
            return np.zeros((0, 0)), [], []
        return diff, boundary_labels(self.trace.config.n_layers), token_labels(self.trace.tokens)

    def _say(self, text: str) -> None:
        self.info.setText(text)
        self.info.setToolTip(text)

    def _display(self, token_id: int) -> str:
        return vocab_quoted(self.tokenizer, token_id)

    # --- exported data ---------------------------------------------------------------------------
    def _candidate_data(self) -> tuple[np.ndarray, list[str], list[str]]:
        r = self.result
        if r is None:
            return np.zeros((0, 2)), [], ["p without", "p with"]
        return (np.stack([r.p_before, r.p_after], axis=1), [self._display(int(i)) for i in r.ids],
                ["p without", "p with"])

    def _delta_data(self) -> tuple[np.ndarray, list[str], list[str]]:
        r = self.result
        if r is None or self.trace is None:
            return np.zeros((0, 3)), [], ["log p without", "log p with", "change"]
        return (np.stack([r.next_before, r.next_after, r.next_delta], axis=1),
                [f"{label} -> next" for label in token_labels(self.trace.tokens[:-1])],
                ["log p without", "log p with", "change"])
