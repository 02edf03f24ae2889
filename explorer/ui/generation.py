"""The generation pane: continue a prompt token by token and see why each token was chosen.

A prompt box, Generate / Stop / "Continue from here", the sampling controls, the continuation
streaming in token by token (each token's background is its probability under the controls it
was drawn with), and for one step a bar chart of the top next-token candidates before and after
the controls. Moving a control re-scores the shown step from its stored logits at once, without
running the model, so a student sees what temperature, top-k, top-p, min-p and the repetition
penalty do to the same distribution. Clicking a generated token selects that step and makes the
prompt plus the continuation up to that token the window's current trace (tokenized exactly as
generated), so every panel shows the model's internals at that point.

The generator (``explorer.core.generation.generate.generate_steps``) runs in a superqt generator worker
(``stream_steps``); a ``threading.Event`` is its ``cancel``, so Stop ends it before the next forward
pass. Steps reach the GUI thread as they are made, but a fast model's steps are grouped once a frame
(``FRAME_MS``), one text edit and one repaint per group, and the bar chart follows the newest step at
most every ``BAR_INTERVAL_MS``, less often if redrawing it would take more than ``BAR_BUDGET`` of the
time: on the default model a signal and a repaint per token cost the worker, which shares the CPU,
far more than the 10% the pane may (``benchmarks/generation_ui.py``).

Why a ``Panel`` subclass that is not in the panel registry: it reuses the panel machinery (the
"What am I looking at?" explanation, ``add_exportable``'s right-click export of the chart, a
``PanelDock``) but it is not a trace panel: it drives the model instead of drawing a ``Trace``,
so the window hosts it in its own dock (``add_generation_dock``) and never hands it traces.
"""

from __future__ import annotations

import logging
import math
import secrets
import threading
import time
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, QObject, QPoint, QRect, Qt, QTimer, Signal
from PySide6.QtGui import (QColor, QFontDatabase, QFontMetrics, QKeySequence, QShortcut, QTextCharFormat,
                           QTextCursor)
from PySide6.QtWidgets import (QCheckBox, QFormLayout, QGraphicsItem, QHBoxLayout, QLabel, QMainWindow, QMessageBox,
                               QPlainTextEdit, QPushButton, QSpinBox, QSplitter, QToolTip, QVBoxLayout, QWidget)
from superqt import QLabeledDoubleSlider, QLabeledSlider
from superqt.utils import create_worker

from explorer.core.errors import ExplorerError, PromptError
from explorer.core.generation.sampling import SamplingParams, softmax
from explorer.core.tokenize.display import visible_whitespace
from explorer.core.generation.transcript import transcript_dict, write_transcript_json
from explorer.ui.docks import PanelDock
from explorer.ui.panels.base import Panel
from explorer.ui.selection import Selection
from explorer.ui.workers import error_message

if TYPE_CHECKING:  # explorer.core.generation.generate imports torch: only once a model is loaded
    from explorer.core.generation.generate import GenerationResult, Step

log = logging.getLogger(__name__)

N_CANDIDATES = 20
FRAME_MS = 40  # a fast model's new tokens are shown once a frame (see stream_steps)
BAR_INTERVAL_MS = 50  # while streaming, the chart (the newest step) is redrawn at most this often,
BAR_BUDGET = 0.03  # and less often if drawing it would take more than this share of the time
MAX_SEED = 2**31 - 1
LABEL_CHARS = 14  # candidate labels are cut to this many characters
PROMPT_GREY = "#6b7280"
SELECTED_BG, SELECTED_FG = "#1d4ed8", "#ffffff"
BEFORE_BRUSH, BEFORE_CHOSEN = "#c4c9d0", "#4b5563"
AFTER_BRUSH, AFTER_CHOSEN = "#3b82f6", "#ea580c"
# token background: probability of the chosen token, on a log scale from 0.001 (surprising) to 1
_STOPS = ((0.0, (244, 165, 130)), (0.5, (253, 233, 184)), (1.0, (188, 215, 238)))


def _interpolated(t: float) -> tuple[int, int, int]:
    for (t0, c0), (t1, c1) in zip(_STOPS, _STOPS[1:]):
        if t <= t1:
            f = (t - t0) / (t1 - t0)
            return tuple(round(a + f * (b - a)) for a, b in zip(c0, c1))  # type: ignore[return-value]
    return _STOPS[-1][1]


_COLOURS = [_interpolated(i / 255) for i in range(256)]


def prob_colour(p: float) -> QColor:
    """Background of a generated token: salmon (p <= 0.001) through cream to light blue (p = 1)."""
    t = (math.log10(max(float(p), 1e-12)) + 3.0) / 3.0
    return QColor(*_COLOURS[round(255 * min(max(t, 0.0), 1.0))])


def nice_limit(value: float) -> float:
    """The x-axis end for probabilities up to ``value``: one of a few round numbers, so that the axis
    (and its cached drawing) rarely changes from one step to the next."""
    for limit in (0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75):
        if value <= limit / 1.06:
            return limit
    return 1.06


