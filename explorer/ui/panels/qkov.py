"""The QK/OV panel: why a head attends from one token to another, and what it moves.

It answers the question asked last (``Session.ask``: a right-click on a cell of the Attention panel, the
tour's "Why this score?"), on the trace on screen: "Why it attends" splits the score into query part x key
part terms (``qkov_qk.py``), "What it moves" splits the head's output by source and shows its OV circuit
(``qkov_ov.py``). The answer is computed on the panel's lane (``later``; newest wins), kept with the trace,
and "computing…" is said meanwhile; a question with no exact answer shows its one line. A new prompt asks
the same question of the new trace.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QSize, Qt
from PySide6.QtWidgets import QButtonGroup, QComboBox, QHBoxLayout, QLabel, QStackedWidget, QToolButton, QWidget

from explorer.core.trace import Trace
from explorer.ui.panels.base import Panel, PanelSnapshot, PanelView
from explorer.ui.panels.qkov_answer import (
    Answer,
    OVAnswer,
    QKAnswer,
    answer_of,
    default_by,
    memo_key,
    ov_headline,
    qk_headline,
)
from explorer.ui.panels.qkov_ov import OVPage
from explorer.ui.panels.qkov_qk import QKPage
from explorer.ui.session.question import Question
from explorer.ui.session.selection import Selection
from explorer.ui.widgets.steady_label import SteadyLabel

HINT = ("Right-click a cell of the Attention panel's pattern or scores and choose \u201cWhy does it attend "
        "here?\u201d or \u201cWhat does it move?\u201d (or press \u201cWhy this score?\u201d in the tour's score "
        "step). The answer shows here, computed exactly from this prompt.")
BY = {"head": "each head", "layer": "each block's heads together"}


@dataclass(frozen=True)
class QKOVSnapshot(PanelSnapshot):
    """The question asked last and the panel's options, for ``prepare``."""

    question: Question | None = None
    by: str = "head"
    by_for: tuple | None = None   # the model shape ``by`` was chosen for (another model: its own default)
    copy: str = "embedding"


@dataclass(frozen=True)
class QKOVView(PanelView):
    """The answer to the snapshot's question on this trace (also kept with the trace); None: none asked."""

    answer: Answer | None = None
    by: str = "head"


def parts_for(trace: Trace, snapshot: QKOVSnapshot) -> str:
    shape = (trace.config.n_layers, trace.config.n_heads)
    return snapshot.by if snapshot.by_for == shape else default_by(trace)


class Pages(QStackedWidget):
    """The views, asking for no more height than their minimum: the dock's scroll area then gives the panel
    the room it has (a taller hint would make the panel taller than the dock, and scroll)."""

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt's name)
        return self.minimumSizeHint()


