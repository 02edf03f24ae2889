"""A unit's evidence over the open corpus run: its top examples and its histogram, with today's value marked.

``CorpusEvidence`` is the one widget every unit view uses (the FFN neurons' detail, the Features panel, and
the Experts panel: ``CorpusEvidence("experts", "expert")``). The view that owns it calls

* ``attach(session)`` once (the session's ``corpus``, ``selection`` and ``trace_ids``);
* ``show_unit(layer, unit, value)`` when its unit changes (``value``: the unit's value at the selected token
  of today's prompt, marked on the histogram; None: none);
* ``mark(value)`` when only the selected token changed;
* ``register_exports(panel)`` to put export and copy on its examples and its histogram.

It reads the run on the GUI thread (``CorpusRun.top_examples``, ``distribution``: indexed look-ups, about a
millisecond). The examples are lines of text, the firing token highlighted, the value first; a click on one
makes that context the prompt: the ids the model had read up to that token (``CorpusRun.prompt_ids``) are
traced as they are (``Session.trace_ids``), with that token selected, so every panel shows it.
"""

from __future__ import annotations

import html
import math
import sqlite3
from typing import TYPE_CHECKING, Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPoint, QRect, Qt, QUrl
from PySide6.QtGui import QCursor, QPalette, QTextCursor
from PySide6.QtWidgets import QLabel, QSplitter, QTextBrowser, QToolTip, QVBoxLayout, QWidget

from explorer.core.corpus.reading import CorpusError
from explorer.core.display.evidence import HistogramBars, example_line, histogram_bars
from explorer.ui.widgets.plots import fixed_plot

if TYPE_CHECKING:
    from explorer.core.corpus.read import Example
    from explorer.ui.panels.base import Panel
    from explorer.ui.session.session import Session

BEFORE, AFTER = 20, 4                       # tokens shown around the firing token
FOCUS_BACKGROUND = "#ffc857"                # the firing token (black text on it, in either theme)
HIST_BRUSH = pg.mkBrush("#2a788e")
MARK_PEN = pg.mkPen("#ff2d55", width=2, style=Qt.PenStyle.DashLine)
NO_RUN = ("No corpus run is open. File \u25b8 Run over a corpus\u2026 computes one (the bundled sample takes a "
          "minute on a small model); File \u25b8 Open corpus run\u2026 opens one made before.")
CLICK_TIP = "Click a context to make it the prompt (what the model had read up to the highlighted token)"


def context_as_prompt(session: Session | None, example: Any) -> int:
    """Make a corpus context the prompt: the ids the model had read up to ``example``'s token (an ``Example``, or a
    head's ``PairExample``: up to its query) traced as they are, that token selected. The request id (0: none)."""
    run = session.corpus.run if session is not None else None
    if run is None or session.loaded is None:
        return 0
    ids = run.prompt_ids(example)
    request = session.trace_ids(run.token_text(ids), ids)
    session.selection.set_token(len(ids) - 1)
    return request


