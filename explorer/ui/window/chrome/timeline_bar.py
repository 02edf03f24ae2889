"""The timeline bar: step through a generation, every panel showing the model at step t.

A slider over steps 0..T (the prompt plus the first t generated tokens), previous/next buttons and
the keys [ and ] (window-wide), and "step t of T" with the token being produced. It drives
``Session.timeline`` only; the bar is hidden while there is no timeline.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QSignalBlocker, Qt
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import QHBoxLayout, QLabel, QSlider, QToolButton, QWidget

from explorer.core.display.tokens import quoted

if TYPE_CHECKING:
    from explorer.ui.session.session import Session
    from explorer.ui.session.timeline import TimelineStep

PREVIOUS_KEY, NEXT_KEY = "[", "]"


class TimelineBar(QWidget):
    """Slider, buttons and keys for ``session.timeline`` (see the module docstring)."""

    def __init__(self, session: Session, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.session = session
        self.timeline = session.timeline
        row = QHBoxLayout(self)
        row.setContentsMargins(4, 0, 4, 0)
        row.addWidget(QLabel("Timeline:"))
        self.previous = QToolButton(self)
        self.previous.setArrowType(Qt.ArrowType.LeftArrow)
        self.previous.setToolTip(f"The previous step of the generation ({PREVIOUS_KEY})")
        self.previous.clicked.connect(lambda: self.timeline.step_by(-1))
        row.addWidget(self.previous)
        self.slider = QSlider(Qt.Orientation.Horizontal, self)
        self.slider.setMinimumWidth(220)
        self.slider.setPageStep(1)
        self.slider.setToolTip(f"Step t: every panel shows the prompt plus the first t generated tokens, cut from "
                               f"one trace of the whole sequence ({PREVIOUS_KEY} and {NEXT_KEY} step)")
        self.slider.valueChanged.connect(self._on_slider)
        row.addWidget(self.slider, 1)
        self.next = QToolButton(self)
        self.next.setArrowType(Qt.ArrowType.RightArrow)
        self.next.setToolTip(f"The next step of the generation ({NEXT_KEY})")
        self.next.clicked.connect(lambda: self.timeline.step_by(1))
        row.addWidget(self.next)
        self.label = QLabel("")
        self.label.setMinimumWidth(260)
        row.addWidget(self.label, 1)
        self.shortcuts = []
        for key, delta in ((PREVIOUS_KEY, -1), (NEXT_KEY, 1)):
            shortcut = QShortcut(QKeySequence(key), parent if parent is not None else self)
            shortcut.setContext(Qt.ShortcutContext.WindowShortcut)
            shortcut.activated.connect(lambda d=delta: self._key(d))
            self.shortcuts.append(shortcut)
        self.timeline.changed.connect(self.show_step)

    def _key(self, delta: int) -> None:
        from PySide6.QtWidgets import QApplication, QPlainTextEdit, QLineEdit

        focus = QApplication.focusWidget()
        if isinstance(focus, (QPlainTextEdit, QLineEdit)):  # typing a bracket into a text box is typing
            focus.insertPlainText(PREVIOUS_KEY if delta < 0 else NEXT_KEY) if isinstance(focus, QPlainTextEdit) \
                else focus.insert(PREVIOUS_KEY if delta < 0 else NEXT_KEY)
            return
        self.timeline.step_by(delta)

    def _on_slider(self, value: int) -> None:
        if value != self.timeline.step:
            self.timeline.set_step(value)

    def show_step(self, step: TimelineStep | None) -> None:
        self.setVisible(step is not None)
        if step is None:
            return
        with QSignalBlocker(self.slider):
            self.slider.setRange(0, step.total)
            self.slider.setValue(step.step)
        tokens = step.full.tokens
        what = (f": producing {quoted(tokens[step.produced])}" if step.produced is not None
                else ": every generated token on screen")
        self.label.setText(step.label() + what)
        self.previous.setEnabled(step.step > 0)
        self.next.setEnabled(step.step < step.total)


def start_from_generation(session: Session, result: object) -> None:
    """A finished generation becomes the timeline (its last step on screen)."""
    steps = getattr(result, "steps", ())
    loaded = session.loaded
    if not steps or loaded is None:
        return
    prompt = list(result.prompt_ids)
    ids = prompt + [s.token_id for s in steps]
    session.timeline.start(loaded.tokenizer.decode(ids), ids, len(prompt), [s.scores for s in steps])


def add_timeline_bar(window, session: Session, generation) -> TimelineBar:
    """The bar in its own toolbar row of ``window`` (a QMainWindow), shown while there is a timeline;
    a finished generation of ``generation`` (the pane) starts the timeline."""
    from PySide6.QtWidgets import QToolBar

    bar = QToolBar("Timeline", window)
    bar.setObjectName("toolbar-timeline")
    timeline_bar = TimelineBar(session, window)
    bar.addWidget(timeline_bar)
    window.addToolBarBreak(Qt.ToolBarArea.TopToolBarArea)
    window.addToolBar(Qt.ToolBarArea.TopToolBarArea, bar)
    bar.setVisible(False)
    session.timeline.changed.connect(lambda step: bar.setVisible(step is not None))
    generation.generation_finished.connect(lambda result: start_from_generation(session, result))
    # the pane shows the candidates of the token being produced at the step on screen
    session.timeline.changed.connect(lambda step: generation.select_step(step.step) if step is not None
                                     and step.produced is not None and step.step < len(generation.steps) else None)
    return timeline_bar
