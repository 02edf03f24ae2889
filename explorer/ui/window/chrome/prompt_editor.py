"""The prompt editor: monospace text, the token count and a notice when the prompt was cut."""

from __future__ import annotations

from PySide6.QtCore import QSignalBlocker, Signal
from PySide6.QtGui import QFontDatabase, QTextCursor
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPlainTextEdit, QSizePolicy, QVBoxLayout, QWidget

from explorer.core.text import capped_text
from explorer.ui.widgets.elided_label import ElidedLabel

_NOTICE_STYLE = "QLabel { background: #fff3bf; color: #5c3c00; border-radius: 3px; padding: 1px 6px; }"
_ERROR_STYLE = "QLabel { background: #ffe3e3; color: #8a1c1c; border-radius: 3px; padding: 1px 6px; }"


class NoticeLabel(ElidedLabel):
    """A notice on one line, cut with "…" at its width (the whole text in its tooltip and ``text()``):
    a wrapped notice grew taller than the row under the text box has room for and was drawn over the
    prompt's second line."""

    PADDING = 16  # the style sheets' horizontal padding and a little air

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("", parent)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)


class PromptEditor(QWidget):
    """A plain-text prompt box.

    Signals
    -------
    text_edited(str)
        The user changed the text (not emitted by ``set_text``).
    """

    text_edited = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.edit = QPlainTextEdit(self)
        self.edit.setObjectName("prompt")
        font = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
        font.setPointSizeF(max(font.pointSizeF(), 10.0) + 1)
        self.edit.setFont(font)
        self.edit.setPlaceholderText("Type a prompt; every panel follows as you type.")
        self.edit.setTabChangesFocus(True)
        line = self.edit.fontMetrics().lineSpacing()
        self.edit.setMinimumHeight(2 * line + 12)
        self.edit.setMaximumHeight(3 * line + 14)
        self.count = QLabel("", self)
        self.count.setObjectName("token-count")
        self.notice = NoticeLabel(self)
        self.notice.setObjectName("prompt-notice")
        self.notice.hide()
        row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.count)
        row.addWidget(self.notice, 1)
        self._row = row
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 4, 6, 2)
        layout.setSpacing(3)
        layout.addWidget(self.edit)
        layout.addLayout(row)
        self.edit.textChanged.connect(lambda: self.text_edited.emit(self.text()))
        # as short as the text box allows: the panels below get the height
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Maximum)
        self.setMaximumHeight(self.edit.maximumHeight() + self.count.sizeHint().height() + 16)

    def text(self) -> str:
        return self.edit.toPlainText()

    def set_text(self, text: str) -> None:
        """Replace the text without emitting ``text_edited`` (the caller runs it itself).

        The replacement is one step of the editor's undo history (``setPlainText`` would clear it),
        so Ctrl+Z brings back what was there before a sample prompt, a model change or a click on a
        generated token. Text past ``PROMPT_LIMIT`` characters, or with a line past ``LINE_LIMIT``, is cut with
        a note (laying out such a line froze the window)."""
        text = capped_text(text, "prompt")
        if text == self.text():
            return
        with QSignalBlocker(self.edit):
            cursor = QTextCursor(self.edit.document())
            cursor.beginEditBlock()
            cursor.select(QTextCursor.SelectionType.Document)
            cursor.insertText(text)
            cursor.endEditBlock()
            self.edit.setTextCursor(cursor)  # the caret at the end of the new text

    def show_tokens(self, n_tokens: int, truncated_from: int | None = None) -> None:
        """The token count of the analysed prompt and, if it was cut to the context, a notice."""
        self.count.setText(f"<b>{n_tokens}</b> token{'s' if n_tokens != 1 else ''}")
        if truncated_from:
            self._notice(f"showing the first {n_tokens} of {truncated_from} tokens: the rest does not "
                         "fit the model's context", _NOTICE_STYLE)
        else:
            self.notice.hide()

    def add_to_row(self, widget: QWidget, index: int, stretch: int = 0) -> None:
        """Put ``widget`` in the row under the text box (the token count, then the notice)."""
        self._row.insertWidget(index, widget, stretch)

    def show_notice(self, message: str) -> None:
        self._notice(message, _NOTICE_STYLE)

    def set_read_only(self, read_only: bool) -> None:
        """A trace opened from a file cannot be traced again: its prompt is read-only until a model loads."""
        self.edit.setReadOnly(read_only)
        if not read_only:
            self.notice.hide()

    def show_error(self, message: str) -> None:
        self._notice(message, _ERROR_STYLE)

    def _notice(self, text: str, style: str) -> None:
        self.notice.setText(text)
        self.notice.setStyleSheet(style)
        self.notice.show()
