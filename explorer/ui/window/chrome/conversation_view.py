"""What the template made of the conversation: its rendered text ("Formatted") or its tokens ("Tokens", raw).

"Formatted" is the text the model reads, each part tinted by its turn's role or kind (the template's
markup in grey, the thinking in orange), with the role named in the margin of each turn. "Tokens" is
the same text as the model's tokens, one chip per token with its id and its role bar (``TokenChips`` and
the shared ``role_bands``); clicking a chip selects that token in every panel.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QFrame, QScrollArea, QStackedWidget, QTextBrowser, QWidget

from explorer.core.tokenize.display import tokenizer_chips
from explorer.ui.widgets.role_bands import label_and_colour, token_bands
from explorer.ui.widgets.token_chips import TokenChips

if TYPE_CHECKING:
    from explorer.core.chat.encode import ChatEncoding

FORMATTED, RAW = "formatted", "raw"


def tint(colour: str, strength: float = 0.22) -> str:
    """``colour`` mixed with white: a background light enough for black text."""
    c = QColor(colour)
    mix = [round(strength * v + (1 - strength) * 255) for v in (c.red(), c.green(), c.blue())]
    return "#{:02x}{:02x}{:02x}".format(*mix)


def formatted_html(encoding: ChatEncoding) -> str:
    """The rendered text as HTML: each run of one turn and kind tinted by its colour, markup in grey."""
    text, offsets, spans = encoding.text, encoding.offsets, encoding.spans
    parts, turn = [], None
    segments = spans.segments()
    starts = [min(offsets[s.start][0], len(text)) if s.start < len(offsets) else len(text) for s in segments]
    for index, segment in enumerate(segments):
        a = 0 if index == 0 else starts[index]  # every character, each with the token that starts at or before it
        b = starts[index + 1] if index + 1 < len(segments) else len(text)
        piece = html.escape(text[a:b]).replace("\n", "\u21b5<br>")
        colour = label_and_colour(segment.role, segment.kind)[1]
        if segment.turn != turn and segment.turn >= 0 and segment.role:
            turn = segment.turn
            role_colour = label_and_colour(segment.role, "content")[1]
            parts.append(f"<span style='color:{role_colour}; font-weight:bold; font-family:sans-serif'>"
                         f"[{html.escape(segment.role)}]</span>&nbsp;")
        if segment.kind == "markup":
            parts.append(f"<span style='color:#868e96'>{piece}</span>")
        else:
            parts.append(f"<span style='background:{tint(colour)}'>{piece}</span>")
    return "<div style='white-space:pre-wrap'>" + "".join(parts) + "</div>"


class ConversationView(QStackedWidget):
    """The rendered conversation, formatted or raw (see the module docstring).

    Signals: ``token_clicked(int)``: a raw token's position."""

    token_clicked = Signal(int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.text = QTextBrowser(self)
        self.text.setObjectName("conversation-formatted")
        self.text.setOpenLinks(False)
        self.text.setPlaceholderText("The template's text appears here.")
        self.chips = TokenChips()
        self.chips.setObjectName("conversation-tokens")
        self.chips.token_clicked.connect(self.token_clicked)
        self.scroll = QScrollArea(self)
        self.scroll.setWidget(self.chips)
        self.scroll.setWidgetResizable(True)
        self.scroll.setFrameShape(QFrame.Shape.StyledPanel)
        self.addWidget(self.text)
        self.addWidget(self.scroll)
        self.encoding: ChatEncoding | None = None
        self.mode = FORMATTED

    def set_mode(self, mode: str) -> None:
        self.mode = mode
        self.setCurrentWidget(self.text if mode == FORMATTED else self.scroll)

    def show_encoding(self, encoding: ChatEncoding | None, tokenizer: Any) -> None:
        """Show ``encoding`` (None: clear)."""
        self.encoding = encoding
        if encoding is None:
            self.text.clear()
            self.chips.set_bands(())
            self.chips.set_chips([], interactive=False)
            return
        self.text.setHtml(formatted_html(encoding))
        self.chips.set_bands(token_bands(encoding.spans))
        self.chips.set_chips(tokenizer_chips(tokenizer, list(encoding.ids)) if tokenizer is not None else [],
                             interactive=True)

    def set_selected(self, position: int | None) -> None:
        self.chips.set_selected(position)
