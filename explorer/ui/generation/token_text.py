"""The streaming text of the generation pane: the prompt in grey, then one coloured span per token.

A reply to a conversation shows its reasoning apart (``mark_kinds``): thinking tokens in italic orange,
the template's markup (``</think>``, Harmony's channel headers) in grey, the answer as it is.

A generated token's background is the model's own probability of it (before the sampling controls,
which make every greedy token p = 1), on a log scale (``prob_colour``); hovering shows a tooltip, clicking (not dragging) emits the step's index.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from PySide6.QtCore import QEvent, QPoint, QRect, Qt, Signal
from PySide6.QtGui import QColor, QFontDatabase, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import QPlainTextEdit, QToolTip, QWidget

from explorer.core.display.tokens import visible
from explorer.core.generation.candidates import describe_params

PROMPT_GREY = "#6b7280"
SELECTED_BG, SELECTED_FG = "#1d4ed8", "#ffffff"
# token background: probability of the chosen token, on a log scale from 0.001 (surprising) to 1
_STOPS = ((0.0, (244, 165, 130)), (0.5, (253, 233, 184)), (1.0, (188, 215, 238)))


def _interpolated(t: float) -> tuple[int, int, int]:
    for (t0, c0), (t1, c1) in zip(_STOPS, _STOPS[1:]):
        if t <= t1:
            f = (t - t0) / (t1 - t0)
            return tuple(round(a + f * (b - a)) for a, b in zip(c0, c1))  # type: ignore[return-value]
    return _STOPS[-1][1]


_COLOURS = [_interpolated(i / 255) for i in range(256)]
THINKING_TEXT, MARKUP_TEXT = "#a94400", "#868e96"  # a reply's reasoning, and the template's markup in it
REASONING = ("thinking", "analysis", "commentary")


def prob_colour(p: float) -> QColor:
    """Background of a generated token: salmon (p <= 0.001) through cream to light blue (p = 1)."""
    t = (math.log10(max(float(p), 1e-12)) + 3.0) / 3.0
    return QColor(*_COLOURS[round(255 * min(max(t, 0.0), 1.0))])



def legend_html(short: bool = False) -> str:
    """The colour key shown under the text (``short``: beside a button, in less room)."""
    cells = "".join(f'<span style="background:{prob_colour(p).name()}">&nbsp;{label}&nbsp;</span>'
                    for p, label in ((0.001, "0.001"), (0.01, "0.01"), (0.1, "0.1"), (1.0, "1")))
    words = "colour = p:" if short else "token colour = the model\u2019s probability of it:"
    return f'<span style="color:{PROMPT_GREY}">{words}</span> {cells}'


class TokenText(QPlainTextEdit):
    """Read-only text: the prompt in grey, then one coloured span per generated token.

    Signals: token_clicked(int) with the step index of the span under a click (not a drag).
    """

    token_clicked = Signal(int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setReadOnly(True)
        self.setUndoRedoEnabled(False)
        font = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
        font.setPointSizeF(max(font.pointSizeF(), 10.0))
        self.setFont(font)
        self.viewport().setMouseTracking(True)
        self.spans: list[tuple[int, int]] = []  # (start, end) document positions per step
        self.formats: list[QTextCharFormat] = []
        self.selected: int | None = None
        self._marks: list[str] = []  # each step's look: "thinking", "markup" or "" (mark_kinds)
        self.tooltip_for: Any = None  # step index -> tooltip text
        self._press: QPoint | None = None
        self._prompt_format = QTextCharFormat()
        self._prompt_format.setForeground(QColor(PROMPT_GREY))

    @property
    def n_tokens(self) -> int:
        return len(self.spans)

    def start(self, prompt_text: str) -> None:
        self.clear()
        self.spans, self.formats, self.selected, self._marks = [], [], None, []
        cursor = QTextCursor(self.document())
        cursor.insertText(prompt_text, self._prompt_format)
        self._follow = True  # a long prompt: the first new tokens are shown, not the prompt's top

    def append_tokens(self, tokens: Sequence[tuple[int, str, float]]) -> None:
        """Append ``(step index, text, probability)`` spans in one edit (one layout, one repaint)."""
        scroll = self.verticalScrollBar()
        at_end = scroll.value() >= scroll.maximum() - 2 or getattr(self, "_follow", False)
        self._follow = False  # from now on it follows while the user has not scrolled up
        cursor = QTextCursor(self.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        cursor.beginEditBlock()
        for index, text, prob in tokens:
            fmt = QTextCharFormat()
            fmt.setBackground(prob_colour(prob))
            fmt.setAnchor(True)
            fmt.setAnchorHref(str(index))
            start = cursor.position()
            if text:
                cursor.insertText(text, fmt)
            self.spans.append((start, cursor.position()))
            self.formats.append(fmt)
        cursor.endEditBlock()
        if at_end:
            scroll.setValue(scroll.maximum())

    def mark_kinds(self, kinds: Sequence[str]) -> None:
        """Show each generated token's kind (``core.chat.assistant.reply_kinds``): the reasoning in italic
        orange, markup in grey, the answer as it is; tokens already marked so are not touched again."""
        marks = self._marks
        for index, kind in enumerate(kinds[: len(self.spans)]):
            look = "thinking" if kind in REASONING else "markup" if kind == "markup" else ""
            if (marks[index] if index < len(marks) else "") == look:
                continue  # (a new token of the answer: as it was drawn)
            fmt = self.formats[index]
            fmt.setFontItalic(look == "thinking")
            fmt.setForeground(QColor(THINKING_TEXT if look == "thinking" else MARKUP_TEXT if look else "#111827"))
            start, end = self.spans[index]
            if end > start:
                cursor = QTextCursor(self.document())
                cursor.setPosition(start)
                cursor.setPosition(end, QTextCursor.MoveMode.KeepAnchor)
                cursor.setCharFormat(self._format_of(index))
        self._marks = [("thinking" if k in REASONING else "markup" if k == "markup" else "")
                       for k in kinds[: len(self.spans)]]

    def kind_of(self, index: int) -> str:
        """How step ``index`` is shown: "thinking", "markup" or "" (the answer, or not a conversation)."""
        marks = self._marks
        return marks[index] if index < len(marks) else ""

    def extend_last(self, text: str) -> None:
        """Characters completed after the last step (held-back bytes): part of the last span."""
        if not text or not self.spans:
            return
        cursor = QTextCursor(self.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        cursor.insertText(text, self._format_of(len(self.spans) - 1))
        start, _ = self.spans[-1]
        self.spans[-1] = (start, cursor.position())

    def _format_of(self, index: int) -> QTextCharFormat:
        fmt = QTextCharFormat(self.formats[index])
        if index == self.selected:
            fmt.setBackground(QColor(SELECTED_BG))
            fmt.setForeground(QColor(SELECTED_FG))
        return fmt

    def set_selected(self, index: int | None) -> None:
        old, self.selected = self.selected, index
        for i in (old, index):
            if i is not None and 0 <= i < len(self.spans) and self.spans[i][0] < self.spans[i][1]:
                cursor = QTextCursor(self.document())
                cursor.setPosition(self.spans[i][0])
                cursor.setPosition(self.spans[i][1], QTextCursor.MoveMode.KeepAnchor)
                cursor.setCharFormat(self._format_of(i))

    def token_at(self, pos: QPoint) -> int | None:
        href = self.anchorAt(pos)
        return int(href) if href.isdigit() and int(href) < len(self.spans) else None

    def token_rect(self, index: int) -> QRect | None:
        """Viewport rectangle of the first character of step ``index``'s text (None: no text)."""
        start, end = self.spans[index]
        if start == end:
            return None
        cursor = QTextCursor(self.document())
        cursor.setPosition(start)
        left = self.cursorRect(cursor)
        cursor.setPosition(start + 1)
        right = self.cursorRect(cursor)
        if right.top() != left.top():  # the first character ends a line: take its height only
            right = QRect(left.right() + 6, left.top(), 1, left.height())
        return QRect(left.left(), left.top(), max(1, right.left() - left.left()), left.height())

    def viewportEvent(self, event: QEvent) -> bool:  # noqa: N802 - Qt override
        if event.type() == QEvent.Type.ToolTip:
            index = self.token_at(event.pos())
            if index is not None and self.tooltip_for is not None:
                QToolTip.showText(event.globalPos(), self.tooltip_for(index), self.viewport())
            else:
                QToolTip.hideText()
                event.ignore()
            return True
        return super().viewportEvent(event)

    def mousePressEvent(self, event: Any) -> None:  # noqa: N802
        self._press = event.position().toPoint()
        super().mousePressEvent(event)

    def mouseMoveEvent(self, event: Any) -> None:  # noqa: N802
        super().mouseMoveEvent(event)
        over = self.token_at(event.position().toPoint()) is not None
        self.viewport().setCursor(Qt.CursorShape.PointingHandCursor if over else Qt.CursorShape.IBeamCursor)

    def mouseReleaseEvent(self, event: Any) -> None:  # noqa: N802
        super().mouseReleaseEvent(event)
        pos, press, self._press = event.position().toPoint(), self._press, None
        if (event.button() == Qt.MouseButton.LeftButton and press is not None
                and (pos - press).manhattanLength() < 4):
            index = self.token_at(pos)
            if index is not None:
                self.token_clicked.emit(index)


def _html(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def step_tooltip(step: Any) -> str:
    """A generated token's tooltip: the step, its probability and rank under the controls it was
    drawn with, the model's own (``step``: an ``explorer.core.generation.generate.Step``)."""
    raw = step.before
    own = (f"rank {raw.chosen_rank + 1}, p {raw.chosen_prob:.3g}" if raw.chosen_rank is not None
           else f"p {raw.chosen_prob:.3g}")
    return (f"<b>step {step.index}</b>: “{_html(visible(step.text))}” (id {step.token_id})<br>"
            f"p {step.prob:.3g}, rank {step.rank + 1} under the controls it was drawn with "
            f"({_html(describe_params(step.params))})<br>model's own: {own}<br>"
            "<i>click: show its candidates, and every panel at this token</i>")
