"""The tour window: "Follow this token through the model", one step at a time (Back / Next), each step's
plain sentences, its numbers from this model and prompt, and a button to the panel it points to.

The steps come from ``explorer.core.diagram.tour.tour_steps`` (pure); this window only shows them and
asks the Session to show a step's panel with its layer, head and token selected.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import Qt
from PySide6.QtGui import QFontDatabase
from PySide6.QtWidgets import QDialog, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from explorer.core.diagram.tour import TourStep, tour_steps
from explorer.core.display.tokens import quoted
from explorer.core.trace import Trace

if TYPE_CHECKING:
    from explorer.ui.session.session import Session

PANEL_NAMES = {"TokenizationPanel": "Tokenization", "EmbeddingsPanel": "Embeddings & positions",
               "AttentionPanel": "Attention", "NeuronsPanel": "FFN neurons", "ResidualPanel": "Residual stream",
               "MaskedTokensPanel": "Masked tokens", "GenerationPane": "Generation"}


class TourDialog(QDialog):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Follow this token through the model")
        self.setModal(False)
        self.resize(620, 460)
        self.steps: list[TourStep] = []
        self.index = 0
        self.session: Session | None = None
        self.heading = QLabel()
        self.heading.setTextFormat(Qt.TextFormat.RichText)
        self.text = QLabel()
        self.text.setWordWrap(True)
        self.numbers = QLabel()
        self.numbers.setTextFormat(Qt.TextFormat.RichText)
        self.numbers.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.numbers.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.numbers.setWordWrap(True)
        self.counter = QLabel()
        self.back = QPushButton("◀ Back")
        self.next = QPushButton("Next ▶")
        self.open_panel = QPushButton()
        self.back.clicked.connect(lambda: self.go(self.index - 1))
        self.next.clicked.connect(lambda: self.go(self.index + 1))
        self.open_panel.clicked.connect(self.show_panel)
        buttons = QHBoxLayout()
        buttons.addWidget(self.back)
        buttons.addWidget(self.counter, 1, Qt.AlignmentFlag.AlignCenter)
        buttons.addWidget(self.open_panel)
        buttons.addWidget(self.next)
        layout = QVBoxLayout(self)
        layout.addWidget(self.heading)
        layout.addWidget(self.text)
        layout.addWidget(self.numbers, 1, Qt.AlignmentFlag.AlignTop)
        layout.addLayout(buttons)

    def start(self, trace: Trace, token: int, layer: int, head: int, tokenizer: Any = None,
              session: Session | None = None) -> None:
        """Build the steps for ``token`` of ``trace`` (attention at ``layer``, ``head``) and show the first."""
        self.session = session
        self.steps = tour_steps(trace, token, layer, head, tokenizer)
        self.token_text = trace.tokens[self.steps[0].token]
        self.go(0)

    @property
    def step(self) -> TourStep:
        return self.steps[self.index]

    def go(self, index: int) -> None:
        if not self.steps:
            return
        self.index = min(max(index, 0), len(self.steps) - 1)
        step = self.step
        self.heading.setText(f"<h3>{html.escape(step.title)}</h3>"
                             f"<span style='color:#475569'>token #{step.token} "
                             f"{html.escape(quoted(self.token_text), quote=False)}"
                             + (f", block {step.layer}" if step.layer is not None else "")
                             + (f", head {step.head}" if step.head is not None else "") + "</span>")
        self.text.setText(step.text)
        self.numbers.setText("<br>".join(html.escape(line, quote=False) for line in step.lines) or "—")
        self.counter.setText(f"step {self.index + 1} of {len(self.steps)}")
        self.back.setEnabled(self.index > 0)
        self.next.setEnabled(self.index < len(self.steps) - 1)
        self.open_panel.setText(f"Show in {PANEL_NAMES.get(step.panel, step.panel)}")

    def show_panel(self) -> None:
        """Select the step's layer, head and token and show its panel (through the Session)."""
        step = self.step
        if self.session is not None:
            self.session.show_panel(step.panel, step.layer, step.head, step.token)
