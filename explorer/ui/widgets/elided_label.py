"""A label on one line, cut with "…" at its width, whose text never widens the window.

A plain QLabel asks its layout for the width of its whole text. In a status bar or a toolbar that
request reaches the main window: a loading stage naming a long path (or a GGUF file's line of
quantisation types) made the window wider than the screen, and it stayed so. ``ElidedLabel`` asks
for at most ``max_width`` (its whole text when shorter), shrinks to ``min_width``, draws its text cut
with "…" to the width it gets, and keeps the whole text in ``text()`` and its tooltip.
"""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtWidgets import QLabel, QSizePolicy, QWidget


class ElidedLabel(QLabel):
    PADDING = 4  # a little air, and whatever a style sheet's padding adds

    def __init__(self, text: str = "", parent: QWidget | None = None, max_width: int | None = None,
                 min_width: int = 40) -> None:
        super().__init__("", parent)
        self._full = ""
        self.max_width, self.min_width = max_width, min_width
        self.setWordWrap(False)
        self.setTextFormat(Qt.TextFormat.PlainText)
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Fixed)
        self.setText(text)

    def setText(self, text: str) -> None:  # noqa: N802 - Qt's name
        self._full = text
        self.setToolTip(text)
        self._elide()
        self.updateGeometry()

    def text(self) -> str:
        """The whole text (what is drawn may be cut: ``shown_text``)."""
        return self._full

    def shown_text(self) -> str:
        """What is drawn: the text on one line, elided to the label's width."""
        return super().text()

    def _natural_width(self) -> int:
        margins = self.contentsMargins()
        one_line = " ".join(self._full.split())
        return self.fontMetrics().horizontalAdvance(one_line) + self.PADDING + margins.left() + margins.right()

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt's name
        width = self._natural_width()
        if self.max_width is not None:
            width = min(width, self.max_width)
        return QSize(width, super().sizeHint().height())

    def minimumSizeHint(self) -> QSize:  # noqa: N802 - Qt's name
        return QSize(min(self.min_width, self.sizeHint().width()), super().minimumSizeHint().height())

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt override
        super().resizeEvent(event)
        self._elide()

    def _elide(self) -> None:
        margins = self.contentsMargins()
        width = max(self.width() - self.PADDING - margins.left() - margins.right(), 20)
        one_line = " ".join(self._full.split())
        super().setText(self.fontMetrics().elidedText(one_line, Qt.TextElideMode.ElideRight, width))
