"""The largest components of a grid as a list beside it: rank, name and signed value, largest in size first
(``core.analysis.ranking``: ties by the lower index), so the heads that matter are read, not hunted for in a
heatmap of 30 x 9 cells. Clicking a row emits its key (the panel selects that head, or runs that patch).

The names are read whole: the list asks its splitter for the width of its longest name (up to ``NAME_MAX_CHARS``
characters), the value column no wider than its numbers (an estimate is written "≈+0.1234", not "+0.1234
(estimate)": at 1600x1000 the patching list read "s…"); a longer name is elided in the middle, whole in its
tooltip."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (QAbstractItemView, QHeaderView, QLabel, QStyle, QTableWidget, QTableWidgetItem,
                               QVBoxLayout, QWidget)

from explorer.core.analysis.ranking import top_k_ids

TOP = 15  # rows listed
NAME_MAX_CHARS = 28  # the name column asks for at most this many average characters ("stream final @ 1234:" + 9)
APPROX = "\u2248"  # before an estimate's value


def text_margin(table: QTableWidget) -> int:
    """The pixels an item view leaves on each side of a cell's text (Qt's styles: the focus frame's margin + 1)."""
    return table.style().pixelMetric(QStyle.PixelMetric.PM_FocusFrameHMargin, None, table) + 1


class RankedList(QWidget):
    """A titled table of the ``top`` largest |values| (see the module docstring). ``chosen(key)``: a row clicked."""

    chosen = Signal(object)

    def __init__(self, title: str, value_name: str = "value", top: int = TOP, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.top = top
        self.keys: list[Any] = []
        self.values = np.zeros(0)  # the listed values, exact (the table writes 4 decimals)
        self.labels: list[str] = []
        self.title = QLabel(title, self)
        self.title.setWordWrap(True)
        self.table = QTableWidget(0, 3, self)
        self.table.setHorizontalHeaderLabels(["#", "component", value_name])
        self.table.verticalHeader().setVisible(False)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setTextElideMode(Qt.TextElideMode.ElideMiddle)  # a long name keeps its start and its token
        self.table.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 6)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
        header.setSectionResizeMode(2, QHeaderView.ResizeMode.ResizeToContents)
        self.table.cellClicked.connect(lambda row, _col: self.chosen.emit(self.keys[row]) if row < len(self.keys) else None)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addWidget(self.title)
        layout.addWidget(self.table, 1)
        self.floor_px = self.fontMetrics().horizontalAdvance("00 L00 FFN -0.0000") + 60  # the list at its narrowest
        self.setMinimumWidth(self.floor_px)

    def show_items(self, labels: Sequence[str], values: np.ndarray, keys: Sequence[Any],
                   estimates: Sequence[bool] | None = None) -> None:
        """List the ``top`` entries of ``values`` largest in size (NaN left out), each with its label and key;
        an entry of ``estimates`` that is true is written "≈" before its value (its tooltip says "an estimate")."""
        values = np.asarray(values, dtype=np.float64).ravel()
        order = top_k_ids(np.abs(values), self.top, finite_only=True) if values.size else np.zeros(0, np.int64)
        self.keys = [keys[i] for i in order]
        self.values, self.labels = values[order], [labels[i] for i in order]
        self.table.setRowCount(len(order))
        for row, i in enumerate(order.tolist()):
            approx = estimates is not None and bool(estimates[i])
            tip = f"{labels[i]}: {values[i]:+.6g}" + (" (an estimate)" if approx else "")
            for col, text in enumerate((str(row + 1), labels[i], f"{APPROX if approx else ''}{values[i]:+.4f}")):
                item = QTableWidgetItem(text)
                item.setToolTip(tip)
                if col != 1:
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                self.table.setItem(row, col, item)
        self._fit_names()

    def _fit_names(self) -> None:
        """Ask for the width that shows every name whole (up to ``NAME_MAX_CHARS``), the other columns beside it."""
        table, metrics = self.table, self.table.fontMetrics()
        margins = 2 * text_margin(table) + 2  # (+2: the grid line, and a pixel of air)
        longest = max((metrics.horizontalAdvance(label) for label in self.labels), default=0)
        header = metrics.horizontalAdvance(table.horizontalHeaderItem(1).text())
        name_px = min(max(longest, header) + margins, metrics.averageCharWidth() * NAME_MAX_CHARS + margins)
        others = table.sizeHintForColumn(0) + max(table.sizeHintForColumn(2),
                                                  table.horizontalHeader().sectionSizeHint(2))
        scroll = table.style().pixelMetric(QStyle.PixelMetric.PM_ScrollBarExtent, None, table)
        self.setMinimumWidth(max(self.floor_px, name_px + others + scroll + 2 * table.frameWidth() + 2))

    def clear_items(self) -> None:
        self.keys, self.values, self.labels = [], np.zeros(0), []
        self.table.setRowCount(0)

    def rows(self) -> list[tuple[str, str]]:
        """What the list shows: (component, value text) per row, in order."""
        return [(self.table.item(r, 1).text(), self.table.item(r, 2).text()) for r in range(self.table.rowCount())]

    def data(self) -> tuple[np.ndarray, list[str], list[str]]:
        """The listed values [k] (export), with their components."""
        return self.values, list(self.labels), ["value"]
