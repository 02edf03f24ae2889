"""What the window says about what its panels show.

The panels always show one trace; the prompt box may already hold other text. ``WindowState`` keeps
the two apart and says so: the token count and the window title are those of the trace on screen
(its prompt, abbreviated, and its token count), a "computing…" notice appears while a newer prompt is
being traced and clears when the trace of exactly the prompt in the box arrives (not an older one that
was still running), an empty prompt gets its own notice instead of the previous count, and before the
first trace the panels show a placeholder instead of empty axes.

It also decides what happens to the user's text when another model is loaded: kept if the new model
can read it, otherwise replaced only after asking (``prompt_for_model``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import QLabel, QMessageBox, QSizePolicy, QWidget

from explorer.core.display.levels import abbreviate
from explorer.ui.session.frame import FILE, REMOTE, Frame
from explorer.ui.session.session import Session
from explorer.ui.window.chrome.prompt_editor import PromptEditor
from explorer.ui.window.chrome.status_bar import StatusBar
from explorer.ui.window.docks import PanelDock

if TYPE_CHECKING:
    from explorer.core.loaded import LoadedModel

COMPUTING_STYLE = "QLabel { background: #e7f0ff; color: #1d3f7a; border-radius: 3px; padding: 1px 6px; }"
EMPTY_STYLE = "QLabel { background: #f1f3f5; color: #343a40; border-radius: 3px; padding: 1px 6px; }"
TITLE_CHARS = 48


def prompt_title(text: str, chars: int = TITLE_CHARS) -> str:
    """A prompt as a one-line title: whitespace runs as one space, cut with "…", in quotes."""
    return "\u201c" + abbreviate(" ".join(text.split()), chars) + "\u201d"


def tokens_text(n: int) -> str:
    return f"{n:,} token{'s' if n != 1 else ''}"


class WindowState(QObject):
    """The window-level state of the shown trace and the requested one.

    Attributes read by tests: ``computing`` (a newer prompt than the shown one is being traced),
    ``requested_text`` (the prompt being traced), ``shown_text``/``shown_tokens``/``shown_request``
    (the trace on screen and the id of the request that made it), ``empty`` (the prompt box is empty).

    Signals: ``changed()`` after any of them changed; ``title_changed(str)``: the window's title.
    """

    changed = Signal()
    title_changed = Signal(str)

    def __init__(self, session: Session, prompt: PromptEditor, status: StatusBar, docks: Sequence[PanelDock],
                 app_name: str, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.session, self.prompt, self.status, self.docks = session, prompt, status, list(docks)
        self.app_name = app_name
        self.computing = False
        self.empty = False
        self.requested_text: str | None = None
        self.shown_text: str | None = None
        self.shown_tokens: int | None = None
        self.shown_request: int | None = None
        self.label = QLabel("", prompt)
        self.label.setObjectName("trace-state")
        self.label.setTextFormat(Qt.TextFormat.PlainText)
        # never widens the window: the text takes the room there is (the tooltip has all of it)
        self.label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.label.hide()
        prompt.add_to_row(self.label, 1, 1)  # between the token count and the notice
        session.prompt_changed.connect(self.request_started)
        session.presenter.shown.connect(self._on_shown)
        session.failed.connect(self._finish_failed)
        session.model_loaded.connect(self._on_model_loaded)
        session.loading.connect(self._on_loading)
        self.placeholders("Loading the model\u2026")

    # --- the prompt and the requests ---------------------------------------------------------------
    def request_started(self, text: str) -> None:
        """A trace of ``text`` was asked for (typing, a sample, a new model, a generated token)."""
        self.requested_text = text
        self.empty = not text.strip()
        self.computing = not self.empty and text != self.shown_text
        loaded = self.session.loaded
        if self.empty and self.shown_text is None and loaded is not None:  # no trace will come: not "Analysing…"
            self.placeholders(f"Type a prompt above to see what {loaded.name} does with it.")
        self._show()

    def _on_shown(self, frame: Frame) -> None:
        source, trace = frame.source, frame.trace
        self.shown_text, self.shown_tokens, self.shown_request = source.text, trace.n_tokens, source.request_id
        # only the trace of the prompt that is in the box now ends "computing…" (not while an edit waits)
        box = self.session.prompt
        if source.text == box and not self.session.controller.edit_pending:
            self.computing = False
        self.empty = not box.strip()
        self.show_content()
        self._show()

    def _finish_failed(self, message: str = "") -> None:
        self.computing = False
        self.empty = not self.session.prompt.strip()
        if self.shown_text is None and not self.empty:  # nothing analysed: never "Analysing…" for ever
            self.placeholders(f"The prompt could not be analysed: {message}" if message else
                              "The prompt could not be analysed.")
        self._show()

    def _on_model_loaded(self, loaded: LoadedModel) -> None:
        if self.shown_text is None:
            self.placeholders(f"Analysing the prompt with {loaded.name}\u2026")
        # the window requests the new model's trace right after this signal's caller set the prompt
        self.shown_text = None  # a new model: whatever is shown is the old model's
        self.request_started(self.session.prompt)

    def _on_loading(self, stage: str) -> None:
        if self.shown_text is None and stage:
            self.placeholders(stage)

    # --- what the window shows ---------------------------------------------------------------------
    def _show(self) -> None:
        label, shown = self.label, self.shown_text
        if self.empty:
            self.prompt.notice.hide()  # "the prompt is empty" said once, here
            label.setText("Empty prompt: type some text to analyse."
                          + (f" The panels still show {prompt_title(shown, 24)} ({tokens_text(self.shown_tokens or 0)})."
                             if shown else ""))
            label.setStyleSheet(EMPTY_STYLE)
            label.show()
            self.prompt.count.setText("<b>0</b> tokens")
        elif self.computing:
            label.setText("computing\u2026" + (f" (the panels show {prompt_title(shown, 32)} until it is done)"
                                               if shown else ""))
            label.setStyleSheet(COMPUTING_STYLE)
            label.show()
        else:
            label.hide()
        label.setToolTip(label.text())
        if self.computing:
            self.status.fields["forward"].setText("computing\u2026")
        self.title_changed.emit(self.title())
        self.changed.emit()

    def title(self) -> str:
        """"model — “prompt…” (n tokens) — app", with "computing…" while a newer prompt is traced; a trace
        opened without its model: "file — model (no model) — app"."""
        frame = self.session.frame
        if frame is not None and frame.source.kind in (FILE, REMOTE) and self.session.loaded is None:
            name = Path(frame.source.label).name
            return f"{name} \u2014 {frame.trace.meta.model_name or 'trace'} (no model) \u2014 {self.app_name}"
        loaded = self.session.loaded
        parts = [loaded.name] if loaded is not None else []
        if self.shown_text is not None and self.shown_tokens is not None:
            parts.append(f"{prompt_title(self.shown_text)} ({tokens_text(self.shown_tokens)})")
        step = self.session.timeline.current
        if step is not None:
            parts.append(step.label())
        if self.computing:
            parts.append("computing\u2026")
        return " \u2014 ".join([*parts, self.app_name])

    def placeholders(self, text: str) -> None:
        """Every panel dock shows ``text`` instead of its empty plots (before the first trace)."""
        for dock in self.docks:
            dock.show_placeholder(text)

    def show_content(self) -> None:
        for dock in self.docks:
            dock.show_content()


# --- a new model and the user's text ---------------------------------------------------------------
def prompt_for_model(parent: QWidget, loaded: LoadedModel, current: str, candidates: list[str],
                     ask: Callable[[str, str], bool] | None = None) -> tuple[str, str | None]:
    """The prompt to trace with a newly loaded model, and the reason it cannot read ``current`` (or
    None). ``current`` (the user's text) is kept if the model can read it. If it cannot, the first of
    ``candidates`` it can read is offered; the user's text is replaced only if ``ask`` (a yes/no
    question; by default a dialog) says yes. An empty box is filled without asking."""
    reason = None
    if current.strip():
        try:
            loaded.encode(current)
            return current, None
        except Exception as exc:  # noqa: BLE001 - any tokenizer refusal is the reason shown
            reason = str(exc)
    replacement = None
    for text in candidates:
        try:
            loaded.encode(text)
        except Exception:  # noqa: BLE001 - not in this vocabulary (or empty): try the next
            continue
        replacement = text
        break
    if replacement is None:
        return current, reason
    if not current.strip():
        return replacement, None
    ask = ask or (lambda title, text: QMessageBox.question(parent, title, text) == QMessageBox.StandardButton.Yes)
    question = (f"{loaded.name} cannot read the prompt in the box:\n{reason}\n\n"
                f"Replace it with {prompt_title(replacement)}?\n(No keeps your text.)")
    if ask("Replace the prompt?", question):
        return replacement, None
    return current, reason
