"""Tokens as coloured chips in a wrapping flow, each with its id underneath; one painted widget.

A conversation's chips carry its role bands (``set_bands``, ``role_bands.py``): a bar over each chip in
the colour of its turn's role or its kind (thinking, template markup).

One widget painting every chip (rather than a QLabel per token) keeps a 1,024-token prompt cheap
to show. What a chip says and its colour come from ``explorer.core.tokenize.display``.
"""

from __future__ import annotations

import bisect

from collections.abc import Sequence

from PySide6.QtCore import QEvent, QPoint, QRect, QSize, Qt, Signal
from PySide6.QtGui import QColor, QFont, QFontDatabase, QFontMetrics, QHelpEvent, QMouseEvent, QPainter, QPen
from PySide6.QtWidgets import QSizePolicy, QToolTip, QWidget

from explorer.core.tokenize.display import ChipView
from explorer.ui.widgets.role_bands import Band, colours_per_token

PAD_X, PAD_Y, GAP, MARGIN = 5, 2, 4, 4
BAND_H = 4  # the role bar over a chip of a conversation
MAX_LABEL_CHARS = 24
MEASURED_KEPT = 50_000  # chip widths kept across prompts (per label and id) before they are measured afresh
SELECTED = QColor("#d9480f")
ID_COLOUR = QColor("#6b7280")
PARTIAL_TEXT = QColor("#7b1fa2")


class ChipRects:
    """The chips' rectangles, made when asked for (a long prompt's 4,096 chips are flowed on every draw, and
    only the few on screen are painted): each chip's top-left corner and width, one height for all."""

    def __init__(self, corners: list[tuple[int, int]] = (), widths: Sequence[int] = (), height: int = 0) -> None:
        self.corners, self.widths, self.height = list(corners), list(widths), height
        self.tops = [y for _x, y in self.corners]  # rows flow down: the chips a clip meets are found by bisection

    def __len__(self) -> int:
        return len(self.corners)

    def __getitem__(self, i: int) -> QRect:
        x, y = self.corners[i]
        return QRect(x, y, self.widths[i], self.height)

    def between(self, top: int, bottom: int) -> range:
        """The chips whose rows meet the rows top..bottom."""
        return range(bisect.bisect_left(self.tops, top - self.height), bisect.bisect_right(self.tops, bottom))

    def at(self, point: QPoint) -> int | None:
        for i in self.between(point.y(), point.y()):
            if self[i].contains(point):
                return i
        return None


