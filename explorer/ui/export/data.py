"""The data behind a plot as a file: the array as ``.npy``, or a labelled ``.csv`` table (atomically)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from explorer.core.export import write_matrix_csv, write_npy

if TYPE_CHECKING:
    from explorer.ui.export.menu import Exportable


def export_data(exportable: Exportable, path: str | os.PathLike[str]) -> Path:
    """Write the data behind a plot: ``.npy`` (the array) or ``.csv`` (with its labels)."""
    path = Path(path)
    array, row_labels, col_labels = exportable.data()
    array = np.asarray(array)
    suffix = path.suffix.lower()
    if suffix == ".npy":
        write_npy(path, array)
    elif suffix == ".csv":
        if array.ndim == 1:  # a vector: one labelled row per entry
            array = array[:, None]
            col_labels = col_labels if col_labels and len(col_labels) == 1 else [exportable.name]
        if array.ndim != 2:
            raise ValueError(f"CSV export needs a vector or a matrix, got shape {array.shape}")
        rows = list(row_labels) if row_labels is not None else [str(i) for i in range(array.shape[0])]
        cols = list(col_labels) if col_labels is not None else [str(j) for j in range(array.shape[1])]
        write_matrix_csv(path, array, rows, cols)
    else:
        raise ValueError(f"export data as .csv or .npy, not {suffix or 'no extension'!r}")
    return path