def describe_params(params: SamplingParams) -> str:
    """The controls in a few words: "T 0.7 · top-k 40 · penalty 1.2" (off controls left out)."""
    parts = ["greedy (T 0)" if params.greedy else f"T {params.temperature:g}"]
    if params.top_k:
        parts.append(f"top-k {params.top_k}")
    if params.top_p < 1.0:
        parts.append(f"top-p {params.top_p:g}")
    if params.min_p > 0.0:
        parts.append(f"min-p {params.min_p:g}")
    if params.repetition_penalty != 1.0:
        parts.append(f"penalty {params.repetition_penalty:g}")
    return " · ".join(parts)


def token_label(text: str, limit: int = LABEL_CHARS) -> str:
    shown = visible_whitespace(text)
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


# --- the candidates of one step, re-scored (no Qt) ------------------------------------------------

@dataclass(frozen=True)
class CandidateTable:
    """Rows of the bar chart: the union of the top-``n`` before and after the controls, ordered by the
    probability after the controls (then before), cut to ``n`` rows; the chosen token always listed."""

    ids: np.ndarray
    before: np.ndarray  # probability under the model's own distribution
    after: np.ndarray  # probability under the controls (0: removed by them)
    chosen_row: int | None
    num_possible: int  # tokens the controls leave possible
    vocab_size: int
    chosen_after: tuple[int | None, float]  # rank (None: removed) and probability of the chosen token
    chosen_before: float  # the chosen token's probability under the model's own distribution


def _top_ids(x: np.ndarray, n: int) -> np.ndarray:
    """Ids of (up to) the ``n`` largest finite entries of ``x``, in no particular order."""
    finite = np.flatnonzero(np.isfinite(x))
    if finite.size <= n:
        return finite
    return finite[np.argpartition(x[finite], finite.size - n)[finite.size - n:]]


def candidate_table(step: Step, params: SamplingParams, n: int = N_CANDIDATES,
                    raw_probs: np.ndarray | None = None) -> CandidateTable:
    """Re-score ``step`` with ``params`` from its stored logits (the model is not run).

    ``raw_probs``: ``softmax(step.scores.logits)`` if the caller keeps it (it does not depend on the
    controls)."""
    raw = step.scores.logits
    processed = step.scores.processed(params)  # the controls, as in generation
    p_raw = softmax(raw) if raw_probs is None else raw_probs
    p_after = softmax(processed)
    ids = np.union1d(_top_ids(raw, n), _top_ids(processed, n))
    ids = ids[np.lexsort((ids, -p_raw[ids], -p_after[ids]))][:n]
    chosen = int(step.token_id)
    if chosen not in ids:
        ids = np.append(ids[: n - 1], chosen)
    rows = np.flatnonzero(ids == chosen)
    value = processed[chosen]
    rank = (int(np.count_nonzero(processed > value) + np.count_nonzero(processed[:chosen] == value))
            if np.isfinite(value) else None)
    return CandidateTable(ids.astype(np.int64), p_raw[ids], p_after[ids], int(rows[0]) if rows.size else None,
                          int(np.count_nonzero(np.isfinite(processed))), int(raw.size),
                          (rank, float(p_after[chosen])), float(p_raw[chosen]))


# --- the worker's generator ---------------------------------------------------------------------------

def stream_steps(loaded: Any, prompt_ids: Sequence[int], params: SamplingParams, cancel: threading.Event,
                 frame_seconds: float | None = None) -> Generator[list[Step], None, GenerationResult]:
    """``generate_steps``, its steps handed on in groups (run in the worker; returns the result).

    A step is handed on at once when it is the first, when it took half a frame or more (a slow
    model: every step on its own) or when a frame has passed since the last group; otherwise it
    waits for the next ones. A fast model thus wakes the GUI thread once a frame rather than once a
    token (a queued signal and a repaint each), and a step is never held longer than a frame plus
    one step. ``cancel`` is checked before every step, so Stop still ends it within one step.
    """
    from explorer.core.generation.generate import generate_steps

    frame = FRAME_MS / 1e3 if frame_seconds is None else frame_seconds
    steps = generate_steps(loaded, prompt_ids, params, cancel)
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


# --- the pinned tokenization for the window's trace -------------------------------------------------

def show_generated(window: Any, text: str, ids: Sequence[int]) -> None:
    """Make ``text`` (a prompt and generated tokens, exactly ``ids``) the window's current trace."""
    loaded = window.loaded
    if loaded is None:
        return
    ids = list(ids)[: loaded.config.n_ctx]
    window.controller.pin_ids(text, ids)
    window.set_prompt(text)


# --- the streaming text view -------------------------------------------------------------------------

