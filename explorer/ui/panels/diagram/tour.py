"""The tour window: "Follow this token through the model", one step at a time (Back / Next), each step's
plain sentences, its numbers from this model and prompt, and a button to the panel it points to.

The steps come from ``explorer.core.diagram.tour.tour_steps`` (pure), computed by the diagram panel in the
background (``DiagramPanel.open_tour``: the panel's lane, never the GUI thread); this window says
"computing…" until they come (``wait``), then only shows them (``show_steps``) and asks the Session to show
a step's panel with its layer, head and token selected.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt
from PySide6.QtGui import QFontDatabase
from PySide6.QtWidgets import QDialog, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from explorer.core.diagram.tour import TourStep
from explorer.core.display.tokens import quoted
from explorer.ui.panels.registry import find
from explorer.ui.session.question import Question

if TYPE_CHECKING:
    from explorer.ui.session.session import Session



def link_title(panel_id: str) -> str:
    """How the "Show in …" button names the panel a step points to (its registry record)."""
    record = find(panel_id)
    return record.link_title if record is not None else panel_id


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
        self.why = QPushButton("Why this score?")  # the score step: its split in the QK/OV panel
        self.why.setToolTip("Split this score into the parts of the query's and the key's residual streams")
        self.why.setVisible(False)
        self.why.clicked.connect(self.ask_why)
        self.back.clicked.connect(lambda: self.go(self.index - 1))
        self.next.clicked.connect(lambda: self.go(self.index + 1))
        self.open_panel.clicked.connect(self.show_panel)
        buttons = QHBoxLayout()
        buttons.addWidget(self.back)
        buttons.addWidget(self.counter, 1, Qt.AlignmentFlag.AlignCenter)
        buttons.addWidget(self.why)
        buttons.addWidget(self.open_panel)
        buttons.addWidget(self.next)
        layout = QVBoxLayout(self)
        layout.addWidget(self.heading)
        layout.addWidget(self.text)
        layout.addWidget(self.numbers, 1, Qt.AlignmentFlag.AlignTop)
        layout.addLayout(buttons)

    def wait(self, token: int, token_text: str) -> None:
        """The steps for ``token`` are being computed: say so, with no step and no button to press."""
        self.steps, self.index = [], 0
        self.heading.setText(f"<h3>Following token #{token} {html.escape(quoted(token_text), quote=False)}</h3>")
        self.text.setText("computing\u2026")
        self.numbers.setText("")
        self.counter.setText("")
        for button in (self.back, self.next, self.open_panel):
            button.setEnabled(False)
        self.open_panel.setText("Show in …")
        self.why.setVisible(False)

    @property
    def waiting(self) -> bool:
        return not self.steps

    def show_steps(self, steps: list[TourStep], token_text: str, session: Session | None = None) -> None:
        """Show ``steps`` (``tour_steps``' result for the token whose text is ``token_text``) from the first."""
        self.session = session
        self.steps = list(steps)
        self.token_text = token_text
        self.open_panel.setEnabled(True)
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
        self.open_panel.setText(f"Show in {link_title(step.panel)}")
        self.why.setVisible(step.name == "score" and "j" in step.values and self.session is not None)

    def show_panel(self) -> None:
        """Select the step's layer, head and token and show its panel (through the Session)."""
        step = self.step
        if self.session is not None:
            self.session.show_panel(step.panel, step.layer, step.head, step.token)

    def ask_why(self) -> None:
        """The score step's score split into its terms: the QK/OV panel answers (``Session.ask``)."""
        step = self.step
        if self.session is not None and step.name == "score":
            self.session.ask(Question("qk", step.layer, step.head, step.token, int(step.values["j"])))