class QKOVPanel(Panel):
    def __init__(self, selection: Selection, parent: QWidget | None = None) -> None:
        super().__init__(selection, parent)
        self.question: Question | None = None
        self.answer: QKAnswer | OVAnswer | None = None
        self.message = ""              # the one line shown instead of an answer ("" while one is shown)
        self._waiting = False          # asked before this panel got the trace on screen: drawn when it does
        self._by_for: tuple | None = None  # the model shape the parts choice was defaulted for
        row = QHBoxLayout()
        self._kinds = QButtonGroup(self)
        self.kind_buttons: dict[str, QToolButton] = {}
        for kind, text, tip in (("qk", "Why it attends (QK)", "split the score into the parts of the query's and "
                                 "the key's residual streams"),
                                ("ov", "What it moves (OV)", "split the head's output by source position, and "
                                 "what each source would add to the logits")):
            button = QToolButton()
            button.setText(text)
            button.setToolTip(tip)
            button.setCheckable(True)
            button.setEnabled(False)
            button.clicked.connect(lambda _=False, k=kind: self.set_kind(k))
            self._kinds.addButton(button)
            self.kind_buttons[kind] = button
            row.addWidget(button)
        row.addSpacing(12)
        self.parts_label = QLabel("parts:")
        row.addWidget(self.parts_label)
        self.by_box = QComboBox()
        for key, text in BY.items():
            self.by_box.addItem(text, key)
        self.by_box.setToolTip("Each earlier head a part of its own, or each block's heads as one part (for models "
                               "with many heads)")
        self.by_box.currentIndexChanged.connect(lambda _: self._answer())
        row.addWidget(self.by_box)
        row.addStretch(1)
        self.body.addLayout(row)
        self.headline = SteadyLabel(HINT)
        self.headline.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.body.addWidget(self.headline)
        self.qk = QKPage()
        self.ov = OVPage()
        self.ov.copy.currentIndexChanged.connect(lambda _: self._answer())
        self.stack = Pages()
        self.blank = QWidget()
        for page in (self.blank, self.qk, self.ov):
            self.stack.addWidget(page)
        self.body.addWidget(self.stack, 1)
        self._show_controls()
        self.add_exportable("QK: the score's terms", self.qk.heatmap, self.qk.table_data)
        self.add_exportable("QK: the largest terms", self.qk.terms, self.qk.terms_data)
        self.add_exportable("OV: share of the output by source", self.ov.share.widget, self.ov.bars_data)
        self.add_exportable("OV: direct effect by source", self.ov.effect.widget, self.ov.bars_data)
        self.add_exportable("OV circuit on the prompt", self.ov.circuit, self.ov.circuit_data)

    # --- the panel contract ------------------------------------------------------------------------
    def attach(self, session) -> None:
        super().attach(session)
        session.asked.connect(self.ask)

    def available(self) -> bool:
        """Whether there is anything to show: a question was asked (the window hides the dock until then, so
        that its tab takes no room on the tab bar before it is needed)."""
        return self.question is not None

    def snapshot(self) -> QKOVSnapshot:
        return self._snapshot(QKOVSnapshot, question=self.question, by=self.by, by_for=self._by_for, copy=self.copy)

    def prepare(self, trace: Trace, snapshot: QKOVSnapshot) -> QKOVView:
        """On the worker: the answer to the question asked last, on the new trace (kept with it)."""
        super().prepare(trace, snapshot)
        by = parts_for(trace, snapshot)
        if snapshot.question is None:
            return QKOVView(trace, None, by)
        return QKOVView(trace, answer_of(trace, snapshot.question, by, snapshot.copy), by)

    def draw(self, view: QKOVView) -> None:
        shape = (view.trace.config.n_layers, view.trace.config.n_heads)
        if shape != self._by_for:  # another model: each head a part where that stays readable
            self._by_for = shape
            self.by_box.blockSignals(True)
            self.by_box.setCurrentIndex(self.by_box.findData(view.by))
            self.by_box.blockSignals(False)
        self._waiting = False
        self._answer()  # the view's answer is kept with the trace: found there when it answers this question

    def computing(self) -> bool:
        return self._waiting or super().computing()

    # --- questions -----------------------------------------------------------------------------------
    def ask(self, question: Question) -> None:
        """Answer ``question`` about the trace on screen (``Session.asked`` calls it)."""
        self.question = question
        on_screen = self.session.trace if self.session is not None else self.trace
        if self.trace is None or (on_screen is not None and on_screen is not self.trace):
            self._waiting = True  # this panel has not got the trace on screen yet: answered when it is drawn
            self._stop()
            self._say(f"computing {question.words()}\u2026")
            self.stack.setCurrentWidget(self.blank)
            self._show_controls()
            return
        self._answer()

    def set_kind(self, kind: str) -> None:
        """Ask the same cell the other way: "qk" (needs the cell's key) or "ov"."""
        if self.question is None or kind == self.question.kind or (kind == "qk" and self.question.key is None):
            self._show_controls()
            return
        self.ask(self.question.as_kind(kind))

    @property
    def by(self) -> str:
        return self.by_box.currentData()

    @property
    def copy(self) -> str:
        return self.ov.copy.currentData()

    def _answer(self) -> None:
        """Show the answer to the question on this trace: kept with it, else computed on the lane."""
        self._show_controls()
        if self.question is None or self.trace is None:
            self._stop()
            self._say(HINT)
            self.stack.setCurrentWidget(self.blank)
            return
        trace, question, by, copy = self.trace, self.question, self.by, self.copy
        got = trace.memo_get(memo_key(question, by, copy))
        if got is not None:
            self._stop()  # an older question still computing must not land over this one
            self._show(got)
            return
        self.answer = None
        self._say(f"computing {question.words(trace.tokens)}\u2026")
        self.stack.setCurrentWidget(self.blank)
        self.later(("qkov",), lambda _check: answer_of(trace, question, by, copy), self._show)

    def _show(self, got: Answer) -> None:
        tokens = tuple(self.trace.tokens)
        if isinstance(got, str):
            self.answer = None
            q = self.question
            self._say(f"No exact answer to {q.words(tokens)}: {got}" if q is not None else got)
            self.qk.clear(), self.ov.clear()
            self.stack.setCurrentWidget(self.blank)
            return
        self.answer = got
        self.message = ""
        if isinstance(got, QKAnswer):
            self.qk.show_answer(got)
            self.headline.setText(qk_headline(got, tokens))
            self.stack.setCurrentWidget(self.qk)
        else:
            self.ov.show_answer(got, tokens, self.tokenizer)
            self.headline.setText(ov_headline(got, tokens, self.tokenizer))
            self.stack.setCurrentWidget(self.ov)
        self.headline.setToolTip("")

    def _stop(self) -> None:
        self._lane().cancel_owner_key(self, ("qkov",))
        self._deferred.pop(("qkov",), None)

    def _say(self, text: str) -> None:
        self.message = text
        self.headline.setText(text)

    def _show_controls(self) -> None:
        q = self.question
        for kind, button in self.kind_buttons.items():
            button.setEnabled(q is not None and (kind == "ov" or q.key is not None))
            button.setChecked(q is not None and q.kind == kind)
        qk = q is not None and q.kind == "qk"
        self.parts_label.setVisible(qk)
        self.by_box.setVisible(qk)
