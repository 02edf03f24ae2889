"""Right-click > Copy image / Copy data: a plot, or the data behind it, onto the clipboard.

The image is rendered as File exports render PNGs (``images.render_png``); the data is a
tab-separated table with the plot's labels (the first row the column labels, the first column the row
labels), which spreadsheets and notebooks paste as a table.
"""

from __future__ import annotations

import csv
import io
from typing import TYPE_CHECKING

import numpy as np
from PySide6.QtCore import QMimeData
from PySide6.QtGui import QGuiApplication

from explorer.ui.export.images import render_png

if TYPE_CHECKING:
    from explorer.ui.export.menu import Exportable


def data_tsv(exportable: Exportable) -> str:
    """The data behind a plot as tab-separated text with its row and column labels."""
    array, row_labels, col_labels = exportable.data()
    array = np.asarray(array)
    if array.ndim == 0:
        array = array.reshape(1, 1)
    if array.ndim == 1:
        array = array[:, None]
        col_labels = col_labels if col_labels and len(col_labels) == 1 else [exportable.name]
    if array.ndim != 2:
        raise ValueError(f"copying data needs a vector or a matrix, got shape {array.shape}")
    rows = list(row_labels) if row_labels is not None else [str(i) for i in range(array.shape[0])]
    cols = list(col_labels) if col_labels is not None else [str(j) for j in range(array.shape[1])]
    out = io.StringIO()
    writer = csv.writer(out, delimiter="\t", lineterminator="\n")
    writer.writerow(["", *cols])
    for label, row in zip(rows, array):
        writer.writerow([label, *(_number(v) for v in row)])
    return out.getvalue()


def _number(value: object) -> str:
    try:
        v = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return str(value)
    return repr(v) if np.isfinite(v) else str(v)


def copy_data(exportable: Exportable) -> str:
    text = data_tsv(exportable)
    mime = QMimeData()
    mime.setText(text)
    mime.setData("text/tab-separated-values", text.encode("utf-8"))
    QGuiApplication.clipboard().setMimeData(mime)
    return text


def copy_image(exportable: Exportable) -> None:
    QGuiApplication.clipboard().setImage(render_png(exportable.item))