class TokenText(QPlainTextEdit):
    """Read-only text: the prompt in grey, then one coloured span per generated token.

    Signals: token_clicked(int) with the step index of the span under a click (not a drag).
    """

    token_clicked = Signal(int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setReadOnly(True)
        self.setUndoRedoEnabled(False)
        font = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
        font.setPointSizeF(max(font.pointSizeF(), 10.0))
        self.setFont(font)
        self.viewport().setMouseTracking(True)
        self.spans: list[tuple[int, int]] = []  # (start, end) document positions per step
        self.formats: list[QTextCharFormat] = []
        self.selected: int | None = None
        self.tooltip_for: Any = None  # step index -> tooltip text
        self._press: QPoint | None = None
        self._prompt_format = QTextCharFormat()
        self._prompt_format.setForeground(QColor(PROMPT_GREY))

    @property
    def n_tokens(self) -> int:
        return len(self.spans)

    def start(self, prompt_text: str) -> None:
        self.clear()
        self.spans, self.formats, self.selected = [], [], None
        cursor = QTextCursor(self.document())
        cursor.insertText(prompt_text, self._prompt_format)

    def append_tokens(self, tokens: Sequence[tuple[int, str, float]]) -> None:
        """Append ``(step index, text, probability)`` spans in one edit (one layout, one repaint)."""
        scroll = self.verticalScrollBar()
        at_end = scroll.value() >= scroll.maximum() - 2
        cursor = QTextCursor(self.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        cursor.beginEditBlock()
        for index, text, prob in tokens:
            fmt = QTextCharFormat()
            fmt.setBackground(prob_colour(prob))
            fmt.setAnchor(True)
            fmt.setAnchorHref(str(index))
            start = cursor.position()
            if text:
                cursor.insertText(text, fmt)
            self.spans.append((start, cursor.position()))
            self.formats.append(fmt)
        cursor.endEditBlock()
        if at_end:
            scroll.setValue(scroll.maximum())

    def extend_last(self, text: str) -> None:
        """Characters completed after the last step (held-back bytes): part of the last span."""
        if not text or not self.spans:
            return
        cursor = QTextCursor(self.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        cursor.insertText(text, self._format_of(len(self.spans) - 1))
        start, _ = self.spans[-1]
        self.spans[-1] = (start, cursor.position())

    def _format_of(self, index: int) -> QTextCharFormat:
        fmt = QTextCharFormat(self.formats[index])
        if index == self.selected:
            fmt.setBackground(QColor(SELECTED_BG))
            fmt.setForeground(QColor(SELECTED_FG))
        return fmt

    def set_selected(self, index: int | None) -> None:
        old, self.selected = self.selected, index
        for i in (old, index):
            if i is not None and 0 <= i < len(self.spans) and self.spans[i][0] < self.spans[i][1]:
                cursor = QTextCursor(self.document())
                cursor.setPosition(self.spans[i][0])
                cursor.setPosition(self.spans[i][1], QTextCursor.MoveMode.KeepAnchor)
                cursor.setCharFormat(self._format_of(i))

    def token_at(self, pos: QPoint) -> int | None:
        href = self.anchorAt(pos)
        return int(href) if href.isdigit() and int(href) < len(self.spans) else None

    def token_rect(self, index: int) -> QRect | None:
        """Viewport rectangle of the first character of step ``index``'s text (None: no text)."""
        start, end = self.spans[index]
        if start == end:
            return None
        cursor = QTextCursor(self.document())
        cursor.setPosition(start)
        left = self.cursorRect(cursor)
        cursor.setPosition(start + 1)
        right = self.cursorRect(cursor)
        if right.top() != left.top():  # the first character ends a line: take its height only
            right = QRect(left.right() + 6, left.top(), 1, left.height())
        return QRect(left.left(), left.top(), max(1, right.left() - left.left()), left.height())

    def viewportEvent(self, event: QEvent) -> bool:  # noqa: N802 - Qt override
        if event.type() == QEvent.Type.ToolTip:
            index = self.token_at(event.pos())
            if index is not None and self.tooltip_for is not None:
                QToolTip.showText(event.globalPos(), self.tooltip_for(index), self.viewport())
            else:
                QToolTip.hideText()
                event.ignore()
            return True
        return super().viewportEvent(event)

    def mousePressEvent(self, event: Any) -> None:  # noqa: N802
        self._press = event.position().toPoint()
        super().mousePressEvent(event)

    def mouseMoveEvent(self, event: Any) -> None:  # noqa: N802
        super().mouseMoveEvent(event)
        over = self.token_at(event.position().toPoint()) is not None
        self.viewport().setCursor(Qt.CursorShape.PointingHandCursor if over else Qt.CursorShape.IBeamCursor)

    def mouseReleaseEvent(self, event: Any) -> None:  # noqa: N802
        super().mouseReleaseEvent(event)
        pos, press, self._press = event.position().toPoint(), self._press, None
        if (event.button() == Qt.MouseButton.LeftButton and press is not None
                and (pos - press).manhattanLength() < 4):
            index = self.token_at(pos)
            if index is not None:
                self.token_clicked.emit(index)


# --- the candidates chart ----------------------------------------------------------------------------

class CandidateChart(pg.PlotWidget):
    """Horizontal bars, one row per candidate: grey = the model's own probability, blue = after the
    controls; the chosen token's bars are dark grey and orange and its label starts with ▶."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setMinimumSize(240, 180)
        self.setAntialiasing(False)  # axis-aligned bars: the same picture, painted faster
        item = self.getPlotItem()
        item.setMouseEnabled(x=False, y=False)
        item.hideButtons()
        item.setMenuEnabled(True)
        item.getViewBox().invertY(True)
        item.setLabel("bottom", "probability")
        item.getAxis("bottom").enableAutoSIPrefix(False)  # 0.2, not "200 (x0.001)"
        item.setTitle("next-token candidates", size="9pt")  # fixed: a changing title re-lays the plot out
        left = item.getAxis("left")  # fixed width too, for the same reason (labels change every step)
        left.setWidth(QFontMetrics(left.font()).horizontalAdvance("▶ " + "m" * LABEL_CHARS) + 12)
        item.showGrid(x=True, y=False, alpha=0.25)
        self.before = pg.BarGraphItem(x0=[], y=[], height=0.4, width=[], brush=BEFORE_BRUSH, pen=None)
        self.after = pg.BarGraphItem(x0=[], y=[], height=0.4, width=[], brush=AFTER_BRUSH, pen=None)
        item.addItem(self.before)
        item.addItem(self.after)
        legend = item.addLegend(offset=(-4, -4), labelTextSize="8pt")  # bottom right: the short bars
        legend.addItem(self.before, "model's own")
        legend.addItem(self.after, "after the controls")
        # pyqtgraph repaints the whole plot on every change: keep what does not change as pixmaps
        for static in (legend, item.titleLabel, item.getAxis("bottom")):
            static.setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
        self.labels: list[str] = []
        self.values = np.zeros((0, 2))
        self.paint_seconds = 0.0  # the last repaint's time (pyqtgraph paints in Python)
        self._limit, self._rows = 0.0, 0

    def paintEvent(self, event: Any) -> None:  # noqa: N802 - Qt override
        t0 = time.perf_counter()
        super().paintEvent(event)
        self.paint_seconds = time.perf_counter() - t0

    def show_table(self, table: CandidateTable | None, labels: list[str]) -> None:
        item = self.getPlotItem()
        if table is None or not len(table.ids):
            self.before.setOpts(x0=[], y=[], width=[], brushes=None)
            self.after.setOpts(x0=[], y=[], width=[], brushes=None)
            self.labels, self.values = [], np.zeros((0, 2))
            item.getAxis("left").setTicks([[]])
            return
        n = len(table.ids)
        rows = np.arange(n, dtype=float)
        chosen = table.chosen_row
        marked = [("▶ " + s) if i == chosen else s for i, s in enumerate(labels)]
        self.before.setOpts(x0=np.zeros(n), y=rows - 0.21, height=0.4, width=table.before,
                            brushes=[BEFORE_CHOSEN if i == chosen else BEFORE_BRUSH for i in range(n)])
        self.after.setOpts(x0=np.zeros(n), y=rows + 0.21, height=0.4, width=table.after,
                           brushes=[AFTER_CHOSEN if i == chosen else AFTER_BRUSH for i in range(n)])
        item.getAxis("left").setTicks([list(enumerate(marked))])
        limit = nice_limit(float(max(table.before.max(), table.after.max())))
        if limit != self._limit:
            self._limit = limit
            item.setXRange(0, limit, padding=0)
        if n != self._rows:
            self._rows = n
            item.setYRange(-0.6, n - 0.4, padding=0)
        self.labels, self.values = marked, np.column_stack([table.before, table.after])


# --- the pane ----------------------------------------------------------------------------------------

def _double_slider(low: float, high: float, value: float, step: float, decimals: int, tip: str,
                   parent: QWidget) -> QLabeledDoubleSlider:
    slider = QLabeledDoubleSlider(Qt.Orientation.Horizontal, parent)
    slider.setRange(low, high)
    slider.setDecimals(decimals)
    slider.setSingleStep(step)
    slider.setValue(value)
    slider.setToolTip(tip)
    return slider


class GenerationPane(Panel):
    """Generate from a prompt and inspect every step. See the module docstring.

    Signals
    -------
    trace_requested(str, list)
        Prompt plus continuation up to a clicked token, and its exact token ids.
    step_added(int)
        A step arrived and is shown (its index).
    generation_finished(object)
        The ``GenerationResult`` (None if the generation failed).
    """

    title = "Generation"
    explanation = "generation"

    trace_requested = Signal(str, object)
    step_added = Signal(int)
    generation_finished = Signal(object)

    def __init__(self, selection: Selection, parent: QWidget | None = None) -> None:
        super().__init__(selection, parent)
        self.loaded: Any = None
        self.prompt_ids: list[int] = []
        self.prompt_text = ""
        self.steps: list[Step] = []
        self.result: GenerationResult | None = None
        self.params_used: SamplingParams | None = None
        self.selected: int | None = None
        self.running = False
        self.error: str | None = None
        self.stop_at_eos = True  # end at the end-of-text token (no control for it here)
        self._follow_latest = True
        self._cancel: threading.Event | None = None
        self._worker: Any = None
        self._gen_id = 0
        self._incremental: Any = None
        self._bar_seconds = 0.0  # the last chart update's time (painting apart)
        self._pinned: tuple[str, list[int]] | None = None  # prompt text -> exact ids (continue, clicks)
        self._own_prompt = False
        self._setting_prompt = False
        self._raw_probs: tuple[Step, np.ndarray] | None = None
        self._last_temperature = 1.0
        self._sized = False
        self.table: CandidateTable | None = None
        self._build()
        self._connect()
        self.set_model(None)

    # --- building --------------------------------------------------------------------------------
    def _build(self) -> None:
        self.prompt_edit = QPlainTextEdit(self)
        self.prompt_edit.setObjectName("generation-prompt")
        self.prompt_edit.setPlaceholderText("Prompt to continue (Ctrl+Enter generates)")
        self.prompt_edit.setTabChangesFocus(True)
        line = self.prompt_edit.fontMetrics().lineSpacing()
        self.prompt_edit.setFixedHeight(3 * line + 12)
        self.body.addWidget(self.prompt_edit)

        self.generate_button = QPushButton("Generate", self)
        self.generate_button.setToolTip("Continue the prompt with the controls below (Ctrl+Enter)")
        self.stop_button = QPushButton("Stop", self)
        self.stop_button.setToolTip("Stop after the step that is running (Esc)")
        self.continue_button = QPushButton("Continue from here", self)
        self.continue_button.setToolTip("Generate again from the selected token with the current controls")
        self.export_button = QPushButton("Export transcript…", self)
        self.export_button.setToolTip("Write every step (chosen token, candidates before and after the "
                                      "controls) to a JSON file")
        buttons = QHBoxLayout()
        buttons.setSpacing(4)
        for button in (self.generate_button, self.stop_button, self.continue_button, self.export_button):
            buttons.addWidget(button)
        buttons.addStretch(1)
        self.body.addLayout(buttons)

        self.greedy = QCheckBox("greedy", self)
        self.greedy.setToolTip("Always take the most likely token (temperature 0)")
        self.temperature = _double_slider(0.0, 2.0, 1.0, 0.05, 2, "Divides the logits; 0 = greedy", self)
        self.top_k = QLabeledSlider(Qt.Orientation.Horizontal, self)
        self.top_k.setRange(0, 200)
        self.top_k.setValue(0)
        self.top_k.setToolTip("Keep only the k most likely tokens; 0 = off")
        self.top_p = _double_slider(0.01, 1.0, 1.0, 0.01, 2, "Keep the smallest set of tokens whose "
                                    "probabilities add up to p; 1 = off", self)
        self.min_p = _double_slider(0.0, 0.5, 0.0, 0.01, 2, "Drop tokens less likely than min-p times "
                                    "the most likely one; 0 = off", self)
        self.repetition = _double_slider(0.5, 2.0, 1.0, 0.05, 2, "> 1 discourages tokens already in the "
                                         "text; 1 = off", self)
        self.max_new = QSpinBox(self)
        self.max_new.setRange(1, 4096)
        self.max_new.setValue(64)
        self.max_new.setToolTip("Stop after this many new tokens")
        self.seed = QSpinBox(self)
        self.seed.setRange(0, MAX_SEED)
        self.seed.setValue(0)
        self.seed.setToolTip("The same seed, prompt and controls give the same text")
        self.random_seed = QCheckBox("random", self)
        self.random_seed.setToolTip("Draw a new seed for every generation (shown here, so it can be reused)")
        form = QFormLayout()
        form.setContentsMargins(0, 0, 0, 0)
        form.setVerticalSpacing(1)
        form.setHorizontalSpacing(8)
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        form.addRow("Temperature", self._row(self.temperature, self.greedy))
        form.addRow("Top-k", self.top_k)
        form.addRow("Top-p", self.top_p)
        form.addRow("Min-p", self.min_p)
        form.addRow("Repetition penalty", self.repetition)
        form.addRow("Max new tokens", self._row(self.max_new, QLabel("Seed", self), self.seed, self.random_seed,
                                                grow=None))
        self.body.addLayout(form)

        self.status = QLabel("", self)
        self.status.setObjectName("generation-status")
        self.status.setWordWrap(True)
        self.status.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)
        # two lines, always: a new message must not move (and so repaint) everything below it
        self.status.setFixedHeight(2 * self.status.fontMetrics().lineSpacing() + 4)
        self.body.addWidget(self.status)

        self.text_view = TokenText(self)
        self.text_view.setObjectName("generation-text")
        self.text_view.setMinimumHeight(70)
        self.text_view.tooltip_for = self.tooltip_for
        self.legend = QLabel(self._legend_html(), self)
        self.legend.setToolTip("Probability of each chosen token under the controls it was drawn with "
                               "(greedy: always 1). Hover a token for details; click it to show the "
                               "internals at that token in every panel.")
        top = QWidget(self)
        top_layout = QVBoxLayout(top)
        top_layout.setContentsMargins(0, 0, 0, 0)
        top_layout.setSpacing(2)
        top_layout.addWidget(self.text_view, 1)
        top_layout.addWidget(self.legend)

        self.step_spin = QSpinBox(self)
        self.step_spin.setToolTip("The step whose candidates are shown")
        self.step_spin.setPrefix("step ")
        self.info = QLabel("", self)
        self.info.setObjectName("step-info")
        self.info.setWordWrap(True)
        self.info.setTextFormat(Qt.TextFormat.RichText)
        self.info.setFixedHeight(3 * self.info.fontMetrics().lineSpacing() + 4)  # no relayout per step
        self.info.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)
        self.chart = CandidateChart(self)
        bottom = QWidget(self)
        bottom_layout = QVBoxLayout(bottom)
        bottom_layout.setContentsMargins(0, 0, 0, 0)
        bottom_layout.setSpacing(2)
        bottom_layout.addWidget(self._row(self.step_spin, self.info, grow=1))
        bottom_layout.addWidget(self.chart, 1)
        self.splitter = QSplitter(Qt.Orientation.Vertical, self)
        self.splitter.addWidget(top)
        self.splitter.addWidget(bottom)
        self.splitter.setChildrenCollapsible(False)
        self.splitter.setStretchFactor(0, 2)
        self.splitter.setStretchFactor(1, 3)
        self.body.addWidget(self.splitter, 1)
        self.add_exportable("next-token candidates", self.chart.getPlotItem(), self._chart_data)
        self._bar_timer = QTimer(self)
        self._bar_timer.setSingleShot(True)
        self._bar_timer.timeout.connect(self._draw_bars)

    def _row(self, *widgets: QWidget, grow: int | None = 0) -> QWidget:
        """Widgets side by side; the one at index ``grow`` takes the spare width (None: none does)."""
        row = QWidget(self)
        layout = QHBoxLayout(row)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(6)
        for i, widget in enumerate(widgets):
            layout.addWidget(widget, 1 if i == grow else 0)
        if grow is None:
            layout.addStretch(1)
        return row

    @staticmethod
    def _legend_html() -> str:
        cells = "".join(f'<span style="background:{prob_colour(p).name()}">&nbsp;{label}&nbsp;</span>'
                        for p, label in ((0.001, "0.001"), (0.01, "0.01"), (0.1, "0.1"), (1.0, "1")))
        return f'<span style="color:{PROMPT_GREY}">token colour = its probability:</span> {cells}'

    def _connect(self) -> None:
        self.generate_button.clicked.connect(self.generate)
        self.stop_button.clicked.connect(self.stop)
        self.continue_button.clicked.connect(self.continue_from_here)
        self.export_button.clicked.connect(self.export_transcript_dialog)
        for keys in ("Ctrl+Return", "Ctrl+Enter"):
            shortcut = QShortcut(QKeySequence(keys), self)
            shortcut.setContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
            shortcut.activated.connect(self.generate)
        escape = QShortcut(QKeySequence(Qt.Key.Key_Escape), self)
        escape.setContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
        escape.activated.connect(self.stop)
        self.greedy.toggled.connect(self._on_greedy)
        self.temperature.valueChanged.connect(self._on_temperature)
        for control in (self.top_k, self.top_p, self.min_p, self.repetition):
            control.valueChanged.connect(lambda _=None: self._controls_changed())
        self.random_seed.toggled.connect(lambda on: self.seed.setEnabled(not on))
        self.prompt_edit.textChanged.connect(self._on_prompt_edited)
        self.text_view.token_clicked.connect(self.click_token)
        self.step_spin.valueChanged.connect(self._on_step_spin)

    # --- the model and the prompt --------------------------------------------------------------------
    def set_model(self, loaded: Any) -> None:
        """A new model: whatever runs is stopped and forgotten."""
        self.stop()
        self._gen_id += 1
        self.loaded = loaded
        self.running = False
        self.steps, self.result, self.selected, self.table = [], None, None, None
        self._pinned, self._raw_probs = None, None
        self.text_view.start("")
        self.chart.show_table(None, [])
        self.info.setText("")
        if loaded is not None:
            self.max_new.setMaximum(max(1, loaded.config.n_ctx))
        self.status.setText("" if loaded is not None else "No model loaded.")
        self._update_buttons()

    def follow_prompt(self, text: str) -> None:
        """The window's prompt changed: use it, unless this pane's prompt was edited by hand."""
        if not self._own_prompt:
            self.set_prompt(text)

    def set_prompt(self, text: str, ids: Sequence[int] | None = None) -> None:
        """Put ``text`` in the prompt box; ``ids``: the exact tokens it stands for (else it is encoded)."""
        self._setting_prompt = True
        try:
            if text != self.prompt_edit.toPlainText():
                self.prompt_edit.setPlainText(text)
        finally:
            self._setting_prompt = False
        self._pinned = (text, [int(i) for i in ids]) if ids is not None else None

    def _on_prompt_edited(self) -> None:
        if not self._setting_prompt:
            self._own_prompt = bool(self.prompt_edit.toPlainText())

    def _encode_prompt(self) -> list[int]:
        text = self.prompt_edit.toPlainText()
        if self._pinned is not None and self._pinned[0] == text:
            return list(self._pinned[1])
        if not text:
            raise PromptError("the prompt is empty: type some text to continue")
        ids = self.loaded.tokenizer.encode(text)
        if not ids:
            raise PromptError("the prompt has no tokens in this model's vocabulary")
        n_ctx = self.loaded.config.n_ctx
        if len(ids) >= n_ctx:
            raise PromptError(f"the prompt has {len(ids)} tokens and the model's context holds {n_ctx}: "
                              "shorten it to leave room for the continuation")
        return ids

    # --- the controls ----------------------------------------------------------------------------------
    def current_params(self, seed: int | None = None) -> SamplingParams:
        """The controls as they are now (``seed``: the one to record; default the seed box's)."""
        return SamplingParams(
            temperature=0.0 if self.greedy.isChecked() else float(self.temperature.value()),
            top_k=int(self.top_k.value()), top_p=float(self.top_p.value()), min_p=float(self.min_p.value()),
            repetition_penalty=float(self.repetition.value()), max_new_tokens=int(self.max_new.value()),
            seed=int(self.seed.value()) if seed is None else int(seed), stop_at_eos=self.stop_at_eos)

    def _on_greedy(self, on: bool) -> None:
        value = float(self.temperature.value())
        if on and value > 0:
            self._last_temperature = value
            self.temperature.setValue(0.0)  # -> _on_temperature -> _controls_changed
        elif not on and value == 0:
            self.temperature.setValue(self._last_temperature or 1.0)
        else:
            self._controls_changed()

    def _on_temperature(self, value: float) -> None:
        if (float(value) == 0.0) != self.greedy.isChecked():
            self.greedy.blockSignals(True)
            self.greedy.setChecked(float(value) == 0.0)
            self.greedy.blockSignals(False)
        self._controls_changed()

    def _controls_changed(self) -> None:
        """Re-score the shown step under the new controls (no forward pass)."""
        if self.running:
            self._schedule_bars()
        else:
            self._draw_bars()

    # --- running -----------------------------------------------------------------------------------------
    def generate(self) -> bool:
        """Continue the prompt box's text with the current controls. False if it could not start."""
        if self.loaded is None or self.running:
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
        self._cancel = threading.Event()
        worker = create_worker(stream_steps, self.loaded, list(ids), params, self._cancel,
                               _start_thread=False, _ignore_errors=True)
        worker.yielded.connect(lambda steps, g=gen_id: self._on_steps(g, steps))
        worker.returned.connect(lambda result, g=gen_id: self._on_returned(g, result))
        worker.errored.connect(lambda exc, g=gen_id: self._on_errored(g, exc))
        worker.finished.connect(lambda g=gen_id: self._on_finished(g))
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

    def _on_steps(self, gen_id: int, steps: list[Step]) -> None:
        """Steps from the worker (one frame's worth): one text edit, then ``step_added`` for each."""
        if gen_id != self._gen_id:
            return
        self.steps.extend(steps)
        self.text_view.append_tokens([(s.index, self._incremental.push(s.token_id), s.prob) for s in steps])
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
        ready = self.loaded is not None
        self.generate_button.setEnabled(ready and not self.running)
        self.stop_button.setEnabled(self.running)
        self.continue_button.setEnabled(ready and not self.running and self.selected is not None)
        self.export_button.setEnabled(not self.running and self.result is not None)

    # --- steps: selection, clicks, the chart ----------------------------------------------------------
    def select_step(self, index: int, follow: bool = False) -> None:
        """Show step ``index``'s candidates (``follow``: keep following the newest step while streaming)."""
        if not 0 <= index < len(self.steps):
            return
        self._follow_latest = follow
        self.selected = index
        self.text_view.set_selected(index)
        self._draw_bars()
        self._update_buttons()

    def _on_step_spin(self, value: int) -> None:
        if value < len(self.steps):
            self.select_step(value)
        elif self.steps:  # not generated (yet)
            self.select_step(len(self.steps) - 1, follow=self._follow_latest)

    def click_token(self, index: int) -> None:
        """Select step ``index`` and make prompt + continuation up to it the window's current trace."""
        self.select_step(index)
        ids = self.ids_through(index)
        self.trace_requested.emit(self.loaded.tokenizer.decode(ids), ids)

    def ids_through(self, index: int) -> list[int]:
        return self.prompt_ids + [s.token_id for s in self.steps[: index + 1]]

    def _schedule_bars(self) -> None:
        """Redraw the chart soon: after ``BAR_INTERVAL_MS``, or later if a redraw (re-scoring and
        painting) costs more than ``BAR_BUDGET`` of the time in between."""
        if not self._bar_timer.isActive():
            cost = self._bar_seconds + self.chart.paint_seconds
            self._bar_timer.start(max(BAR_INTERVAL_MS, int(1e3 * cost / BAR_BUDGET)))

    def _draw_bars(self) -> None:
        if self.selected is None or not self.steps or self.loaded is None:
            return
        t0 = time.perf_counter()
        step = self.steps[self.selected]
        if self.step_spin.value() != step.index:
            self.step_spin.blockSignals(True)
            self.step_spin.setValue(step.index)
            self.step_spin.blockSignals(False)
        if self._raw_probs is None or self._raw_probs[0] is not step:
            self._raw_probs = (step, softmax(step.scores.logits))
        params = self.current_params()
        self.table = table = candidate_table(step, params, N_CANDIDATES, self._raw_probs[1])
        display = self.loaded.tokenizer.display
        self.chart.show_table(table, [token_label(display(int(i))) for i in table.ids])
        rank, prob = table.chosen_after
        now = f"p {prob:.3g} (rank {rank})" if rank is not None else "removed"
        same = self.params_used is not None and _controls_equal(params, self.params_used)
        drawn = "" if same else f" · drawn at p {step.prob:.3g} with {describe_params(self.params_used)}"
        self.info.setText(
            f"<b>step {step.index}</b>: chose <b>“{_html(token_label(step.text, 24))}”</b> · "
            f"<span style='color:{AFTER_BRUSH}'>{now} after the controls</span>, "
            f"{table.chosen_before:.3g} from the model alone · {table.num_possible:,} of {table.vocab_size:,} "
            f"possible{drawn}")
        self.info.setToolTip(f"Controls now: {describe_params(params)}" + (
            "" if same else f"\nThe token was drawn with {describe_params(self.params_used)}"))
        self._bar_seconds = time.perf_counter() - t0

    def tooltip_for(self, index: int) -> str:
        step = self.steps[index]
        raw = step.before
        own = (f"rank {raw.chosen_rank}, p {raw.chosen_prob:.3g}" if raw.chosen_rank is not None
               else f"p {raw.chosen_prob:.3g}")
        return (f"<b>step {step.index}</b>: “{_html(visible_whitespace(step.text))}” (id {step.token_id})<br>"
                f"p {step.prob:.3g}, rank {step.rank} under the controls it was drawn with "
                f"({_html(describe_params(step.params))})<br>model's own: {own}<br>"
                "<i>click: show its candidates, and every panel at this token</i>")

    def _chart_data(self) -> tuple[np.ndarray, list[str] | None, list[str] | None]:
        return self.chart.values, list(self.chart.labels), ["model's own", "after the controls"]

    # --- export -----------------------------------------------------------------------------------------
    def transcript(self) -> dict[str, Any]:
        if self.result is None:
            raise ExplorerError("there is no finished generation to export")
        return transcript_dict(self.prompt_text, self.result.steps, self.params_used, text=self.result.text,
                               display=self.loaded.tokenizer.display, stop_reason=self.result.stop_reason,
                               model=getattr(self.loaded, "name", None))

    def export_transcript(self, path: Any) -> None:
        """Write the last generation's transcript as JSON (atomically)."""
        write_transcript_json(path, self.transcript())

    def export_transcript_dialog(self) -> None:
        from explorer.ui.export import _ask_path

        path = _ask_path(self, "Export transcript", "transcript", ".json", "JSON transcript (*.json)")
        if path is None:
            return
        try:
            self.export_transcript(path)
        except Exception as exc:  # noqa: BLE001 - shown to the user
            QMessageBox.warning(self, "Export transcript", f"Could not write {path}:\n{exc}")

    # --- Panel contract and window events -----------------------------------------------------------
    def show_trace(self, trace: Any) -> None:
        """Not a trace panel: the window never hands it traces."""

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt override
        if event.type() == QEvent.Type.Close:  # the window closes: do not keep it waiting
            self.stop()
        return False

    def showEvent(self, event: Any) -> None:  # noqa: N802
        super().showEvent(event)
        if self._sized:
            return
        self._sized = True
        dock, window = self.parentWidget(), self.window()
        if isinstance(window, QMainWindow) and isinstance(dock, PanelDock) and not dock.isFloating():
            if dock.width() < 360:
                width = min(max(380, int(window.width() * 0.34)), 620)
                window.resizeDocks([dock], [width], Qt.Orientation.Horizontal)


def _controls_equal(a: SamplingParams, b: SamplingParams) -> bool:
    return (a.temperature, a.top_k, a.top_p, a.min_p, a.repetition_penalty) == \
        (b.temperature, b.top_k, b.top_p, b.min_p, b.repetition_penalty)


def _html(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def add_generation_dock(window: Any) -> PanelDock:
    """Host a ``GenerationPane`` in a dock on the window's right, full height, and wire it up."""
    pane = GenerationPane(window.selection)
    dock = PanelDock(pane, window)
    window.setCorner(Qt.Corner.TopRightCorner, Qt.DockWidgetArea.RightDockWidgetArea)
    window.setCorner(Qt.Corner.BottomRightCorner, Qt.DockWidgetArea.RightDockWidgetArea)
    window.addDockWidget(Qt.DockWidgetArea.RightDockWidgetArea, dock)

    def on_model(loaded: Any) -> None:
        pane.set_model(loaded)
        pane.follow_prompt(window.prompt.text())

    window.model_loaded.connect(on_model)
    window.prompt.text_edited.connect(pane.follow_prompt)
    pane.trace_requested.connect(window.show_generated)
    window.installEventFilter(pane)
    window.generation = pane
    return dock
