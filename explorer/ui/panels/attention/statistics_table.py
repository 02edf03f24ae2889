"""The head statistics as a real table: one row per head (layer, head, value), sortable by any column,
values formatted to a fixed number of decimals, so twelve or thirty-two heads a layer never overprint
each other as numbers written into small heatmap cells did. Clicking a row selects that head."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from PySide6.QtCore import (
    QAbstractTableModel,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    QPoint,
    QSortFilterProxyModel,
    Qt,
    Signal,
)
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QTableView, QWidget

Index = QModelIndex | QPersistentModelIndex
HEADERS = ("layer", "head", "value")
SORT_ROLE = Qt.ItemDataRole.UserRole + 1


def statistic_text(value: float) -> str:
    """A head statistic as written in the table: 4 decimals, "–" where it is undefined."""
    return f"{value:.4f}" if math.isfinite(value) else "\u2013"


def chance_text(chance: float, sep: str) -> str:
    """The chance level as a tooltip says it ("" when it is undefined)."""
    if not math.isfinite(chance):
        return ""
    return f"{sep}chance level {chance:.4f}: what a head attending evenly to every token it may see scores on this prompt"


class HeadStatisticsModel(QAbstractTableModel):
    """[L, H] values as L*H rows of (layer, head, value); with ``present`` (a model whose layers differ) only
    the cells that are a map."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.values = np.zeros((0, 0), dtype=np.float64)
        self.cells = np.zeros((0, 2), dtype=np.int64)  # (layer, head) of each row
        self.name = "value"
        self.chance = math.nan  # what uniform attention gives on this prompt (core/analysis/chance.py)

    def set_values(self, values: np.ndarray, name: str, chance: float = math.nan,
                   present: np.ndarray | None = None) -> None:
        self.beginResetModel()
        self.values = np.asarray(values, dtype=np.float64)
        shown = np.ones(self.values.shape, bool) if present is None else np.asarray(present, bool)
        self.cells = np.argwhere(shown)  # row-major: layer by layer, head by head
        self.name = name
        self.chance = chance
        self.endResetModel()
        self.headerDataChanged.emit(Qt.Orientation.Horizontal, 2, 2)

    def head_of(self, row: int) -> tuple[int, int]:
        layer, head = self.cells[row]
        return int(layer), int(head)

    def row_of(self, layer: int, head: int) -> int | None:
        """The model row of (layer, head), None where the table has none."""
        hits = np.flatnonzero((self.cells[:, 0] == layer) & (self.cells[:, 1] == head)) if len(self.cells) else []
        return int(hits[0]) if len(hits) else None

    def rowCount(self, parent: Index = QModelIndex()) -> int:
        return 0 if parent.isValid() else len(self.cells)

    def columnCount(self, parent: Index = QModelIndex()) -> int:
        return 0 if parent.isValid() else len(HEADERS)

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole):
        if orientation != Qt.Orientation.Horizontal:
            return None
        if role == Qt.ItemDataRole.ToolTipRole and section == 2:
            return self.name + chance_text(self.chance, "; ")
        if role != Qt.ItemDataRole.DisplayRole:
            return None
        if section == 2 and math.isfinite(self.chance):  # two lines: one was cut to "value (chance 0…"
            return f"value\n(chance {self.chance:.3f})"
        return HEADERS[section]

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole):
        if not index.isValid():
            return None
        layer, head = self.head_of(index.row())
        value = float(self.values[layer, head])
        column = index.column()
        if role == Qt.ItemDataRole.DisplayRole:
            return (f"L{layer}", f"H{head}", statistic_text(value))[column]
        if role == SORT_ROLE:  # ties broken by the other index; undefined values below every number
            heads = self.values.shape[1]
            return (layer * heads + head, head * self.values.shape[0] + layer,
                    value if math.isfinite(value) else -math.inf)[column]
        if role == Qt.ItemDataRole.TextAlignmentRole:
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if role == Qt.ItemDataRole.ToolTipRole:
            shown = f"{value:.6f}" if math.isfinite(value) else "undefined"
            return f"L{layer} H{head}: {self.name} {shown}" + chance_text(self.chance, "\n")
        return None


class HeadStatisticsTable(QTableView):
    """The sortable table of one head statistic. Signals: head_clicked(layer, head)."""

    head_clicked = Signal(int, int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.source = HeadStatisticsModel(self)
        self.proxy = QSortFilterProxyModel(self)
        self.proxy.setSourceModel(self.source)
        self.proxy.setSortRole(SORT_ROLE)
        self.setModel(self.proxy)
        self.setSortingEnabled(True)
        self.sortByColumn(2, Qt.SortOrder.DescendingOrder)  # the most striking heads first
        self.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.setAlternatingRowColors(True)
        self.verticalHeader().setVisible(False)
        self.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 6)
        header = self.horizontalHeader()
        metrics = self.fontMetrics()
        index_width = max(metrics.horizontalAdvance("layer"), metrics.horizontalAdvance("L00")) + 28  # + sort arrow
        value_width = metrics.horizontalAdvance("-0.0000") + 30
        for column in (0, 1):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.Fixed)
            header.resizeSection(column, index_width)
        header.setSectionResizeMode(2, QHeaderView.ResizeMode.Stretch)
        width = 2 * index_width + value_width + self.verticalScrollBar().sizeHint().width() + 6
        self.setMinimumSize(width, 4 * (metrics.height() + 6) + 30)  # a header and a few rows
        self.clicked.connect(self._on_clicked)
        # (layer, head, parent) -> the right-click entries for that head (the panel's: switch it off, mean-ablate)
        self.head_actions: Callable[[int, int, QObject], list[QAction]] | None = None

    def context_actions(self, pos: QPoint, parent: QObject) -> list[QAction]:
        """The right-click entries for the head of the row under ``pos`` (before the export's)."""
        index = self.indexAt(pos)
        if not index.isValid() or self.head_actions is None:
            return []
        return self.head_actions(*self.head_at(index.row()), parent)

    def set_values(self, values: np.ndarray, name: str, chance: float = math.nan,
                   present: np.ndarray | None = None) -> None:
        self.source.set_values(values, name, chance, present)

    def head_at(self, row: int) -> tuple[int, int]:
        """(layer, head) shown in table row ``row`` (after sorting)."""
        return self.source.head_of(self.proxy.mapToSource(self.proxy.index(row, 0)).row())

    def _on_clicked(self, index: QModelIndex) -> None:
        self.head_clicked.emit(*self.head_at(index.row()))

    def select_head(self, layer: int, head: int) -> None:
        """Highlight the row of (layer, head) without emitting ``head_clicked``."""
        found = self.source.row_of(layer, head)
        if found is None:
            return
        row = self.proxy.mapFromSource(self.source.index(found, 0)).row()
        self.selectRow(row)
