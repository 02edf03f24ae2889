"""The prompt area: the raw prompt, or the conversation editor in its place ("Conversation ▸" / "◂ Raw prompt").

The raw prompt is the text as typed; the conversation is written out by the model's chat template
(``conversation_editor``). Either is what the window traces: switching to the conversation renders and
traces its turns; typing in the raw prompt traces that text. The selection jumps turn by turn through a
conversation's trace (Alt+PgUp / Alt+PgDown, or the editor's ◀ ▶), and a token clicked in the rendered view
selects it in every panel.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import QPushButton, QSizePolicy, QStackedWidget, QWidget

from explorer.ui.session.chat import jump_turn
from explorer.ui.window.chrome.conversation_editor import ConversationEditor
from explorer.ui.window.chrome.prompt_editor import PromptEditor

if TYPE_CHECKING:
    from explorer.core.chat.encode import ChatEncoding
    from explorer.ui.session.session import Session

PREVIOUS_TURN_KEY, NEXT_TURN_KEY = "Alt+PgUp", "Alt+PgDown"  # (Alt+Up/Down step the layer)
EDITOR_HEIGHT = 214  # the conversation page: its two rows of controls and about five lines of turns


class PromptArea(QStackedWidget):
    """The raw prompt or the conversation editor (see the module docstring)."""

    def __init__(self, prompt: PromptEditor, session: Session, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.prompt, self.session = prompt, session
        self.editor = ConversationEditor(session.conversation, self)
        self.editor.setObjectName("conversation-editor")
        self.editor.setMaximumHeight(EDITOR_HEIGHT)
        self.addWidget(prompt)
        self.addWidget(self.editor)
        self.chat_button = QPushButton("Conversation \u25b8", prompt)
        self.chat_button.setObjectName("conversation-button")
        self.chat_button.setToolTip("Write system, user and assistant turns instead: the model's own chat "
                                    "template turns them into its prompt")
        self.chat_button.clicked.connect(lambda: self.show_conversation(True))
        prompt.add_to_row(self.chat_button, 2)
        self.editor.raw_prompt_requested.connect(lambda: self.show_conversation(False))
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Maximum)
        self.shortcuts = []
        for key, delta, button in ((PREVIOUS_TURN_KEY, -1, self.editor.previous_turn),
                                   (NEXT_TURN_KEY, 1, self.editor.next_turn)):
            shortcut = QShortcut(QKeySequence(key), parent if parent is not None else self)
            shortcut.setContext(Qt.ShortcutContext.WindowShortcut)
            shortcut.activated.connect(lambda d=delta: jump_turn(session, d))
            self.shortcuts.append(shortcut)
            button.clicked.connect(lambda _=False, d=delta: jump_turn(session, d))
            button.setToolTip(f"Select the first token of the {'next' if delta > 0 else 'previous'} turn ({key})")
        self.editor.token_clicked.connect(session.selection.set_token)
        session.selection.changed.connect(self._on_selection)
        session.prompt_edited.connect(self._raw_prompt_chosen)
        session.conversation.template_changed.connect(self._template_changed)
        self._fit()

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt override: the page shown, not the larger of the two
        return self.currentWidget().sizeHint()

    def minimumSizeHint(self) -> QSize:  # noqa: N802 - (the hidden editor must not make the window taller)
        page = self.currentWidget()
        hint, fixed = page.minimumSizeHint(), page.minimumSize()  # a minimum set on the page wins, as in a layout
        return QSize(fixed.width() or hint.width(), fixed.height() or hint.height())

    @property
    def conversation_shown(self) -> bool:
        return self.currentWidget() is self.editor

    def show_conversation(self, on: bool) -> None:
        """Show the conversation editor (and trace the conversation) or the raw prompt."""
        self.setCurrentWidget(self.editor if on else self.prompt)
        self.session.conversation.use(on)
        self._fit()
        (self.editor.content if on else self.prompt.edit).setFocus(Qt.FocusReason.OtherFocusReason)

    def _raw_prompt_chosen(self, _text: str) -> None:
        """A raw prompt was chosen elsewhere (a sample, a patching cell's run): the raw prompt shows it."""
        if self.conversation_shown:
            self.setCurrentWidget(self.prompt)
            self.session.conversation.use(False)
            self._fit()

    def _fit(self) -> None:
        page = self.currentWidget()
        self.setMaximumHeight(page.maximumHeight())
        self.updateGeometry()

    def _template_changed(self) -> None:
        conversation = self.session.conversation
        self.chat_button.setToolTip(conversation.status() if not conversation.available else
                                    "Write system, user and assistant turns instead: the model's own chat "
                                    "template turns them into its prompt")

    def _on_selection(self, what: str) -> None:
        if what == "token":
            self.editor.view.set_selected(self.session.selection.token)


def corrupted_label(encoding: ChatEncoding) -> str:
    """How the Patching panel's field names a conversation given as its corrupted run."""
    users = [m["content"] for m in encoding.messages if m["role"] == "user"]
    last = " ".join(users[-1].split()) if users else ""
    return f"[conversation, {len(encoding.ids)} tokens] {last[:60]}"


def add_prompt_area(window) -> PromptArea:
    """The window's central widget: its prompt editor, with the conversation editor in its place on demand;
    the editor's "Use as corrupted run" hands the rendered conversation to the Patching panel."""
    area = PromptArea(window.prompt, window.session, window)
    window.setCentralWidget(area)

    def use_as_corrupted(encoding: ChatEncoding | None) -> None:
        patching = window.panel("patching")
        if encoding is None or patching is None:
            return
        patching.set_corrupted(corrupted_label(encoding), list(encoding.ids), encoding.spans)
        window.session.show_panel("patching")

    area.editor.corrupted_requested.connect(use_as_corrupted)
    return area