class TokenChips(QWidget):
    """A flow of token chips.

    Signals
    -------
    token_clicked(int)
        The position of the chip clicked (only when ``interactive``).
    """

    token_clicked = Signal(int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.chips: list[ChipView] = []
        self.interactive = True
        self.selected: int | None = None
        self.bands: tuple[Band, ...] = ()
        self._band_colours: list[str | None] = []
        self._rects = ChipRects()
        self._layout_width = -1
        self._height = 0
        self._widths: list[int] | None = None  # each chip's width, measured once per set of chips
        self._heights: dict[int, int] = {}  # heightForWidth, remembered per width for these chips
        self._measured: dict[tuple[str, int], int] = {}  # a chip's width per (label, id), kept across prompts
        self.label_font = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
        self.label_font.setPointSizeF(max(self.label_font.pointSizeF(), 10.0))
        self.partial_font = QFont(self.label_font)
        self.partial_font.setItalic(True)
        self.id_font = QFont(self.font())
        self.id_font.setPointSizeF(max(self.id_font.pointSizeF() * 0.8, 7.0))
        self.setMouseTracking(False)
        self.setFocusPolicy(Qt.FocusPolicy.ClickFocus)
        policy = QSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        policy.setHeightForWidth(True)
        self.setSizePolicy(policy)

    # --- content -----------------------------------------------------------------------------
    def set_chips(self, chips: Sequence[ChipView], interactive: bool = True) -> None:
        self.chips = list(chips)
        self._band_colours = colours_per_token(self.bands, len(self.chips))
        self.interactive = interactive
        self.setCursor(Qt.CursorShape.PointingHandCursor if interactive else Qt.CursorShape.ArrowCursor)
        self._widths, self._heights = None, {}
        self._layout_width = -1
        self._relayout()
        self.update()

    def set_bands(self, bands: tuple[Band, ...]) -> None:
        """A conversation's role bands over the chips (() for none): a coloured bar on each chip."""
        bands = tuple(bands)
        if bands == self.bands:
            return
        self.bands = bands
        self._band_colours = colours_per_token(bands, len(self.chips))
        self._widths, self._heights = None, {}
        self._layout_width = -1
        self._relayout()
        self.update()

    def band_colour(self, position: int) -> str | None:
        """The role bar's colour over chip ``position`` (None: none)."""
        return self._band_colours[position] if position < len(self._band_colours) else None

    def set_selected(self, position: int | None) -> None:
        if position != self.selected:
            old, self.selected = self.selected, position
            for p in (old, position):
                if p is not None and p < len(self._rects):
                    self.update(self._rects[p].adjusted(-2, -2, 2, 2))

    def labels(self) -> list[str]:
        return [chip.label for chip in self.chips]

    def chip_rect(self, position: int) -> QRect:
        self._relayout()
        return QRect(self._rects[position])

    def chip_at(self, point: QPoint) -> int | None:
        self._relayout()
        return self._rects.at(point)

    # --- geometry ----------------------------------------------------------------------------
    @staticmethod
    def _elide(text: str) -> str:
        return text if len(text) <= MAX_LABEL_CHARS else text[:MAX_LABEL_CHARS - 1] + "…"

    def _chip_height(self) -> int:
        label_fm, id_fm = QFontMetrics(self.label_font), QFontMetrics(self.id_font)
        return label_fm.height() + id_fm.height() + 2 * PAD_Y + 1 + (BAND_H if self.bands else 0)

    def _chip_widths(self) -> list[int]:
        """Each chip's width, measured once per (label, id): an edit of a long prompt measures only its new chips."""
        if self._widths is None or len(self._widths) != len(self.chips):
            label_fm, id_fm = QFontMetrics(self.label_font), QFontMetrics(self.id_font)
            if len(self._measured) > MEASURED_KEPT:
                self._measured.clear()
            measured = self._measured
            widths = []
            for chip in self.chips:
                key = (chip.label, chip.token_id)
                w = measured.get(key)
                if w is None:
                    w = measured[key] = max(label_fm.horizontalAdvance(self._elide(chip.label)),
                                            id_fm.horizontalAdvance(str(chip.token_id))) + 2 * PAD_X
                widths.append(w)
            self._widths = widths
        return self._widths

    def _positions(self, width: int) -> tuple[list[tuple[int, int]], int, int]:
        """Each chip's top-left corner flowed into ``width``, the chips' height and the whole height."""
        chip_h = self._chip_height()
        x, y, corners = MARGIN, MARGIN, []
        for chip, w in zip(self.chips, self._chip_widths()):
            if x > MARGIN and x + w > width - MARGIN:
                x, y = MARGIN, y + chip_h + GAP
            corners.append((x, y))
            x += w + GAP
            if chip.data.endswith(b"\n"):  # a newline token ends the line, as in the text
                x, y = MARGIN, y + chip_h + GAP
        height = (corners[-1][1] + chip_h + MARGIN) if corners else 2 * MARGIN
        return corners, chip_h, height

    def _flow(self, width: int) -> tuple[ChipRects, int]:
        corners, chip_h, height = self._positions(width)
        self._heights[width] = height
        return ChipRects(corners, self._chip_widths(), chip_h), height

    def _relayout(self) -> None:
        width = max(self.width(), 50)
        if width == self._layout_width:
            return
        self._rects, height = self._flow(width)
        self._layout_width = width
        if height != self._height:
            self._height = height
            self.setMinimumHeight(height)
            self.updateGeometry()

    def hasHeightForWidth(self) -> bool:
        return True

    def heightForWidth(self, width: int) -> int:
        if width not in self._heights:  # (the height alone: no rectangles built)
            self._heights[width] = self._positions(width)[2]
        return self._heights[width]

    def sizeHint(self) -> QSize:
        return QSize(480, self.heightForWidth(480))

    def minimumSizeHint(self) -> QSize:
        return QSize(60, self._height or 2 * MARGIN)

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt override
        self._relayout()
        super().resizeEvent(event)

    # --- painting and events -----------------------------------------------------------------
    def paintEvent(self, event) -> None:  # noqa: N802
        self._relayout()
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        clip = event.rect()
        label_fm = QFontMetrics(self.label_font)
        for i in self._rects.between(clip.top(), clip.bottom()):
            if i >= len(self.chips):
                break
            chip, rect = self.chips[i], self._rects[i]
            if not rect.intersects(clip):
                continue
            selected = self.interactive and i == self.selected
            painter.setPen(QPen(SELECTED, 2.2) if selected else QPen(QColor(chip.colour).darker(125), 1))
            painter.setBrush(QColor(chip.colour))
            painter.drawRoundedRect(rect.adjusted(1, 1, -1, -1), 4, 4)
            top = rect.top()
            if self.bands:
                band = self.band_colour(i)
                if band is not None:
                    painter.fillRect(QRect(rect.left() + 2, rect.top() + 2, rect.width() - 4, BAND_H), QColor(band))
                top += BAND_H
            text_rect = QRect(rect.left(), top + PAD_Y, rect.width(), label_fm.height())
            painter.setFont(self.partial_font if chip.partial else self.label_font)
            painter.setPen(PARTIAL_TEXT if chip.partial else QColor("#111827"))
            painter.drawText(text_rect, Qt.AlignmentFlag.AlignCenter, self._elide(chip.label))
            id_rect = QRect(rect.left(), text_rect.bottom() + 1, rect.width(), rect.bottom() - text_rect.bottom() - 1)
            painter.setFont(self.id_font)
            painter.setPen(SELECTED if selected else ID_COLOUR)
            painter.drawText(id_rect, Qt.AlignmentFlag.AlignHCenter | Qt.AlignmentFlag.AlignTop, str(chip.token_id))
        painter.end()

    def event(self, event: QEvent) -> bool:
        if event.type() == QEvent.Type.ToolTip:
            assert isinstance(event, QHelpEvent)
            i = self.chip_at(event.pos())
            if i is None:
                QToolTip.hideText()
                event.ignore()
            else:
                QToolTip.showText(event.globalPos(), self.chips[i].tooltip, self, self._rects[i])
            return True
        return super().event(event)

    def mousePressEvent(self, event: QMouseEvent) -> None:  # noqa: N802
        i = self.chip_at(event.position().toPoint())
        if i is not None and self.interactive and event.button() == Qt.MouseButton.LeftButton:
            self.token_clicked.emit(i)
            event.accept()
            return
        super().mousePressEvent(event)
