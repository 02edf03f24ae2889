"""The residual panel's small pieces: short cell texts painted over a heatmap, a heatmap with
tooltips from a function, and the formatting of tokens and probabilities."""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QFont, QFontMetricsF

from explorer.core.display.tokens import short
from explorer.ui.widgets.heatmap import Heatmap

CELL_CHARS = 10  # a cell's text is cut to this many characters (and to the cell's width on screen)


@functools.lru_cache(maxsize=4096)  # a pure function of the text: the lens writes the same tokens again and again
def visible_text(text: str, max_chars: int = CELL_CHARS) -> str:
    """A token's text for a small cell (``explorer.core.display.tokens.short``): spaces "·", newlines "↵",
    tabs "⇥", other control characters escaped, cut with an ellipsis; "∅" for an empty string."""
    return short(text, max_chars)


@functools.lru_cache(maxsize=8)
def depths(n: int) -> np.ndarray:
    """0 .. n - 1 as float64, read-only: kept per n (every token switch draws over the same depths)."""
    x = np.arange(n, dtype=np.float64)
    x.flags.writeable = False
    return x


def percent(p: float) -> str:
    """A probability as a percentage, in exponent form when it would round to 0.00%."""
    p = float(p)
    return f"{100 * p:.2f}%" if p >= 5e-5 else f"{p:.2e}"


class CellTexts(pg.GraphicsObject):
    """Short texts centred on the cells of a grid (cell (r, c) spans [c, c+1] x [r, r+1] in data
    coordinates), all painted in one call at a fixed pixel size. Text wider than its cell is elided;
    ``bold`` cells are written in bold; ``light`` cells (on a dark colour) in white."""

    def __init__(self) -> None:
        super().__init__()
        self.texts: list[list[str]] = []
        self.bold = np.zeros((0, 0), dtype=bool)
        self.light = np.zeros((0, 0), dtype=bool)
        self._rect = QRectF()

    def set_cells(self, texts: list[list[str]], bold: np.ndarray, light: np.ndarray) -> None:
        self.prepareGeometryChange()
        self.texts, self.bold, self.light = texts, np.asarray(bold, bool), np.asarray(light, bool)
        rows = len(texts)
        cols = len(texts[0]) if rows else 0
        self._rect = QRectF(0, 0, cols, rows)
        self.update()

    def boundingRect(self) -> QRectF:  # noqa: N802 (Qt override)
        return self._rect

    def paint(self, painter, *_args) -> None:
        if not self.texts:
            return
        transform = painter.transform()
        origin, corner = transform.map(QPointF(0, 0)), transform.map(QPointF(1, 1))
        w, h = abs(corner.x() - origin.x()), abs(corner.y() - origin.y())
        if w < 14 or h < 10:  # cells too small on screen to hold a readable letter (the tooltip has it)
            return
        painter.save()
        painter.resetTransform()  # draw in device pixels: text keeps its size when the view zooms
        font = QFont(painter.font())
        font.setPixelSize(int(np.clip(h * 0.6, 9, 14)))
        bold = QFont(font)
        bold.setBold(True)
        dx, dy = corner.x() - origin.x(), corner.y() - origin.y()  # one cell's step on screen (signed: y may be inverted)
        width = w - 4
        # the cells grouped by font and colour (one setFont / setPen per group, not per cell); each cell's
        # centre from the origin and the step, as transform.map would give for this axis-aligned view
        for is_bold in (False, True):
            painter.setFont(bold if is_bold else font)
            metrics = QFontMetricsF(bold if is_bold else font)
            for is_light in (False, True):
                cells = np.argwhere((self.bold == is_bold) & (self.light == is_light))
                if not len(cells):
                    continue
                painter.setPen(QColor("white") if is_light else QColor("black"))
                for r, c in cells.tolist():
                    x = origin.x() + (c + 0.5) * dx - w / 2 + 2
                    y = origin.y() + (r + 0.5) * dy - h / 2
                    painter.drawText(QRectF(x, y, width, h), Qt.AlignmentFlag.AlignCenter,
                                     metrics.elidedText(self.texts[r][c], Qt.TextElideMode.ElideRight, width))
        painter.restore()


class DescribedHeatmap(Heatmap):
    """A heatmap whose tooltips come from a function of (row, column) when one is set."""

    describe: Callable[[int, int], str] | None = None

    def cell_text(self, row: int, col: int) -> str:
        if self.describe is not None:
            return self.describe(row, col)
        return super().cell_text(row, col)
