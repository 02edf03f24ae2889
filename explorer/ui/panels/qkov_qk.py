"""The QK view: one attention score as a table of terms (query parts x key parts, diverging colours, each
cell's exact value and words in its tooltip) beside the ranked list of the largest terms, and the notes that
say what the split assumes and where it stops (``core/analysis/qk.py``)."""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHeaderView,
    QLabel,
    QSplitter,
    QTableWidget,
    QVBoxLayout,
    QWidget,
)

from explorer.core.analysis.qk import QKSplit
from explorer.core.display.levels import finite_levels
from explorer.ui.panels.qkov_answer import QKAnswer, part_label, qk_cell_text, term_rows
from explorer.ui.widgets.heatmap import Heatmap
from explorer.ui.widgets.table_cells import fix_widths, set_rows


class TermsHeatmap(Heatmap):
    """The terms table: its tooltips name both parts, the exact value and its share."""

    split: QKSplit | None = None

    def cell_text(self, row: int, col: int) -> str:
        if self.split is None or row >= self.split.table.shape[0] or col >= self.split.table.shape[1]:
            return super().cell_text(row, col)
        return qk_cell_text(self.split, row, col)


class QKPage(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.answer: QKAnswer | None = None
        self.heatmap = TermsHeatmap(colormap="CET-D1", symmetric=True, title="the score's terms")
        self.heatmap.setMinimumSize(240, 200)
        self.heatmap.plot.setLabel("left", "the query's parts")
        self.heatmap.plot.setLabel("bottom", "the key's parts")
        self.terms = QTableWidget(0, 3)
        self.terms.setHorizontalHeaderLabels(["share", "value", "term"])
        self.terms.verticalHeader().setVisible(False)
        self.terms.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.terms.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.terms.setWordWrap(True)
        self.terms.setMinimumSize(260, 160)
        fix_widths(self.terms, (0,), "-100%")
        fix_widths(self.terms, (1,), "+000.000")
        self.terms.horizontalHeader().setSectionResizeMode(2, QHeaderView.ResizeMode.Stretch)
        self.terms.verticalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.terms.setToolTip("The largest terms first. Share: the term over the sum of every term's size, so the "
                              "sizes add up to 100% even where terms cancel.")
        right = QWidget()
        column = QVBoxLayout(right)
        column.setContentsMargins(0, 0, 0, 0)
        column.addWidget(QLabel("<b>Largest terms</b>"))
        column.addWidget(self.terms, 1)
        splitter = QSplitter(Qt.Orientation.Horizontal)
        splitter.addWidget(self.heatmap)
        splitter.addWidget(right)
        splitter.setStretchFactor(0, 11)
        splitter.setStretchFactor(1, 9)
        splitter.setSizes([5500, 4500])  # in proportion, whatever the width (not by the plots' size hints)
        self.notes = QLabel()
        self.notes.setWordWrap(True)
        self.notes.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.notes.setStyleSheet("color: palette(placeholder-text)")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(splitter, 1)
        layout.addWidget(self.notes)

    def show_answer(self, a: QKAnswer) -> None:
        self.answer = a
        s = a.split
        self.heatmap.split = s
        levels = finite_levels(s.table, symmetric=True)
        self.heatmap.set_data(s.table, [part_label(p) for p in s.query_parts], [part_label(p) for p in s.key_parts],
                              levels=levels, value_name="term")
        q = a.question
        self.heatmap.plot.setTitle(f"the terms of #{q.query} \u2192 #{q.key}")
        rows = term_rows(s)
        set_rows(self.terms, [(f"{t.share:+.0%}", f"{t.value:+.3f}", t.label) for t in rows], numbers=(0, 1))
        for r, t in enumerate(rows):
            tip = f"{t.label}: {t.value:+.6f} ({t.share:+.2%} of the terms' sizes)"
            for c in range(3):
                self.terms.item(r, c).setToolTip(tip)
        self.notes.setText(" ".join(s.notes))

    def clear(self) -> None:
        self.answer = None
        self.heatmap.split = None
        self.heatmap.set_data(np.zeros((0, 0)))
        set_rows(self.terms, [])
        self.notes.setText("")

    # --- exported data -----------------------------------------------------------------------------
    def table_data(self) -> tuple[np.ndarray, list[str], list[str]]:
        """Every term: query parts (rows) x key parts (columns), named in words."""
        if self.answer is None:
            return np.zeros((0, 0)), [], []
        s = self.answer.split
        return s.table, list(s.query_names), list(s.key_names)

    def terms_data(self) -> tuple[np.ndarray, list[str], list[str]]:
        """The ranked terms: value and share, named by their sentences."""
        if self.answer is None:
            return np.zeros((0, 2)), [], ["value", "share"]
        rows = term_rows(self.answer.split)
        return (np.array([[t.value, t.share] for t in rows], dtype=np.float64).reshape(-1, 2),
                [t.label for t in rows], ["value", "share"])
