"""Images for papers, drawn directly with QPainter on a QImage: a labelled heatmap and a table.

No widget is created, so nothing can flash on screen, and QPainter on a QImage may run in a worker
thread (Qt documents it as thread-safe), which lets File > Export attention maps render in the
background. The pictures carry only what they show: a title, the labels (every k-th where they would
collide; column labels drawn rotated), the colour bar with its range, hatched masked cells; no UI hints,
no scroll bars, no clipped rows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QFont, QFontMetricsF, QImage, QPainter, QPen

from explorer.core.display.levels import abbreviate

FONT_PX = 12
LABEL_CHARS = 16
MASK_LIGHT, MASK_DARK = QColor(215, 215, 215), QColor(150, 150, 150)
GRID = QColor(200, 200, 200)


def _font(bold: bool = False, px: int = FONT_PX) -> QFont:
    font = QFont("DejaVu Sans")
    font.setPixelSize(px)
    font.setBold(bold)
    return font


def _number(value: float) -> str:
    value = float(value)
    if value == 0 or 1e-3 <= abs(value) < 1e4:
        return f"{value:.3g}"
    return f"{value:.2e}"


def colour_indices(matrix: np.ndarray, levels: tuple[float, float], n: int) -> np.ndarray:
    lo, hi = float(levels[0]), float(levels[1])
    span = hi - lo if hi > lo else 1.0
    scaled = np.nan_to_num((np.asarray(matrix, dtype=np.float64) - lo) / span, nan=0.0, posinf=1.0, neginf=0.0)
    return np.clip((scaled * (n - 1)).round(), 0, n - 1).astype(np.intp)


def heatmap_image(matrix: np.ndarray, lut: np.ndarray, levels: tuple[float, float],
                  row_labels: Sequence[str] | None = None, col_labels: Sequence[str] | None = None,
                  title: str = "", hidden: np.ndarray | None = None, value_name: str = "",
                  row_name: str = "", col_name: str = "", target_side: int = 900) -> QImage:
    """A labelled heatmap of ``matrix`` [rows, cols] coloured by ``lut`` ([N, 3] uint8) over ``levels``."""
    matrix = np.atleast_2d(np.asarray(matrix, dtype=np.float64))
    rows, cols = matrix.shape
    hidden = np.zeros(matrix.shape, bool) if hidden is None else np.asarray(hidden, bool) | ~np.isfinite(matrix)
    cell = int(np.clip(target_side // max(rows, cols, 1), 1, 32))
    font, bold = _font(), _font(bold=True, px=FONT_PX + 2)
    metrics, title_metrics = QFontMetricsF(font), QFontMetricsF(bold)
    line = metrics.height()
    rows_text = [abbreviate(str(s), LABEL_CHARS) for s in (row_labels or [])]
    cols_text = [abbreviate(str(s), LABEL_CHARS) for s in (col_labels or [])]
    row_step = max(1, math.ceil((line + 1) / cell))
    col_step = max(1, math.ceil((line + 1) / cell))
    left_w = max((metrics.horizontalAdvance(t) for t in rows_text[::row_step]), default=0) + 10
    bottom_h = max((metrics.horizontalAdvance(t) for t in cols_text[::col_step]), default=0) + 10
    left = int(left_w + (line + 6 if row_name else 0)) + 8
    top = int(title_metrics.height() + 16) if title else 10
    map_w, map_h = cols * cell, rows * cell
    bar_ticks = [_number(v) for v in (levels[0], (levels[0] + levels[1]) / 2, levels[1])]
    right = 24 + 16 + int(max(metrics.horizontalAdvance(t) for t in bar_ticks)) + 12
    bottom = int(bottom_h + (line + 6 if col_name else 0)) + 8
    width = max(left + map_w + right, int(title_metrics.horizontalAdvance(title)) + 20)
    height = top + max(map_h, 120) + bottom
    image = QImage(width, height, QImage.Format.Format_RGB32)
    image.fill(QColor("white"))

    lut = np.asarray(lut, dtype=np.uint8)[:, :3]
    rgb = lut[colour_indices(matrix, levels, len(lut))]
    rgb[hidden] = (MASK_LIGHT.red(), MASK_LIGHT.green(), MASK_LIGHT.blue())
    rgb = np.ascontiguousarray(rgb, dtype=np.uint8)
    cells = QImage(rgb.data, cols, rows, 3 * cols, QImage.Format.Format_RGB888).copy()
    painter = QPainter(image)
    try:
        painter.setRenderHint(QPainter.RenderHint.TextAntialiasing, True)
        painter.drawImage(QRectF(left, top, map_w, map_h), cells)
        if hidden.any() and cell >= 6:  # hatch the masked cells: not a colour of the map
            painter.save()
            painter.setClipRect(QRectF(left, top, map_w, map_h))
            painter.setPen(QPen(MASK_DARK, 1))
            for r, c in zip(*np.nonzero(hidden), strict=True):
                x, y = left + c * cell, top + r * cell
                painter.drawLine(QPointF(x, y + cell), QPointF(x + cell, y))
            painter.restore()
        painter.setPen(QColor("black"))
        painter.setFont(bold)
        if title:
            painter.drawText(QRectF(0, 4, width, top - 8), Qt.AlignmentFlag.AlignHCenter | Qt.AlignmentFlag.AlignVCenter,
                             title)
        painter.setFont(font)
        for r in range(0, len(rows_text), row_step):
            y = top + (r + 0.5) * cell
            painter.drawText(QRectF(left - left_w - 4, y - line / 2, left_w, line),
                             Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter, rows_text[r])
        for c in range(0, len(cols_text), col_step):  # rotated: one label per column still fits
            painter.save()
            painter.translate(left + (c + 0.5) * cell, top + map_h + 6)
            painter.rotate(-90)
            painter.drawText(QRectF(-bottom_h, -line / 2, bottom_h - 2, line),
                             Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter, cols_text[c])
            painter.restore()
        if row_name:
            painter.save()
            painter.translate(10, top + map_h / 2)
            painter.rotate(-90)
            painter.drawText(QRectF(-map_h / 2, 0, map_h, line), Qt.AlignmentFlag.AlignCenter, row_name)
            painter.restore()
        if col_name:
            painter.drawText(QRectF(left, height - line - 6, map_w, line), Qt.AlignmentFlag.AlignCenter, col_name)
        _colour_bar(painter, lut, levels, bar_ticks, QRectF(left + map_w + 24, top, 16, max(map_h, 120)), font,
                    value_name)
    finally:
        painter.end()
    return image


def _colour_bar(painter: QPainter, lut: np.ndarray, levels: tuple[float, float], ticks: list[str], rect: QRectF,
                font: QFont, value_name: str) -> None:
    steps = np.ascontiguousarray(lut[::-1][:, None, :].repeat(2, axis=1), dtype=np.uint8)
    bar = QImage(steps.data, 2, len(lut), 6, QImage.Format.Format_RGB888).copy()
    painter.drawImage(rect, bar)
    painter.setPen(GRID)
    painter.drawRect(rect)
    painter.setPen(QColor("black"))
    painter.setFont(font)
    line = QFontMetricsF(font).height()
    for text, fraction in zip(ticks, (0.0, 0.5, 1.0), strict=True):  # lo at the bottom
        y = rect.top() + (1 - fraction) * rect.height()
        painter.drawLine(QPointF(rect.right(), y), QPointF(rect.right() + 4, y))
        painter.drawText(QRectF(rect.right() + 6, y - line / 2, 200, line), Qt.AlignmentFlag.AlignVCenter, text)
    del value_name  # the title names the quantity


def table_image(headers: Sequence[str], rows: Sequence[Sequence[str]], title: str = "") -> QImage:
    """A table as a picture: a bold header, every row (no scroll bars), numbers right-aligned."""
    font, bold = _font(), _font(bold=True)
    metrics, bold_metrics = QFontMetricsF(font), QFontMetricsF(bold)
    row_h = int(metrics.height() + 8)
    columns = len(headers)
    widths = [bold_metrics.horizontalAdvance(str(h)) for h in headers]
    for row in rows:
        for j, cell in enumerate(row[:columns]):
            widths[j] = max(widths[j], metrics.horizontalAdvance(str(cell)))
    widths = [int(w + 20) for w in widths]
    numeric = [all(_is_number(str(row[j])) for row in rows if j < len(row)) and bool(rows) for j in range(columns)]
    top = int(bold_metrics.height() + 14) if title else 6
    width = max(sum(widths) + 12, int(bold_metrics.horizontalAdvance(title)) + 20)
    height = top + row_h * (len(rows) + 1) + 8
    image = QImage(width, height, QImage.Format.Format_RGB32)
    image.fill(QColor("white"))
    painter = QPainter(image)
    try:
        painter.setRenderHint(QPainter.RenderHint.TextAntialiasing, True)
        if title:
            painter.setFont(bold)
            painter.drawText(QRectF(6, 4, width - 12, top - 8), Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter,
                             title)
        for i, row in enumerate([list(headers), *[list(r) for r in rows]]):
            y = top + i * row_h
            if i == 0:
                painter.fillRect(QRectF(6, y, sum(widths), row_h), QColor(235, 238, 242))
            elif i % 2 == 0:
                painter.fillRect(QRectF(6, y, sum(widths), row_h), QColor(248, 249, 250))
            painter.setFont(bold if i == 0 else font)
            x = 6
            for j in range(columns):
                text = str(row[j]) if j < len(row) else ""
                align = Qt.AlignmentFlag.AlignRight if numeric[j] and i > 0 else Qt.AlignmentFlag.AlignLeft
                painter.drawText(QRectF(x + 10, y, widths[j] - 20, row_h), align | Qt.AlignmentFlag.AlignVCenter, text)
                x += widths[j]
        painter.setPen(GRID)
        painter.drawLine(QPointF(6, top + row_h), QPointF(6 + sum(widths), top + row_h))
        painter.drawRect(QRectF(6, top, sum(widths), row_h * (len(rows) + 1)))
    finally:
        painter.end()
    return image


def _is_number(text: str) -> bool:
    try:
        float(text.replace(",", "").replace("%", "").replace("#", "").replace("\u2212", "-"))
    except ValueError:
        return False
    return True


def save_png(image: QImage, path) -> None:
    """Write ``image`` as a PNG atomically (a failed write leaves no partial file)."""
    from explorer.core.export import atomic_path

    with atomic_path(path) as tmp:
        if not image.save(str(tmp), "PNG"):
            raise OSError(f"could not write a PNG to {path}")
