"""The largest components of a grid as a list beside it: rank, name and signed value, largest in size first
(``core.analysis.ranking``: ties by the lower index), so the heads that matter are read, not hunted for in a
heatmap of 30 x 9 cells. Clicking a row emits its key (the panel selects that head, or runs that patch)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QLabel, QTableWidget, QTableWidgetItem, QVBoxLayout, QWidget

from explorer.core.analysis.ranking import top_k_ids

TOP = 15  # rows listed


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
        self.setMinimumWidth(self.fontMetrics().horizontalAdvance("00 L00 FFN -0.0000") + 60)

    def show_items(self, labels: Sequence[str], values: np.ndarray, keys: Sequence[Any],
                   notes: Sequence[str] | None = None) -> None:
        """List the ``top`` entries of ``values`` largest in size (NaN left out), each with its label and key;
        ``notes`` (e.g. "estimate") are written after the value."""
        values = np.asarray(values, dtype=np.float64).ravel()
        order = top_k_ids(np.abs(values), self.top, finite_only=True) if values.size else np.zeros(0, np.int64)
        self.keys = [keys[i] for i in order]
        self.values, self.labels = values[order], [labels[i] for i in order]
        self.table.setRowCount(len(order))
        for row, i in enumerate(order.tolist()):
            note = f" ({notes[i]})" if notes is not None and notes[i] else ""
            for col, text in enumerate((str(row + 1), labels[i], f"{values[i]:+.4f}{note}")):
                item = QTableWidgetItem(text)
                if col != 1:
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                self.table.setItem(row, col, item)

    def clear_items(self) -> None:
        self.keys, self.values, self.labels = [], np.zeros(0), []
        self.table.setRowCount(0)

    def rows(self) -> list[tuple[str, str]]:
        """What the list shows: (component, value text) per row, in order."""
        return [(self.table.item(r, 1).text(), self.table.item(r, 2).text()) for r in range(self.table.rowCount())]

    def data(self) -> tuple[np.ndarray, list[str], list[str]]:
        """The listed values [k] (export), with their components."""
        return self.values, list(self.labels), ["value"]
