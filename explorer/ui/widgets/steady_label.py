"""A word-wrapped label whose text changes on every selection switch without moving the layout.

A QLabel whose new text wraps to fewer or more lines changes its size hint; the layout then resizes
the plots beside it, and a pyqtgraph plot that is resized lays out its axes and titles again and
repaints: tens of ms on a token switch. ``SteadyLabel`` keeps the tallest height it has needed at its
current width (a new width starts over), and skips a text equal to the one shown.
"""

from __future__ import annotations

from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import QLabel, QSizePolicy, QWidget


class SteadyLabel(QLabel):
    def __init__(self, text: str = "", parent: QWidget | None = None) -> None:
        super().__init__(text, parent)
        self.setWordWrap(True)
        # its text's width never widens the panel: it wraps (the height it needs is kept below)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)

    def setText(self, text: str) -> None:  # noqa: N802 (Qt's name)
        if text == self.text():
            return
        super().setText(text)
        self._hold()

    def _hold(self, reset: bool = False) -> None:
        width = self.width()
        need = self.heightForWidth(width) if width > 0 else self.sizeHint().height()
        if reset or need > self.minimumHeight():
            self.setMinimumHeight(max(need, 0))

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 (Qt's name)
        super().resizeEvent(event)
        if event.size().width() != event.oldSize().width():
            self._hold(reset=True)  # a new width: the height its text needs there
