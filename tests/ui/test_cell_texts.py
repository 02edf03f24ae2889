"""The logit lens' cell texts (``CellTexts``), painted grouped by font and colour, give the same pixels as
painting cell by cell through the view's transform."""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QFont, QFontMetricsF, QImage, QPainter, QTransform

from explorer.ui.panels.residual.cells import CellTexts


def one_by_one(item: CellTexts, painter: QPainter) -> None:
    """The plain way: every cell through the transform, its own font and pen."""
    transform = painter.transform()
    origin, corner = transform.map(QPointF(0, 0)), transform.map(QPointF(1, 1))
    w, h = abs(corner.x() - origin.x()), abs(corner.y() - origin.y())
    painter.save()
    painter.resetTransform()
    font = QFont(painter.font())
    font.setPixelSize(int(np.clip(h * 0.6, 9, 14)))
    bold = QFont(font)
    bold.setBold(True)
    for r, row in enumerate(item.texts):
        for c, text in enumerate(row):
            f = bold if item.bold[r, c] else font
            centre = transform.map(QPointF(c + 0.5, r + 0.5))
            rect = QRectF(centre.x() - w / 2 + 2, centre.y() - h / 2, w - 4, h)
            painter.setFont(f)
            painter.setPen(QColor("white") if item.light[r, c] else QColor("black"))
            painter.drawText(rect, Qt.AlignmentFlag.AlignCenter,
                             QFontMetricsF(f).elidedText(text, Qt.TextElideMode.ElideRight, rect.width()))
    painter.restore()


def render(paint, transform: QTransform) -> QImage:
    image = QImage(420, 260, QImage.Format.Format_ARGB32)
    image.fill(QColor("grey"))
    painter = QPainter(image)
    painter.setTransform(transform)
    paint(painter)
    painter.end()
    return image


def test_grouped_painting_gives_the_same_pixels(qtbot):
    rng = np.random.default_rng(0)
    words = ["·the", "·Paris", "↵", "∅", "·a very long token", "ing", "·France", "2"]
    texts = [[words[int(i)] for i in rng.integers(0, len(words), 6)] for _ in range(5)]
    item = CellTexts()
    item.set_cells(texts, rng.random((5, 6)) < 0.3, rng.random((5, 6)) < 0.5)
    for transform in (QTransform(60, 0, 0, 40, 20, 10),  # y down
                      QTransform(60, 0, 0, -40, 20, 240)):  # y up (an inverted view)
        ours = render(lambda p: item.paint(p), transform)
        plain = render(lambda p: one_by_one(item, p), transform)
        assert ours == plain
        assert ours != render(lambda p: None, transform)  # something was written