class CorpusEvidence(QWidget):
    """Top examples and corpus histogram of one unit of ``source`` ("neurons", "features", "experts")."""

    def __init__(self, source: str, noun: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.source, self.noun = source, noun
        self.session: Session | None = None
        self.unit: tuple[int, int] | None = None   # (layer, unit) shown
        self.value: float | None = None            # today's value, marked
        self.shown: list[Example] = []             # the examples on screen, in order
        self.distribution: Any = None
        self.bars: HistogramBars | None = None
        self.title = QLabel(NO_RUN)
        self.title.setWordWrap(True)
        self.title.setTextFormat(Qt.TextFormat.RichText)
        self.browser = QTextBrowser()
        self.browser.setOpenLinks(False)
        self.browser.setToolTip(CLICK_TIP)
        self.browser.anchorClicked.connect(self._clicked)
        self.hist = fixed_plot()
        self.hist.setMaximumHeight(190)  # the examples take the rest of the height
        self.hist.setLabel("left", "% of tokens")
        self.hist.setLabel("bottom", "value over the corpus (log bins)")
        self.hist_bars = pg.BarGraphItem(x=[], height=[], width=0.85, brush=HIST_BRUSH, pen=pg.mkPen(None))
        self.hist.addItem(self.hist_bars)
        self.marker = pg.InfiniteLine(angle=90, pen=MARK_PEN)
        self.marker.setVisible(False)
        self.hist.addItem(self.marker)
        self._hover = pg.SignalProxy(self.hist.scene().sigMouseMoved, rateLimit=30, slot=self._on_hover)
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(self.browser)
        split.addWidget(self.hist)
        split.setStretchFactor(0, 3)
        split.setStretchFactor(1, 2)
        split.setChildrenCollapsible(False)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.title)
        layout.addWidget(split, 1)

    def attach(self, session: Session) -> None:
        self.session = session

    @property
    def run(self) -> Any:
        return self.session.corpus.run if self.session is not None else None

    def register_exports(self, panel: Panel) -> None:
        """Export and copy on the examples and on the histogram (``Panel.add_exportable``)."""
        panel.add_exportable(f"{self.noun} top examples over the corpus", self.browser, self.examples_data)
        panel.add_exportable(f"{self.noun} histogram over the corpus", self.hist, self.histogram_data)

    # --- showing a unit ----------------------------------------------------------------------------
    def show_unit(self, layer: int, unit: int, value: float | None = None, kept: bool = True) -> None:
        """Show unit ``unit`` of ``layer`` (``kept``: False when the open run's units are not these, e.g. another
        SAE's features: said instead)."""
        self.unit, self.value = (int(layer), int(unit)), value
        run = self.run
        if run is None:
            return self._empty(NO_RUN)
        if not kept or not self.session.corpus.kept(self.source, layer):
            return self._empty(f"The open corpus run ({html.escape(run.path.name)}) kept no {self.source} of "
                               f"layer {layer}{'' if kept else ' from this SAE'}.")
        try:
            self.shown = run.top_examples(self.source, layer, unit, BEFORE, AFTER)
            self.distribution = run.distribution(self.source, layer, unit)
        except (CorpusError, sqlite3.Error) as exc:
            return self._empty(html.escape(" ".join(str(exc).split())))
        self._write_examples()
        self._draw_histogram()

    def mark(self, value: float | None) -> None:
        """Today's value of the unit shown (a new selected token): the marker moves, the examples stay."""
        self.value = value
        if self.distribution is not None:
            self._draw_histogram()

    def clear(self, note: str = "") -> None:
        self.unit = None
        self._empty(note or NO_RUN)

    def _empty(self, note: str) -> None:
        self.shown, self.distribution, self.bars = [], None, None
        self.title.setText(note)
        self.browser.clear()
        self.hist_bars.setOpts(x=[], height=[])
        self.marker.setVisible(False)
        self.hist.setTitle("")

    def _write_examples(self) -> None:
        layer, unit = self.unit
        d, info = self.distribution, self.run.info
        rate = f"{d.firing_rate:.1%}" if math.isfinite(d.firing_rate) else "\u2013"
        self.title.setText(f"<b>L{layer} {self.noun} #{unit} over {html.escape(info.corpus)}</b> "
                           f"({d.tokens:,} tokens): above 0 on {rate}, mean {d.mean:.3g}, max {d.max:.4g}. "
                           f"Its top {len(self.shown)} contexts (click one to make it the prompt):")
        text = self.palette().color(QPalette.ColorRole.Text).name()
        muted = self.palette().color(QPalette.ColorRole.PlaceholderText).name()
        rows = []
        for i, example in enumerate(self.shown):
            line = example_line(example)
            rows.append(
                f'<p style="margin: 0 0 6px 0"><a href="example:{i}" style="color: {text}; text-decoration: none">'
                f'<b>{line.value:.4g}</b>&nbsp;&nbsp;{html.escape(line.before)}'
                f'<span style="background-color: {FOCUS_BACKGROUND}; color: #000000"><b>{html.escape(line.focus)}'
                f'</b></span><span style="color: {muted}">{html.escape(line.after)}</span></a>'
                f'&nbsp;&nbsp;<span style="color: {muted}; font-size: small">{html.escape(line.where)}</span></p>')
        self.browser.setHtml("".join(rows) or "<p>No token of the run reached this unit's top list.</p>")

    def _draw_histogram(self) -> None:
        d = self.distribution
        value = self.value if self.value is not None and math.isfinite(self.value) else None
        marker = d.bin_of(value) if value is not None else None
        self.bars = bars = histogram_bars(d.counts, d.edges, value, marker)
        self.hist_bars.setOpts(x=bars.x, height=100.0 * bars.shares, width=0.85)
        width = max(self.hist.getViewBox().width(), 120.0)
        step = max(1, math.ceil(len(bars.ticks) / max(2, int(width / 48))))
        zero = [t for t in bars.ticks if t[1] == "0"]
        ticks = sorted(set(bars.ticks[::step]) | set(zero))
        self.hist.getAxis("bottom").setTicks([ticks])
        self.hist.setXRange(bars.first - 0.5, bars.last + 0.5, padding=0.02)
        self.hist.setYRange(0, max(1e-9, 100.0 * float(bars.shares.max(initial=0.0))), padding=0.05)
        self.marker.setVisible(marker is not None)
        if marker is not None:
            self.marker.setValue(float(marker))
            self.hist.setTitle(f"this token: {value:.3g} (dashed)")
        else:
            self.hist.setTitle("over the corpus")

    # --- reading what is shown (tests, the benchmark, the tooltips) -------------------------------------
    def bin_tooltip(self, b: int) -> str:
        """The hover text of bin ``b``: its interval, its count and share of the run's tokens."""
        bars = self.bars
        if bars is None or not bars.first <= b <= bars.last:
            return ""
        i = b - bars.first
        text = f"{bars.texts[i]}: {int(bars.counts[i]):,} tokens ({bars.shares[i]:.2%})"
        return text + ("\nthis prompt's token is here" if b == bars.marker else "")

    def _on_hover(self, args: tuple) -> None:
        if self.bars is None or not self.hist.getViewBox().sceneBoundingRect().contains(args[0]):
            return
        x = self.hist.getViewBox().mapSceneToView(args[0]).x()
        text = self.bin_tooltip(int(round(x)))
        if text:
            QToolTip.showText(QCursor.pos(), text, self.hist)

    def example_rect(self, i: int) -> QRect:
        """Where example ``i`` starts in the browser's viewport (a click there makes it the prompt)."""
        block = self.browser.document().findBlockByNumber(i)
        cursor = QTextCursor(block)
        cursor.setPosition(block.position() + 1)
        return self.browser.cursorRect(cursor)

    def example_point(self, i: int) -> QPoint:
        rect = self.example_rect(i)
        return QPoint(rect.right() + 2, rect.center().y())

    # --- a click: the context becomes the prompt ----------------------------------------------------------
    def _clicked(self, url: QUrl) -> None:
        kind, _, index = url.toString().partition(":")
        if kind == "example" and index.isdigit() and int(index) < len(self.shown):
            self.make_prompt(int(index))

    def make_prompt(self, i: int) -> int:
        """Trace what the model had read up to example ``i``'s token, that token selected; the request id."""
        return context_as_prompt(self.session, self.shown[i])

    # --- exported data ---------------------------------------------------------------------------------
    def examples_data(self) -> tuple[np.ndarray, list[str], list[str]]:
        """The shown examples: their values [k], rows "doc, token p: context [token]"."""
        rows = []
        for example in self.shown:
            line = example_line(example)
            rows.append(f"{line.where}: {line.before}[{line.focus}]{line.after}")
        return np.array([e.value for e in self.shown], np.float32), rows, ["value"] if rows else []

    def histogram_data(self) -> tuple[np.ndarray, list[str], list[str]]:
        """Tokens per bin of the whole histogram, rows the bins' intervals."""
        d = self.distribution
        if d is None:
            return np.zeros(0, np.int64), [], []
        from explorer.core.display.evidence import bin_text

        return d.counts, [bin_text(d.edges, b) for b in range(len(d.counts))], ["tokens"]
