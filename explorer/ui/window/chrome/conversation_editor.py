"""The conversation editor: system / user / assistant turns traced through the model's own chat template.

Beside the raw prompt (``prompt_area``): on the left the turns, one line each in its role's colour (added
with "+ System" / "+ User" / "+ Assistant", moved with ▲ ▼, removed with ✕); in the middle the selected
turn (its role and text, and an assistant turn's reasoning); on the right what the template made of it,
"Formatted" or "Tokens" (raw) (``conversation_view``). Above them, the template's options as controls
(``add_generation_prompt``, and what the template reads: ``enable_thinking`` and the like), and a line
saying where the template comes from, or that the model has none (the raw prompt still works).

Every edit goes to the Session's ``Conversation`` (``explorer.ui.session.chat``), which renders it on a
worker and traces it; the editor shows each rendering it gets back.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QSignalBlocker, Qt, Signal
from PySide6.QtGui import QColor, QIcon, QPixmap
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPlainTextEdit,
    QPushButton,
    QSizePolicy,
    QSplitter,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from explorer.core.chat.messages import ROLES
from explorer.ui.widgets.elided_label import ElidedLabel
from explorer.ui.widgets.role_bands import ROLE_COLOURS
from explorer.ui.window.chrome.conversation_view import FORMATTED, RAW, ConversationView

if TYPE_CHECKING:
    from explorer.core.chat.encode import ChatEncoding
    from explorer.ui.session.chat import Conversation

PREVIEW_CHARS = 60
MIN_WIDTH = 420
MIN_ROWS_PX = 26  # the turns, the selected turn's text and the rendered view at their smallest
BOOLEAN_OPTIONS = ("enable_thinking", "thinking", "add_vision_id", "continue_final_message", "preserve_thinking",
                   "truncate_history_thinking")
_ERROR = "QLabel { color: #8a1c1c; }"


def swatch(colour: str) -> QIcon:
    pixmap = QPixmap(10, 10)
    pixmap.fill(QColor(colour))
    return QIcon(pixmap)


def preview(message: dict[str, str]) -> str:
    text = " ".join(message.get("content", "").split()) or "(empty)"
    thinking = " [+ reasoning]" if message.get("thinking") else ""
    return f"{message['role']}: {text[:PREVIEW_CHARS]}{'…' if len(text) > PREVIEW_CHARS else ''}{thinking}"


def option_value(text: str) -> Any:
    """A typed option: JSON (true, 3, "x", [..]) where it parses, else the text itself; "" is the default."""
    text = text.strip()
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


class ConversationEditor(QWidget):
    """The turns, the template's options and the rendered view (see the module docstring).

    Signals: ``raw_prompt_requested()``: the user asked for the raw prompt; ``token_clicked(int)``: a
    token of the rendered view was clicked; ``corrupted_requested(ChatEncoding)``: this rendering is to be the
    Patching panel's corrupted run (patch it against the clean conversation, of the same length)."""

    raw_prompt_requested = Signal()
    token_clicked = Signal(int)
    corrupted_requested = Signal(object)  # the ChatEncoding shown: the Patching panel's corrupted run

    def __init__(self, conversation: Conversation, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.conversation = conversation
        self._loading = False
        self.option_widgets: dict[str, QWidget] = {}
        self._build()
        conversation.template_changed.connect(self._template_changed)
        conversation.changed.connect(self.load)
        conversation.encoded.connect(self.show_encoding)
        conversation.failed.connect(self._failed)
        self.load()
        self._template_changed()

    # --- building ---------------------------------------------------------------------------------
    def _build(self) -> None:
        self.raw_button = QPushButton("\u25c2 Raw prompt", self)
        self.raw_button.setToolTip("Type a raw prompt instead: the text as it is, without the chat template")
        self.raw_button.clicked.connect(self.raw_prompt_requested)
        self.add_buttons: dict[str, QToolButton] = {}
        top = QHBoxLayout()
        top.setSpacing(4)
        top.addWidget(self.raw_button)
        for role in ("system", "user", "assistant"):
            button = self._tool(f"+ {role.capitalize()}", f"Add a {role} turn after the selected one")
            button.clicked.connect(lambda _=False, r=role: self.add_turn(r))
            self.add_buttons[role] = button
            top.addWidget(button)
        self.up_button, self.down_button, self.remove_button = (self._tool(t, tip) for t, tip in (
            ("\u25b2", "Move the selected turn up"), ("\u25bc", "Move the selected turn down"),
            ("\u2715", "Remove the selected turn")))
        self.up_button.clicked.connect(lambda: self.move_turn(-1))
        self.down_button.clicked.connect(lambda: self.move_turn(1))
        self.remove_button.clicked.connect(self.remove_turn)
        for button in (self.up_button, self.down_button, self.remove_button):
            top.addWidget(button)
        top.addSpacing(8)
        self.turn_label = QLabel("Turn", self)
        self.previous_turn, self.next_turn = self._tool("\u25c0", ""), self._tool("\u25b6", "")
        self.view_buttons: dict[str, QToolButton] = {}
        for mode, text, tip in ((FORMATTED, "Formatted", "The text the template wrote, tinted by role"),
                                (RAW, "Tokens", "The model's tokens of that text, with their ids (raw)")):
            button = self._tool(text, tip)
            button.setCheckable(True)
            button.clicked.connect(lambda _=False, m=mode: self.set_view(m))
            self.view_buttons[mode] = button
            top.addWidget(button)
        self.count = QLabel("", self)
        self.count.setObjectName("conversation-count")
        top.addWidget(self.count)
        top.addStretch(1)

        self.status = ElidedLabel("", self, min_width=80)
        self.status.setObjectName("conversation-status")
        self.generation_prompt = QCheckBox("add_generation_prompt", self)
        self.generation_prompt.setChecked(True)
        self.generation_prompt.setToolTip("Open the assistant's turn after the last message (what Generate "
                                          "continues); off: the conversation as it is")
        self.generation_prompt.toggled.connect(lambda on: self.conversation.set_option("add_generation_prompt", on))
        self.options_row = QHBoxLayout()
        self.options_row.setSpacing(6)
        self.options_row.addWidget(self.generation_prompt)
        self._fixed_options = self.options_row.count()
        self.options_row.addWidget(self.status, 1)
        for widget in (self.turn_label, self.previous_turn, self.next_turn):
            self.options_row.addWidget(widget)
        self.corrupted_button = QPushButton("Use as corrupted run", self)
        self.corrupted_button.setObjectName("conversation-corrupted")
        self.corrupted_button.setToolTip("Activation patching between two conversations: make this one the Patching "
                                         "panel's corrupted run, then edit the turns back to the clean conversation "
                                         "(it must render to the same number of tokens)")
        self.corrupted_button.setEnabled(False)
        self.corrupted_button.clicked.connect(lambda: self.corrupted_requested.emit(self.conversation.encoding))
        self.options_row.addWidget(self.corrupted_button)

        self.turns = QListWidget(self)
        self.turns.setObjectName("conversation-turns")
        self.turns.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.turns.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.turns.setUniformItemSizes(True)
        self.turns.currentRowChanged.connect(self._select)
        self.role = QComboBox(self)
        self.role.addItems(list(ROLES))
        self.role.setToolTip("Who says this turn")
        self.role.currentTextChanged.connect(self._edited)
        self.content = QPlainTextEdit(self)
        self.content.setObjectName("conversation-content")
        self.content.setPlaceholderText("What this turn says")
        self.content.setTabChangesFocus(True)
        self.content.textChanged.connect(self._edited)
        self.thinking = QPlainTextEdit(self)
        self.thinking.setObjectName("conversation-thinking")
        self.thinking.setPlaceholderText("The assistant's reasoning (optional; the template decides whether it is shown)")
        self.thinking.setTabChangesFocus(True)
        self.thinking.setMaximumHeight(44)
        self.thinking.textChanged.connect(self._edited)
        turn = QWidget(self)
        column = QVBoxLayout(turn)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(2)
        column.addWidget(self.role)
        column.addWidget(self.content, 1)
        column.addWidget(self.thinking)
        self.view = ConversationView(self)
        self.view.token_clicked.connect(self.token_clicked)
        self.splitter = QSplitter(Qt.Orientation.Horizontal, self)
        for widget in (self.turns, turn, self.view):
            self.splitter.addWidget(widget)
        self.splitter.setChildrenCollapsible(False)
        for widget in (self.turns, self.content, self.view):  # a laptop screen: the panels below keep their height
            widget.setMinimumHeight(MIN_ROWS_PX)
        self.thinking.setMinimumHeight(MIN_ROWS_PX // 2)
        self.splitter.setSizes([260, 250, 300])

        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 2, 6, 1)
        layout.setSpacing(1)
        layout.addLayout(top)
        layout.addLayout(self.options_row)
        layout.addWidget(self.splitter, 1)
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Maximum)
        self.setMinimumWidth(MIN_WIDTH)  # (its rows' own width would widen the window: they are clipped instead)
        self.set_view(FORMATTED)

    def _tool(self, text: str, tip: str) -> QToolButton:
        button = QToolButton(self)
        button.setText(text)
        button.setToolTip(tip)
        return button

    # --- the turns ----------------------------------------------------------------------------------
    def messages(self) -> list[dict[str, str]]:
        return self.conversation.messages_now()

    def load(self) -> None:
        """Show the Conversation's turns (set from outside: a kept reply, a session)."""
        messages = self.conversation.messages
        row = self.turns.currentRow()
        grew = len(messages) > self.turns.count()  # a kept reply: the new turn is selected
        row = len(messages) - 1 if grew or row < 0 or row >= len(messages) else row
        with QSignalBlocker(self.turns):
            self.turns.clear()
            for message in messages:
                self.turns.addItem(self._item(message))
        self.turns.setCurrentRow(row if messages else -1)
        self._select(self.turns.currentRow())

    def _item(self, message: dict[str, str]) -> QListWidgetItem:
        item = QListWidgetItem(swatch(ROLE_COLOURS.get(message["role"], "#495057")), preview(message))
        item.setToolTip(message.get("content", ""))
        return item

    def _select(self, row: int) -> None:
        messages = self.conversation.messages
        self._loading = True
        try:
            on = 0 <= row < len(messages)
            message = messages[row] if on else {"role": "user", "content": ""}
            self.role.setCurrentText(message["role"])
            self.content.setPlainText(message.get("content", ""))
            self.thinking.setPlainText(message.get("thinking", ""))
            for widget in (self.role, self.content, self.thinking):
                widget.setEnabled(on)
            self.thinking.setVisible(message["role"] == "assistant")
        finally:
            self._loading = False
        self._update_buttons()

    def _edited(self) -> None:
        if self._loading:
            return
        row = self.turns.currentRow()
        messages = self.messages()
        if not 0 <= row < len(messages):
            return
        message = {"role": self.role.currentText(), "content": self.content.toPlainText()}
        thinking = self.thinking.toPlainText()
        if message["role"] == "assistant" and thinking:
            message["thinking"] = thinking
        self.thinking.setVisible(message["role"] == "assistant")
        messages[row] = message
        item = self.turns.item(row)
        item.setText(preview(message))
        item.setIcon(swatch(ROLE_COLOURS.get(message["role"], "#495057")))
        self.conversation.edit(messages)

    def add_turn(self, role: str, content: str = "") -> None:
        """A new ``role`` turn after the selected one (at the end when none is), selected, its text focused."""
        messages = self.messages()
        row = self.turns.currentRow() + 1 if self.turns.currentRow() >= 0 else len(messages)
        messages.insert(row, {"role": role, "content": content})
        self._replace(messages, row)
        self.content.setFocus(Qt.FocusReason.OtherFocusReason)

    def move_turn(self, delta: int) -> None:
        row, messages = self.turns.currentRow(), self.messages()
        to = row + delta
        if 0 <= row < len(messages) and 0 <= to < len(messages):
            messages[row], messages[to] = messages[to], messages[row]
            self._replace(messages, to)

    def remove_turn(self) -> None:
        row, messages = self.turns.currentRow(), self.messages()
        if 0 <= row < len(messages):
            del messages[row]
            self._replace(messages, min(row, len(messages) - 1))

    def _replace(self, messages: list[dict[str, str]], row: int) -> None:
        with QSignalBlocker(self.turns):
            self.turns.clear()
            for message in messages:
                self.turns.addItem(self._item(message))
        self.conversation.edit(messages)
        self.turns.setCurrentRow(row)
        self._select(row)

    def _update_buttons(self) -> None:
        row, n = self.turns.currentRow(), self.turns.count()
        usable = self.conversation.available
        self.up_button.setEnabled(usable and row > 0)
        self.down_button.setEnabled(usable and 0 <= row < n - 1)
        self.remove_button.setEnabled(usable and 0 <= row < n)
        for button in self.add_buttons.values():
            button.setEnabled(usable)

    # --- the template and its options ---------------------------------------------------------------
    def _template_changed(self) -> None:
        conversation = self.conversation
        self.status.setText(conversation.status())
        self.status.setStyleSheet("" if conversation.available else _ERROR)
        for name in list(self.option_widgets):
            widget = self.option_widgets.pop(name)
            self.options_row.removeWidget(widget)
            widget.deleteLater()
        at = self._fixed_options
        for name in conversation.option_names:
            widget = self._option_widget(name, conversation.options.get(name))
            self.option_widgets[name] = widget
            self.options_row.insertWidget(at, widget)
            at += 1
        for widget in (self.turns, self.role, self.content, self.thinking, self.generation_prompt):
            widget.setEnabled(conversation.available)
        with QSignalBlocker(self.generation_prompt):
            self.generation_prompt.setChecked(conversation.add_generation_prompt)
        if not conversation.available:
            self.view.show_encoding(None, None)
            self.count.setText("")
            self.corrupted_button.setEnabled(False)
        self._update_buttons()

    def _option_widget(self, name: str, value: Any) -> QWidget:
        if name in BOOLEAN_OPTIONS:
            box = QComboBox(self)
            box.addItems([f"{name}: default", f"{name}: true", f"{name}: false"])
            box.setCurrentIndex(0 if value is None else 1 if value else 2)
            box.setToolTip(f"The template's option {name} (default: what the template does without it)")
            box.currentIndexChanged.connect(lambda i, n=name: self.conversation.set_option(n, (None, True, False)[i]))
            return box
        edit = QLineEdit(self)
        edit.setPlaceholderText(f"{name}: default")
        edit.setText("" if value is None else json.dumps(value) if not isinstance(value, str) else value)
        edit.setToolTip(f"The template's option {name}: text, or JSON (true, 3, [..]); empty: the template's default")
        edit.setMaximumWidth(170)
        edit.editingFinished.connect(lambda n=name, e=edit: self.conversation.set_option(n, option_value(e.text())))
        return edit

    # --- the rendered conversation ------------------------------------------------------------------
    def set_view(self, mode: str) -> None:
        """Show the rendered conversation "formatted" (its text, tinted by role) or "raw" (its tokens)."""
        for key, button in self.view_buttons.items():
            button.setChecked(key == mode)
        self.view.set_mode(mode)

    def show_encoding(self, encoding: ChatEncoding) -> None:
        loaded = self.conversation.session.loaded
        self.view.show_encoding(encoding, loaded.tokenizer if loaded is not None else None)
        n = len(encoding.ids)
        self.count.setText(f"<b>{n}</b> token{'s' if n != 1 else ''}")
        self.status.setText(self.conversation.status())
        self.status.setStyleSheet("")
        self.corrupted_button.setEnabled(True)

    def _failed(self, message: str) -> None:
        self.status.setText(message)
        self.status.setStyleSheet(_ERROR)
