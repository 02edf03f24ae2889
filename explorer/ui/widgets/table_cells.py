"""Read-only tables whose cells a selection switch rewrites in place: the row count set only when it changes,
the items kept (only their texts set), number columns of a fixed width. Emptying and refilling a table, or
resizing its columns to their contents, re-lays out and repaints it (and its header) on every switch."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QHeaderView, QTableWidget, QTableWidgetItem


def fix_widths(table: QTableWidget, columns: tuple[int, ...], sample: str) -> None:
    """``columns`` keep one width, wide enough for their header and ``sample`` (a widest value): a new text in
    them re-measures nothing (ResizeToContents measures every cell and re-lays out the table on each change)."""
    header = table.horizontalHeader()
    for c in columns:
        title = table.horizontalHeaderItem(c).text()
        width = max(header.fontMetrics().horizontalAdvance(title), table.fontMetrics().horizontalAdvance(sample))
        header.setSectionResizeMode(c, QHeaderView.ResizeMode.Fixed)
        header.resizeSection(c, width + 16)


def set_rows(table: QTableWidget, rows: list[tuple[str, ...]], numbers: tuple[int, ...] = ()) -> None:
    """``table`` shows ``rows``: its row count set only when it changes, its items kept (``set_cell``)."""
    if table.rowCount() != len(rows):
        table.setRowCount(len(rows))
    for r, texts in enumerate(rows):
        for c, text in enumerate(texts):
            set_cell(table, r, c, text, c in numbers)


def cell(text: str, number: bool = False) -> QTableWidgetItem:
    item = QTableWidgetItem(text)
    if number:
        item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
    return item


def set_cell(table: QTableWidget, row: int, column: int, text: str, number: bool = False) -> None:
    """``table``'s cell shows ``text``: its item is kept (only its text set) when it has one."""
    item = table.item(row, column)
    if item is None:
        table.setItem(row, column, cell(text, number))
    elif item.text() != text:
        item.setText(text)
