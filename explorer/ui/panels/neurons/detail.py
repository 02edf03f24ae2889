"""The neurons panel's detail views: the selected token's ranked neurons, and the selected neuron's
activation at every token (bars), their histogram and its vocabulary effect, with their exported data;
beside them, in a tab of their own, the neuron's evidence over the open corpus run (``panels/evidence.py``:
its top examples and its histogram over the corpus, this prompt's value marked).

``NeuronDetail`` is an object ``NeuronsPanel`` owns: it builds the right-hand column's widgets, draws
into them and the panel's bar plot (handed to it), keeps what it shows (the ranked list, the bars,
the histogram, the vocabulary effect), and learns what to show from a ``NeuronFocus`` the panel
gives through a callback; it reads nothing else of the panel.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QSplitter, QTableWidget, QTabWidget, QVBoxLayout, QWidget

from explorer.core.analysis.neurons import activation_histogram, top_neurons
from explorer.core.display.levels import finite_extent, thinned_ticks
from explorer.core.display.labels import token_labels
from explorer.core.display.tokens import quoted, vocab_quoted, vocab_text
from explorer.core.trace import Trace
from explorer.ui.panels.evidence import CorpusEvidence
from explorer.ui.panels.neurons.views import TOP_TOKEN_NEURONS, VOCAB_K, VOCAB_NOW_MACS, LayerView, vocab_effect_of
from explorer.ui.panels.neurons.widgets import (
    BAR_HIST,
    BAR_NEGATIVE,
    BAR_POSITIVE,
    SELECTED_PEN,
    table,
)
from explorer.ui.widgets.plots import fixed_plot
from explorer.ui.widgets.table_cells import fix_widths, set_cell, set_rows
from explorer.ui.widgets.steady_label import SteadyLabel

if TYPE_CHECKING:
    from explorer.ui.session.session import Session

_MISSING = object()
NO_PEN = pg.mkPen(None)  # the neuron bars have no outline

VOCAB_CAPTION = ("Direct path only: the neuron's output direction W_out[:, k], scaled by the final norm's "
                 "\u03b3 and read through the un-embedding W_U, gives one logit change per unit of activation. "
                 "Later layers and the norm's centring and scaling are ignored, so this is a strong hint, "
                 "not a proof. For a negative activation the roles swap.")


@dataclass(frozen=True)
class NeuronFocus:
    """What the detail views show: the trace, its layer's activations, the layer, the selected token
    (the last when none) and the selected neuron (None: none)."""

    trace: Trace
    view: LayerView
    layer: int
    token: int
    neuron: int | None


class NeuronDetail:
    """Drawing and exported data of the token and neuron detail views, for ``NeuronsPanel``.

    ``bars_plot``/``bars``: the panel's plot of the neuron across tokens; ``focus()``: what to show now
    (None: nothing); ``later``: the panel's background views; ``tokenizer()``: the model's tokenizer;
    ``select_neuron(id)``: a row of the ranked table was chosen."""

    def __init__(self, bars_plot: Any, bars: Any, *, focus: Callable[[], NeuronFocus | None],
                 later: Callable[..., Any], tokenizer: Callable[[], Any],
                 select_neuron: Callable[[int], None]) -> None:
        self.bars_plot, self.bars = bars_plot, bars
        self._focus, self.later, self._tokenizer, self._select = focus, later, tokenizer, select_neuron
        self.ranked_ids: tuple[np.ndarray, np.ndarray] = (np.zeros(0, np.int64), np.zeros(0, np.float32))
        self.vocab_result: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None
        self.hist: tuple[np.ndarray, np.ndarray] = (np.zeros(0, np.int64), np.zeros(1))
        self.bar_values = np.zeros(0, dtype=np.float32)
        self._bars_of: tuple[Any, int] | None = None  # (layer view, neuron) the bars show
        self._ticks_of: tuple[Any, float] | None = None  # (tokens, plot width) the bar ticks were thinned for
        # the selected token's bar outlined by a bar of its own: a token switch moves it, the bars stay
        self.bar_mark = pg.BarGraphItem(x=[], height=[], width=0.8, brush=pg.mkBrush(None), pen=SELECTED_PEN)
        self.bar_mark.setZValue(5)
        self.bars_plot.addItem(self.bar_mark)
        self._filling = False  # the table being refilled: its selection signals are ours, not the user's
        self._run_shown: Any = None  # the corpus run whose evidence was last brought to the front
        self.column = self._build()
        self.bars_plot.getViewBox().sigResized.connect(lambda *_: self.bar_ticks())

    def clear(self) -> None:
        """Nothing to show (no FFN, or activations not captured)."""
        self.ranked_ids = (np.zeros(0, np.int64), np.zeros(0, np.float32))
        self.vocab_result = None
        self.hist = (np.zeros(0, np.int64), np.zeros(1))
        self.bar_values = np.zeros(0, dtype=np.float32)
        self._bars_of = None
        self._ticks_of = None
        self.bars.setOpts(x=[], height=[], brushes=None, pens=None)
        self.bar_mark.setOpts(x=[], height=[])
        self.hist_bars.setOpts(x0=[], width=[], height=[])
        self.ranked.setRowCount(0)
        self.vocab.setRowCount(0)
        self.evidence.clear()

    def _on_ranked_row(self, row: int, _col: int, _prev_row: int, _prev_col: int) -> None:
        if self._filling or not 0 <= row < self.ranked_ids[0].size:
            return
        self._select(int(self.ranked_ids[0][row]))

    def _build(self) -> QSplitter:
        """The right-hand column: the token's ranked neurons, the neuron's histogram and vocabulary."""
        self.ranked_title = SteadyLabel()  # the texts below follow the token and neuron: heights kept
        self.ranked = table(["rank", "neuron", "activation"], stretch=(1, 2))
        self.ranked.currentCellChanged.connect(self._on_ranked_row)
        token_box = QWidget()
        column = QVBoxLayout(token_box)
        column.setContentsMargins(0, 0, 0, 0)
        column.addWidget(self.ranked_title)
        column.addWidget(self.ranked, 1)

        self.hist_plot = fixed_plot(grid="")
        self.hist_plot.setLabel("left", "tokens")
        self.hist_plot.setLabel("bottom", "activation")
        self.hist_bars = pg.BarGraphItem(x0=[], width=[], height=[], brush=BAR_HIST, pen=pg.mkPen("w", width=0.5))
        self.hist_plot.addItem(self.hist_bars)
        self.hist_marker = pg.InfiniteLine(angle=90, pen=pg.mkPen("#ff2d55", width=2, style=Qt.PenStyle.DashLine))
        self.hist_plot.addItem(self.hist_marker)

        self.vocab_title = SteadyLabel()
        self.vocab = table(["promotes", "logit / unit", "suppresses", "logit / unit"], stretch=(0, 2))
        self.vocab.setSelectionMode(QTableWidget.SelectionMode.NoSelection)
        fix_widths(self.vocab, (1, 3), "-00.0000")  # a new neuron's numbers re-lay out nothing
        self.vocab_caption = QLabel(VOCAB_CAPTION)
        self.vocab_caption.setWordWrap(True)
        self.vocab_caption.setStyleSheet("color: palette(placeholder-text); font-size: 11px")
        vocab_box = QWidget()
        column = QVBoxLayout(vocab_box)
        column.setContentsMargins(0, 0, 0, 0)
        column.addWidget(self.vocab_title)
        column.addWidget(self.vocab, 1)
        column.addWidget(self.vocab_caption)

        right = QSplitter(Qt.Orientation.Vertical)
        right.addWidget(token_box)
        right.addWidget(self.hist_plot)
        right.addWidget(vocab_box)
        right.setStretchFactor(0, 3)
        right.setStretchFactor(1, 2)
        right.setStretchFactor(2, 3)
        self.evidence = CorpusEvidence("neurons", "neuron")  # the selected neuron over the open corpus run
        self.tabs = QTabWidget()
        self.tabs.setDocumentMode(True)
        self.tabs.addTab(right, "This prompt")
        self.tabs.addTab(self.evidence, "Over the corpus")
        self.tabs.setTabToolTip(1, "The selected neuron's top examples and histogram over the open corpus run")
        return self.tabs

    # --- the corpus run (explorer/ui/session/corpus.py) ---------------------------------------------
    def attach(self, session: Session) -> None:
        """Read the session's corpus run: the evidence follows it (a run just opened is shown at once)."""
        self.evidence.attach(session)
        session.corpus.changed.connect(self._corpus_changed)

    def _corpus_changed(self) -> None:
        if self.evidence.run is not None and self.evidence.run.path != self._run_shown:
            self._run_shown = self.evidence.run.path
            self.tabs.setCurrentWidget(self.evidence)  # a run the user just opened: its evidence in front
        self.draw_corpus()

    def draw_corpus(self) -> None:
        """The selected neuron's top examples and corpus histogram, this token's value marked."""
        f = self._focus()
        if f is None or f.neuron is None:
            self.evidence.clear()
            return
        self.evidence.show_unit(f.layer, f.neuron, float(f.view.post[f.token, f.neuron]))

    def draw_ranked(self) -> None:
        f = self._focus()
        if f is None:
            return
        i = f.token
        ids, values = top_neurons(f.view.post, i, min(TOP_TOKEN_NEURONS, f.view.post.shape[1]))
        self.ranked_ids = (ids, values)
        self.ranked_title.setText(f"<b>Most active neurons at token {quoted(f.trace.tokens[i])} ({i})</b>, "
                                  f"L{f.layer}")
        self._filling = True
        try:
            self.ranked.setRowCount(len(ids))
            for r, (j, v) in enumerate(zip(ids.tolist(), values.tolist())):  # the rows' items kept, texts set
                set_cell(self.ranked, r, 0, str(r + 1), True)
                set_cell(self.ranked, r, 1, f"#{j}", True)
                set_cell(self.ranked, r, 2, f"{v:.4f}", True)
            self.mark_ranked_row()
        finally:
            self._filling = False

    def mark_ranked_row(self) -> None:
        f = self._focus()
        neuron = f.neuron if f is not None else None
        ids = self.ranked_ids[0]
        where = np.flatnonzero(ids == neuron) if neuron is not None else []
        filling, self._filling = self._filling, True
        try:
            if len(where):
                self.ranked.setCurrentCell(int(where[0]), 0)
            else:
                self.ranked.clearSelection()
                self.ranked.setCurrentCell(-1, -1)
        finally:
            self._filling = filling

    def draw_neuron(self) -> None:
        f = self._focus()
        if f is None or f.neuron is None:
            return
        self.draw_bars()
        self.draw_histogram()
        self.draw_vocab()
        self.draw_corpus()

    def draw_bars(self) -> None:
        f = self._focus()
        if f is None or f.neuron is None:
            return
        j = f.neuron
        values = f.view.post[:, j]
        n = values.size
        i = f.token
        tokens = f.trace.tokens
        self.bar_mark.setOpts(x=[i + 0.5], height=[values[i]], width=0.8)
        self.bars_plot.setTitle(f"L{f.layer} neuron #{j}: activation at each token "
                                f"(selected: {quoted(tokens[i])} ({i}) = {values[i]:.4f})")
        if self._bars_of is not None and self._bars_of[0] is f.view and self._bars_of[1] == j:
            return  # the same neuron (a token switch): its bars, ticks and ranges stay
        self._bars_of = (f.view, j)
        self.bar_values = values
        brushes = [BAR_NEGATIVE if v < 0 else BAR_POSITIVE for v in values.tolist()]
        # one shared "no pen" (not a pen per bar): pyqtgraph then fills each bar once (fillRect) instead of setting a
        # pen, a brush and drawing a rectangle per bar, in the picture it builds for every new neuron
        self.bars.setOpts(x=np.arange(n) + 0.5, height=values, width=0.8, brushes=brushes, pens=None, pen=NO_PEN)
        self.bar_ticks()
        lo, hi = finite_extent(values)
        vb = self.bars_plot.getViewBox()
        x_range = [-0.01 * max(n, 1), 1.01 * max(n, 1)]  # what setXRange(0, n, padding=0.01) sets
        if not np.allclose(vb.viewRange()[0], x_range, rtol=0, atol=1e-9):  # same tokens: the x range is kept
            self.bars_plot.setXRange(0, max(n, 1), padding=0.01)
        self.bars_plot.setYRange(lo, hi if hi > lo else lo + 1, padding=0.05)

    def bar_ticks(self) -> None:
        """Token labels under the bars, as many as fit the plot's width."""
        f = self._focus()
        if f is None:
            return
        tokens = f.trace.tokens
        width = max(self.bars_plot.getViewBox().width(), 100.0)
        if self._ticks_of is not None and self._ticks_of[1] == width and self._ticks_of[0] == tokens:
            return  # the same tokens at the same width (a layer switch): the ticks are kept
        self._ticks_of = (tokens, width)
        longest = min(8, max((len(t) for t in tokens), default=1))
        room = int(width / (7.0 * longest + 12.0))
        self.bars_plot.getAxis("bottom").setTicks([thinned_ticks(tokens, max_labels=max(2, min(40, room)),
                                                                 max_chars=8)])

    def draw_histogram(self) -> None:
        f = self._focus()
        if f is None or f.neuron is None:
            return
        values = f.view.post[:, f.neuron]
        bins = int(np.clip(values.size, 10, 40))
        counts, edges = activation_histogram(values, bins=bins)
        self.hist = (counts, edges)
        self.hist_bars.setOpts(x0=edges[:-1], width=np.diff(edges), height=counts)
        self.hist_plot.setTitle(f"neuron #{f.neuron}: its {values.size} activations over the prompt")
        self.hist_plot.setXRange(float(edges[0]), float(edges[-1]), padding=0.03)
        top = max(1, int(counts.max(initial=0)))
        self.hist_plot.setYRange(0, top, padding=0.05)
        step = max(1, int(np.ceil(top / 6)))
        self.hist_plot.getAxis("left").setTickSpacing(step, step)  # whole tokens only
        self.place_hist_marker()

    def place_hist_marker(self) -> None:
        f = self._focus()
        if f is None or f.neuron is None:
            return
        self.hist_marker.setValue(float(f.view.post[f.token, f.neuron]))
        if self.evidence.unit == (f.layer, f.neuron):
            self.evidence.mark(float(f.view.post[f.token, f.neuron]))

    def draw_vocab(self) -> None:
        f = self._focus()
        if f is None or f.neuron is None:
            return
        trace, layer, j = f.trace, f.layer, f.neuron
        tokenizer = self._tokenizer()
        vocab = getattr(tokenizer, "vocab_size", None) if tokenizer is not None else None
        cfg = trace.config
        key = ("neurons.vocab", layer, j, VOCAB_K, vocab)
        if trace.memo_get(key, _MISSING) is _MISSING and cfg.vocab_size * cfg.d_model > VOCAB_NOW_MACS:
            self.vocab_result = None  # the rows stay, blank (never another neuron's): no re-layout of the table
            set_rows(self.vocab, [("", "", "", "")] * self.vocab.rowCount())
            self.vocab_title.setText(f"<b>L{layer} neuron #{j}: vocabulary it promotes and suppresses</b>: "
                                     "computing\u2026")

            def apply(_: object) -> None:
                now = self._focus()
                if now is not None and (now.layer, now.neuron) == (layer, j):
                    self.draw_vocab()

            self.later(("vocab",), lambda check: vocab_effect_of(trace, layer, j, vocab), apply)
            return
        result = vocab_effect_of(trace, layer, j, vocab)
        self.vocab_result = result
        if result is None:
            self.vocab.setRowCount(0)
            self.vocab_title.setText(f"What neuron #{j} writes needs the loaded model's weights "
                                     f"(this trace has none).")
            return
        self.vocab_title.setText(f"<b>L{layer} neuron #{j}: vocabulary it promotes and suppresses</b>")
        up_ids, up, down_ids, down = result
        ups = [(self._token_text(a), f"{va:+.4f}") for a, va in zip(up_ids.tolist(), up.tolist())]
        downs = [(self._token_text(b), f"{vb:+.4f}") for b, vb in zip(down_ids.tolist(), down.tolist())]
        n = max(len(ups), len(downs))
        ups += [("", "")] * (n - len(ups))
        downs += [("", "")] * (n - len(downs))
        set_rows(self.vocab, [a + b for a, b in zip(ups, downs)], numbers=(1, 3))  # items kept, texts set

    def _token_text(self, token_id: int) -> str:
        """The vocabulary table's text: quoted, with the glyphs every panel uses."""
        return vocab_quoted(self._tokenizer(), token_id, max_chars=40)

    def _token_data(self, token_id: int) -> str:
        """The exported label: the exact display string (data, not a picture)."""
        text = vocab_text(self._tokenizer(), token_id)
        return text if text == f"#{token_id}" else repr(text)

    # --- exported data ---------------------------------------------------------------------------
    def ranked_data(self) -> tuple[np.ndarray, list[str], list[str]]:
        """The selected token's most active neurons [k]: rows "#neuron", one column naming the token."""
        ids, values = self.ranked_ids
        f = self._focus()
        if f is None:
            return np.zeros(0, np.float32), [], []
        label = token_labels(f.trace.tokens)[f.token]
        return values, [f"#{j}" for j in ids.tolist()], [f"L{f.layer} activation at {label}"]

    def bars_data(self) -> tuple[np.ndarray, list[str], list[str]]:
        """The selected neuron's activation at every token [n]."""
        f = self._focus()
        if f is None or f.neuron is None:
            return np.zeros(0, np.float32), [], []
        return self.bar_values, token_labels(f.trace.tokens), [f"L{f.layer} neuron #{f.neuron}"]

    def hist_data(self) -> tuple[np.ndarray, list[str], list[str]]:
        """Token counts per activation bin [bins]: rows "[lo, hi)", the last bin closed."""
        counts, edges = self.hist
        f = self._focus()
        if f is None or counts.size == 0:
            return np.zeros(0, np.int64), [], []
        rows = [f"[{edges[b]:.6g}, {edges[b + 1]:.6g}{']' if b == counts.size - 1 else ')'}"
                for b in range(counts.size)]
        return counts, rows, [f"tokens, L{f.layer} neuron #{f.neuron}"]

    def vocab_data(self) -> tuple[np.ndarray, list[str], list[str]]:
        """Promoted then suppressed tokens [2k]: the direct-path logit change per unit of activation."""
        if self.vocab_result is None:
            return np.zeros(0, np.float32), [], []
        f = self._focus()
        layer, neuron = (f.layer, f.neuron) if f is not None else (0, None)
        up_ids, up, down_ids, down = self.vocab_result
        rows = [f"promoted {r + 1}: {i}:{self._token_data(i)}" for r, i in enumerate(up_ids.tolist())]
        rows += [f"suppressed {r + 1}: {i}:{self._token_data(i)}" for r, i in enumerate(down_ids.tolist())]
        return (np.concatenate([up, down]).astype(np.float32), rows,
                [f"direct logit effect per unit activation, L{layer} neuron #{neuron}"])
