"""The OV view: what a head moves to one query. Along the prompt, each source position's share of the head's
output and its direct effect on a logit (bars; the exact numbers in each bar's tooltip); beside them the head's
OV circuit on the prompt's tokens: for each source, the tokens it would raise most if the head copied it
(``core/analysis/ov.py``), copying the token's embedding or the whole value it reads there."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QCursor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QSplitter,
    QTableWidget,
    QToolTip,
    QVBoxLayout,
    QWidget,
)

from explorer.core.display.levels import finite_extent, kept_ticks
from explorer.core.display.tokens import vocab_quoted
from explorer.ui.panels.qkov_answer import OVAnswer, circuit_data, circuit_rows, source_label
from explorer.ui.widgets.plots import fixed_plot, outline, set_x_range
from explorer.ui.widgets.table_cells import fix_widths, set_rows

SHARE = pg.mkBrush("#2a788e")                                       # the Attention panel's bar colour
POSITIVE, NEGATIVE = pg.mkBrush("#c0392b"), pg.mkBrush("#3b6fb6")   # red raises the logit, blue lowers it
KEY_OUTLINE = pg.mkPen("#ff2d55", width=1.5, cosmetic=True, style=Qt.PenStyle.DashLine)
COPIES = {"embedding": "the token's embedding", "value": "the value it reads there"}


class SourceBars:
    """One bar plot along the prompt: a value per source position, exact in the tooltip."""

    def __init__(self, title: str) -> None:
        self.widget = fixed_plot()
        self.widget.setTitle(title)
        self.bars = pg.BarGraphItem(x=[], height=[], width=0.8, brush=SHARE, pen=None)
        self.widget.addItem(self.bars)
        self.key = outline(self.widget.getPlotItem(), KEY_OUTLINE, visible=False)
        self.texts: dict[int, str] = {}
        self._hover = pg.SignalProxy(self.widget.scene().sigMouseMoved, rateLimit=30, slot=self._on_hover)

    def show(self, n: int, sources: np.ndarray, values: np.ndarray, brushes: list, texts: dict[int, str],
             tokens: tuple[str, ...], key: int | None) -> None:
        self.texts = texts
        self.bars.setOpts(x=sources + 0.5, height=values, width=0.8, brushes=brushes)
        self.widget.getAxis("bottom").setTicks([kept_ticks(tokens, max(2, min(40, n)), 8)])
        lo, hi = finite_extent(values)
        set_x_range(self.widget, 0, max(n, 1), padding=0.01)
        self.widget.setYRange(lo, hi if hi > lo else lo + 1, padding=0.08)
        self.key.setVisible(key is not None)
        if key is not None:
            self.key.setRect(QRectF(key, lo, 1, (hi if hi > lo else lo + 1) - lo))

    def clear(self) -> None:
        self.texts = {}
        self.bars.setOpts(x=[], height=[], brushes=[])
        self.key.setVisible(False)

    def text_at(self, scene_pos: QPointF) -> str | None:
        vb = self.widget.getPlotItem().getViewBox()
        if not vb.sceneBoundingRect().contains(scene_pos):
            return None
        x = vb.mapSceneToView(scene_pos).x()
        return self.texts.get(int(np.floor(x))) if x >= 0 else None

    def _on_hover(self, args: tuple) -> None:
        text = self.text_at(args[0])
        if text is None:
            QToolTip.hideText()
        else:
            QToolTip.showText(QCursor.pos(), text, self.widget)


class OVPage(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.answer: OVAnswer | None = None
        self.tokens: tuple[str, ...] = ()
        self.tokenizer = None
        self.share = SourceBars("share of the head's output, by source")
        self.effect = SourceBars("direct effect on the logit, by source")
        plots = QSplitter(Qt.Orientation.Vertical)
        plots.addWidget(self.share.widget)
        plots.addWidget(self.effect.widget)
        self.copy = QComboBox()
        for key, text in COPIES.items():
            self.copy.addItem(text, key)
        self.copy.setToolTip("What each row copies through the head's W_V and W_O: only the source token's "
                             "embedding (the classic OV circuit), or the whole value the head reads at that "
                             "position (the embedding and everything earlier layers wrote there)")
        self.circuit = QTableWidget(0, 3)
        self.circuit.setHorizontalHeaderLabels(["source", "weight", "if copied, raises most"])
        self.circuit.verticalHeader().setVisible(False)
        self.circuit.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.circuit.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.circuit.setMinimumSize(260, 150)
        fix_widths(self.circuit, (1,), "0.0000")
        header = self.circuit.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Interactive)
        header.resizeSection(0, header.fontMetrics().horizontalAdvance("#00 '·crown··'") + 16)
        header.setSectionResizeMode(2, QHeaderView.ResizeMode.Stretch)
        self.circuit_note = QLabel()
        self.circuit_note.setWordWrap(True)
        self.circuit_note.setStyleSheet("color: palette(placeholder-text)")
        right = QWidget()
        column = QVBoxLayout(right)
        column.setContentsMargins(0, 0, 0, 0)
        top = QHBoxLayout()
        title = QLabel("<b>OV circuit</b>, copying")
        top.addWidget(title)
        top.addWidget(self.copy, 1)
        column.addLayout(top)
        column.addWidget(self.circuit, 1)
        column.addWidget(self.circuit_note)
        splitter = QSplitter(Qt.Orientation.Horizontal)
        splitter.addWidget(plots)
        splitter.addWidget(right)
        splitter.setStretchFactor(0, 6)
        splitter.setStretchFactor(1, 4)
        splitter.setSizes([6000, 4000])  # in proportion, whatever the width
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(splitter, 1)

    def show_answer(self, a: OVAnswer, tokens: tuple[str, ...], tokenizer) -> None:
        self.answer, self.tokens, self.tokenizer = a, tokens, tokenizer
        s, q, n = a.view.split, a.question, len(tokens)
        texts = {}
        for r, j in enumerate(s.sources):
            effect = f"\ndirect effect on the logit: {float(s.dla[r]):+.6f}" if s.dla is not None else ""
            texts[int(j)] = (f"{source_label(int(j), tokens)}: pattern weight {float(s.weights[r]):.6f}\n"
                             f"share of the head's output: {float(s.shares[r]):+.4%}{effect}")
        self.share.widget.setTitle(f"share of the output, by source (sum {float(s.shares.sum()):.1%})")
        self.share.show(n, s.sources, s.shares, [SHARE if v >= 0 else NEGATIVE for v in s.shares], texts, tokens,
                        q.key)
        if s.dla is not None:
            self.effect.widget.setTitle(f"direct effect on the logit of {vocab_quoted(tokenizer, s.target)} "
                                        f"(sum {float(s.dla.sum()):+.3f})")
            self.effect.show(n, s.sources, s.dla, [POSITIVE if v >= 0 else NEGATIVE for v in s.dla], texts, tokens,
                             q.key)
        else:
            self.effect.widget.setTitle("no direct effect on a logit here (see the line above)")
            self.effect.clear()
        if self.copy.currentData() != a.copy:
            self.copy.blockSignals(True)
            self.copy.setCurrentIndex(self.copy.findData(a.copy))
            self.copy.blockSignals(False)
        if a.view.circuit is None:
            set_rows(self.circuit, [])
            self.circuit_note.setText(a.view.circuit_note)
            return
        rows = circuit_rows(a, tokens, tokenizer)
        set_rows(self.circuit, [r[:3] for r in rows], numbers=(1,))
        for r, row in enumerate(rows):
            for c in range(3):
                self.circuit.item(r, c).setToolTip(row[3])
        self.circuit_note.setText(" ".join(a.view.circuit.notes))

    def clear(self) -> None:
        self.answer = None
        self.share.clear()
        self.effect.clear()
        set_rows(self.circuit, [])
        self.circuit_note.setText("")

    # --- exported data -----------------------------------------------------------------------------
    def bars_data(self) -> tuple[np.ndarray, list[str], list[str]]:
        """Each source: its pattern weight, its share of the output and its direct effect (NaN: none)."""
        if self.answer is None:
            return np.zeros((0, 3)), [], ["weight", "share of output", "direct effect"]
        s = self.answer.view.split
        dla = s.dla if s.dla is not None else np.full(len(s.sources), np.nan)
        return (np.column_stack([s.weights, s.shares, dla]).astype(np.float64),
                [source_label(int(j), self.tokens) for j in s.sources],
                ["weight", "share of output", "direct effect"])

    def circuit_data(self) -> tuple[np.ndarray, list[str], list[str]]:
        if self.answer is None or self.answer.view.circuit is None:
            return np.zeros((0, 1)), [], ["logit added if copied with weight 1"]
        return circuit_data(self.answer, self.tokens, self.tokenizer)
