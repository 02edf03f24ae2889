"""Generation as the assistant: the generation pane continuing a conversation's assistant turn.

When the window traces a conversation (``explorer.ui.session.chat.Conversation``), the pane's prompt is its
rendered text, pinned to the template's ids (unless the pane's own prompt was edited). Generating from those
ids then stops at the template's end-of-turn tokens (``core.chat.assistant.end_of_turn_ids``: ``<|im_end|>``,
``<|eot_id|>``, ``<end_of_turn>``, Harmony's ``<|return|>``, ... and the checkpoint's own), and the reply's
tokens are told apart as it streams (``reply_kinds``): a reasoning model's thinking in italic orange, the
answer as it is (``TokenText.mark_kinds``), and the same kinds go with the timeline's traces (``spans``).
"Keep as a turn" appends the reply to the conversation as an assistant turn, its reasoning under
``thinking`` (``with_reply``), which the conversation then renders and traces again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QHBoxLayout, QLabel, QSizePolicy, QToolButton

from explorer.core.chat.assistant import split_reply, with_reply
from explorer.ui.generation.token_text import THINKING_TEXT, legend_html
from explorer.ui.session.chat import generated_kinds, reply_spans

if TYPE_CHECKING:
    from explorer.core.chat.encode import ChatEncoding
    from explorer.core.chat.spans import ChatSpans
    from explorer.core.generation.sampling import SamplingParams
    from explorer.ui.session.session import Session

KEEP_TIP = ("Append the reply to the conversation as an assistant turn (its reasoning under 'thinking'), "
            "and trace the conversation with it")


class AssistantTurn(QObject):
    """The pane's conversation mode (see the module docstring); ``pane`` is the GenerationPane."""

    def __init__(self, pane: Any) -> None:
        super().__init__(pane)
        self.pane = pane
        self.session: Session | None = None
        self.encoding: ChatEncoding | None = None  # the conversation the pane's prompt is
        self.end_ids: tuple[int, ...] = ()
        self.keep_button = QToolButton(pane)  # (a push button's height made the pane, and the window, taller)
        self.keep_button.setText("Keep as a turn")
        self.keep_button.setObjectName("keep-reply")
        self.keep_button.setToolTip(KEEP_TIP)
        self.keep_button.setEnabled(False)
        self.keep_button.setVisible(False)
        self.keep_button.clicked.connect(self.keep)

    def legend_row(self, legend: QLabel) -> QHBoxLayout:
        """The pane's colour key with the "Keep as a turn" button at its right."""
        row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        # one line, whatever its width: wrapped it made the pane (and the window) taller, unwrapped wider; beside
        # the button its words are shorter (update)
        legend.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.keep_button.setStyleSheet("QToolButton { padding: 0px 6px; }")  # the row as tall as the key's line
        self.keep_button.setFixedHeight(legend.fontMetrics().height() + 1)
        row.addWidget(legend, 1)
        row.addWidget(self.keep_button)
        return row

    def attach(self, session: Session) -> None:
        self.session = session
        session.conversation.encoded.connect(self._encoded)
        session.prompt_edited.connect(self._raw_prompt)

    def _raw_prompt(self, _text: str) -> None:
        """A raw prompt was typed or chosen: the pane no longer continues the conversation."""
        if not self.pane.prompt_is_own:
            self.encoding = None
            self.update()

    # --- the conversation ---------------------------------------------------------------------------
    def _encoded(self, encoding: ChatEncoding) -> None:
        """A conversation was rendered for the window: the pane continues it, unless its prompt is its own."""
        conversation = self.session.conversation if self.session is not None else None
        if conversation is None or not conversation.active or self.pane.prompt_is_own:
            return
        self.encoding = encoding
        self.end_ids = conversation.end_ids()
        self.pane.set_prompt(encoding.text, list(encoding.ids))
        self.update()

    def active_for(self, ids: Sequence[int]) -> bool:
        """Whether ``ids`` are the conversation's (Generate continues its assistant turn)."""
        return self.encoding is not None and list(ids) == list(self.encoding.ids)

    def params(self, params: SamplingParams, ids: Sequence[int]) -> SamplingParams:
        """``params``, stopping also at the end of the assistant's turn when ``ids`` are the conversation's."""
        if not self.active_for(ids) or not self.end_ids:
            return params
        return params.replace(stop_token_ids=tuple(sorted(set(params.stop_token_ids) | set(self.end_ids))))

    def kinds(self, generated: Sequence[int]) -> list[str]:
        """Each generated token's kind (thinking, content, markup, a Harmony channel)."""
        return generated_kinds(self.encoding, self.pane.loaded.tokenizer, generated)

    def spans(self, prompt_ids: Sequence[int], generated: Sequence[int]) -> ChatSpans | None:
        """The ChatSpans of the prompt and the reply so far (None: the prompt is not the conversation's)."""
        if not self.active_for(prompt_ids) or self.pane.loaded is None:
            return None
        return reply_spans(self.encoding, self.pane.loaded.tokenizer, generated)

    # --- the run --------------------------------------------------------------------------------------
    def steps_added(self) -> None:
        """Tokens arrived: mark the reply's reasoning apart from its answer."""
        if self.active_for(self.pane.prompt_ids) and self.pane.loaded is not None:
            self.pane.text_view.mark_kinds(self.kinds([s.token_id for s in self.pane.steps]))
        self.update()

    def reply(self) -> tuple[str, str] | None:
        """(thinking, answer) of the shown reply, the end-of-turn token left out; None when there is none."""
        result = self.pane.result
        if result is None or not self.active_for(self.pane.prompt_ids):
            return None
        from explorer.core.generation.generate import continuation_text

        new = [int(i) for i in result.token_ids]
        if new and new[-1] in self.end_ids:
            new = new[:-1]
        text = continuation_text(self.pane.loaded.tokenizer, list(self.encoding.ids), new)
        return split_reply(text, self.encoding.open_thinking, self.encoding.harmony)

    def keep(self) -> bool:
        """Append the reply as the conversation's next assistant turn and trace it (False: nothing to keep)."""
        parts = self.reply()
        if parts is None or self.session is None:
            return False
        thinking, answer = parts
        self.session.conversation.set_messages(with_reply(self.encoding.messages, answer, thinking))
        self.keep_button.setEnabled(False)
        return True

    def update(self) -> None:
        chat = self.encoding is not None and self.active_for(self.pane.prompt_ids or list(self.encoding.ids))
        self.keep_button.setVisible(self.encoding is not None)
        self.keep_button.setEnabled(chat and not self.pane.running and self.pane.result is not None)
        thinking = chat and any(self.pane.text_view.kind_of(i) == "thinking" for i in range(len(self.pane.steps)))
        self.pane.legend.setText(legend_html(short=self.encoding is not None)
                                 + (f" <i style='color:{THINKING_TEXT}'>italic: thinking</i>" if thinking else ""))
