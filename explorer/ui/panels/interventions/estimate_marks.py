"""A heatmap that says which of its cells are estimates: a small ring on each, and tooltips that say
"estimate" or "exact".

The patching panel's grids hold two kinds of numbers: attribution patching's linear estimates (every
cell from one backward pass) and exact patches (one patched run per cell). A ring marks each
estimated cell; a cell loses its ring when its exact value arrives.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtWidgets import QWidget

from explorer.ui.widgets.heatmap import Heatmap

ESTIMATE = "estimate (attribution patching: linear, from one backward pass)"
EXACT = "exact (one patched run)"
LEGEND = ("\u25cb marks an estimate (attribution patching: the linear term, from one backward pass); cells "
          "without a ring are exact patches. Click an estimate for its exact value; click an exact cell to "
          "run that patch in the window.")


class MarkedHeatmap(Heatmap):
    """A :class:`Heatmap` whose ``estimated`` cells carry a ring and say "estimate" in their tooltip."""

    def __init__(self, parent: QWidget | None = None, **kwargs) -> None:
        super().__init__(parent, **kwargs)
        self._estimated = np.zeros((0, 0), dtype=bool)
        self.marks = pg.ScatterPlotItem(symbol="o", size=7, pen=pg.mkPen((30, 30, 30), width=1.2), brush=None,
                                        pxMode=True)
        self.marks.setZValue(20)
        self.plot.addItem(self.marks)

    @property
    def estimated(self) -> np.ndarray:
        """Which cells hold an estimate (read-only; all False when none do)."""
        return self._estimated

    def set_estimated(self, estimated: np.ndarray | None) -> None:
        """Ring the ``estimated`` cells (bool, the matrix's shape); None: every cell is exact."""
        shape = self.matrix.shape
        estimated = np.zeros(shape, bool) if estimated is None else np.array(estimated, dtype=bool)
        if estimated.shape != shape:
            raise ValueError(f"estimate marks of shape {estimated.shape} do not match the matrix {shape}")
        estimated.flags.writeable = False
        self._estimated = estimated
        rows, cols = np.nonzero(estimated)
        self.marks.setData(x=cols + 0.5, y=rows + 0.5, size=self._ring_size())

    def _ring_size(self) -> float:
        """Half a cell on screen, between 3 and 8 pixels: rings of narrow cells must not run together."""
        rows, cols = self.matrix.shape
        if not rows or not cols:
            return 7.0
        cell = min(self.plot.vb.width() / cols, self.plot.vb.height() / rows)
        return float(np.clip(cell * 0.5, 3.0, 8.0))

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt override)
        super().resizeEvent(event)
        estimated = getattr(self, "_estimated", None)  # (Heatmap's own construction resizes before it exists)
        if estimated is not None and estimated.any() and not getattr(self, "closed", False):
            self.marks.setSize(self._ring_size())

    def cell_text(self, row: int, col: int) -> str:
        text = super().cell_text(row, col)
        if self.masked[row, col] or not np.isfinite(self.matrix[row, col]):
            return text
        estimated = self._estimated.shape == self.matrix.shape and self._estimated[row, col]
        return f"{text}, {ESTIMATE if estimated else EXACT}"


def duration(seconds: float) -> str:
    """A time estimate in words: seconds, or minutes from two minutes on."""
    return f"{seconds:.1f} s" if seconds < 120 else f"{seconds / 60:.1f} min"
