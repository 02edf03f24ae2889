"""The timeline bar: step through a generation, every panel showing the model at step t.

A slider over steps 0..T (the prompt plus the first t generated tokens), previous/next buttons and
the keys [ and ] (window-wide), and "step t of T" with the token being produced, and what the timeline
does ("computing step t…", while generating "following" or "paused at t", steps traced on their own
over the memory budget). It drives ``Session.timeline`` only; the bar is disabled while there is no
timeline. While a generation streams in, its range grows with the tokens produced so far.

A reply to a conversation shows its parts apart: the steps of a reasoning model's thinking and of its
answer are coloured under the slider (the role bands' colours), and the label says which the token being
produced is part of.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QRect, QSignalBlocker, Qt, QTimer
from PySide6.QtGui import QColor, QKeySequence, QPainter, QShortcut
from PySide6.QtWidgets import QHBoxLayout, QLabel, QSlider, QStyle, QStyleOptionSlider, QToolButton, QWidget

from explorer.core.display.tokens import quoted, vocab_quoted
from explorer.ui.widgets.role_bands import label_and_colour

if TYPE_CHECKING:
    from explorer.ui.session.session import Session
    from explorer.ui.session.timeline import TimelineStep

PREVIOUS_KEY, NEXT_KEY = "[", "]"
GENERATING = ("The generation is still running: the range grows as tokens come, and the panels follow the newest "
              "step unless you choose one (then they stay there; choose the last step to follow again). Each "
              "step is traced on its own until the generation ends, then the whole sequence once.")


class SpanSlider(QSlider):
    """A slider over steps 0..T with each generated token's part (thinking, answer) as a colour strip under
    its groove: the step t strip is the token produced at step t."""

    STRIP = 4

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(Qt.Orientation.Horizontal, parent)
        self.colours: list[str] = []

    def set_colours(self, colours: list[str]) -> None:
        if colours != self.colours:
            self.colours = colours
            self.update()

    def paintEvent(self, event) -> None:  # noqa: N802 - Qt override
        super().paintEvent(event)
        n = len(self.colours)
        if not n or self.maximum() <= self.minimum():
            return
        option = QStyleOptionSlider()
        self.initStyleOption(option)
        groove = self.style().subControlRect(QStyle.ComplexControl.CC_Slider, option,
                                             QStyle.SubControl.SC_SliderGroove, self)
        handle = self.style().subControlRect(QStyle.ComplexControl.CC_Slider, option,
                                             QStyle.SubControl.SC_SliderHandle, self)
        left, width = groove.left() + handle.width() // 2, groove.width() - handle.width()
        span = self.maximum() - self.minimum()
        painter = QPainter(self)
        for t, colour in enumerate(self.colours):  # step t's token: between the positions t and t + 1
            a = left + round(width * min(t, span) / span)
            b = left + round(width * min(t + 1, span) / span)
            painter.fillRect(QRect(a, self.height() - self.STRIP, max(b - a, 1), self.STRIP), QColor(colour))
        painter.end()


def step_parts(session: Session, step: TimelineStep) -> tuple[list[str], str]:
    """The colour of each generated token's part and the name of the part of the token produced at ``step``
    ("" when the timeline is not a conversation's reply)."""
    chat = session.timeline.chat
    if chat is None:
        return [], ""
    labels = [label_and_colour(chat.role_of(p), chat.kinds[p])
              for p in range(step.n_prompt, min(step.n_prompt + step.total, chat.n_tokens))]
    part = ""
    if step.produced is not None and step.step < len(labels):
        kind = chat.kinds[step.produced]
        part = "thinking" if kind in ("thinking", "analysis", "commentary") else "markup" if kind == "markup" \
            else "answer"
    return [colour for _label, colour in labels], part


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
        self.slider = SpanSlider(self)
        self.slider.setMinimumWidth(160)
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
        self.label.setMinimumWidth(240)
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
        for widget in (self.previous, self.slider, self.next):
            widget.setEnabled(step is not None)
        colours, part = step_parts(self.session, step) if step is not None else ([], "")
        self.slider.set_colours(colours)
        if step is None:
            with QSignalBlocker(self.slider):
                self.slider.setRange(0, 0)
            self.label.setText("generate a continuation to step through it")
            return
        with QSignalBlocker(self.slider):
            self.slider.setRange(0, step.total)
            self.slider.setValue(step.step)
        if step.produced is None:
            what = ": every generated token on screen"
        elif step.full is not None:
            what = f": producing {quoted(step.full.tokens[step.produced])}"
        else:
            loaded = self.session.loaded
            what = f": producing {vocab_quoted(loaded.tokenizer if loaded is not None else None, step.produced_id)}"
        status = self.timeline.status()
        said = f" ({part})" if part else ""
        self.label.setText(step.label() + said + what + (f" \u00b7 {status}" if status else ""))
        self.label.setToolTip(self.timeline.budget_reason or (GENERATING if self.timeline.streaming else ""))
        self.previous.setEnabled(step.step > 0)
        self.next.setEnabled(step.step < step.total)


def stream_from_generation(session: Session, generation) -> None:
    """Tokens of the running generation arrived: the timeline's range grows (it follows the newest step)."""
    steps = generation.steps
    if not steps or session.loaded is None:
        return
    generated = [s.token_id for s in steps]
    session.timeline.stream(generation.run.run_id, generation.prompt_ids, generated, [s.scores for s in steps],
                            generation.assistant.spans(generation.prompt_ids, generated))


def start_from_generation(session: Session, result: object, generation=None) -> None:
    """A finished (or stopped) generation becomes the timeline, traced once: its last step on screen, or the
    step the user chose while it streamed in. A failed one keeps the steps it made."""
    steps = getattr(result, "steps", None)
    prompt = getattr(result, "prompt_ids", None)
    if result is None and generation is not None:
        steps, prompt = generation.steps, generation.prompt_ids
    loaded = session.loaded
    if not steps or loaded is None:
        return
    prompt = list(prompt)
    ids = prompt + [s.token_id for s in steps]
    key = generation.run.run_id if generation is not None else None
    chat = generation.assistant.spans(prompt, ids[len(prompt):]) if generation is not None else None
    session.timeline.finish(key, loaded.tokenizer.decode(ids), ids, len(prompt), [s.scores for s in steps], chat)


def add_timeline_bar(window, session: Session, generation) -> TimelineBar:
    """The bar at the end of ``window``'s toolbar (always there: showing or hiding a toolbar row re-lays the
    dock tab bars out, and Qt then leaves stale copies of them on screen), enabled while there is a
    timeline; the generation of ``generation`` (the pane) streaming in starts the timeline, and once it ends
    its whole sequence is traced once. The Journey panel's
    dock (and the conversation Roles panel's) becomes a tab beside the generation pane's."""
    timeline_bar = TimelineBar(session, window)
    window.toolbar.addSeparator()
    window.toolbar.addWidget(timeline_bar)
    timeline_bar.show_step(None)
    generation.step_added.connect(lambda _index: stream_from_generation(session, generation))
    generation.generation_finished.connect(lambda result: start_from_generation(session, result, generation))
    beside = [d for d in getattr(window, "docks", []) if d.objectName() in ("dock-journey", "dock-roles")]
    side = getattr(window, "generation_dock", None)
    if beside and side is not None and not getattr(window, "_sized_docks", False):
        # once the window is shown (tabified before, Qt leaves a stale copy of the tab bar on screen);
        # a layout restored from the settings keeps the journey (and the conversation's roles) where the user put it
        QTimer.singleShot(0, window, lambda: ([window.tabifyDockWidget(side, d) for d in beside], side.raise_()))
    # the pane's step box and the timeline say the same step: the pane shows the candidates of the token being
    # produced at the step on screen (at the last step, none: the box says T), and a step chosen in the box is
    # the timeline's
    session.timeline.changed.connect(lambda step: follow_step(session, generation, step))
    generation.step_chosen.connect(lambda t: choose_step(session, generation, t))
    return timeline_bar


def _same_generation(session: Session, generation) -> bool:
    steps = generation.steps
    return bool(steps) and session.timeline.active and session.timeline.owns(generation.ids_through(len(steps) - 1)) \
        and len(session.timeline.ids) == len(generation.prompt_ids) + len(steps)


def follow_step(session: Session, generation, step: TimelineStep | None) -> None:
    """The timeline moved to ``step``: the pane's box follows (while it shows this generation)."""
    if step is None:
        return
    if step.produced is not None and step.step < len(generation.steps):
        generation.select_step(step.step)
    elif step.step == len(generation.steps) and not generation.running and _same_generation(session, generation):
        generation.show_end(step.step)


def choose_step(session: Session, generation, t: int) -> None:
    """The user chose step ``t`` in the pane's box: the timeline shows it (every panel at that step)."""
    if _same_generation(session, generation) and t != session.timeline.step:
        session.timeline.set_step(t)
