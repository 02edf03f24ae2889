"""The generation pane: continue a prompt token by token and see why each token was chosen.

A prompt box, Generate / Stop / "Continue from here", the sampling controls (``controls``), the
continuation streaming in token by token (``token_text``: each token's background is its probability
under the controls it was drawn with), and for one step a bar chart of the top next-token candidates
before and after the controls (``candidate_chart``). Moving a control re-scores the shown step from
its stored logits at once (``explorer.core.generation.candidates``), without running the model, so a
student sees what temperature, top-k, top-p, min-p and the repetition penalty do to the same
distribution. Clicking a generated token selects that step and makes the prompt plus the continuation
up to that token the window's current trace (tokenized exactly as generated), so every panel shows
the model's internals at that point. Generating runs in a worker, paced for the GUI (``stream``).

Why a ``Panel`` subclass that is not in the panel registry: it reuses the panel machinery (the
"What am I looking at?" explanation, ``add_exportable``'s right-click export of the chart, a
``PanelDock``) but it is not a trace panel: it drives the model instead of drawing a ``Trace``,
so the window hosts it in its own dock (``explorer.ui.window.docks.add_generation_dock``) and never hands
it traces.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QEvent, QObject, Qt, Signal
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QDockWidget,
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QMessageBox,
    QPlainTextEdit,
    QPushButton,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from explorer.core.errors import ExplorerError, PromptError
from explorer.core.generation.sampling import SamplingParams
from explorer.core.generation.transcript import transcript_dict, write_transcript_json
from explorer.ui.export.menu import ask_path
from explorer.ui.generation.assistant import AssistantTurn
from explorer.ui.generation.controls import MAX_SEED, SamplingControls
from explorer.ui.generation.steps import StepView
from explorer.ui.generation.stream import GenerationRun
from explorer.ui.generation.token_text import TokenText, legend_html, step_tooltip
from explorer.ui.panels.base import Panel
from explorer.ui.session.selection import Selection

if TYPE_CHECKING:  # explorer.core.generation.generate imports torch: only once a model is loaded
    from explorer.core.generation.generate import GenerationResult, Step
    from explorer.core.loaded import LoadedModel
    from explorer.core.trace import Trace
    from explorer.ui.session.session import Session

MODEL_CHANGED = "A new model: the previous model's continuation was cleared."
PROMPT_CHANGED = "The prompt changed: the previous prompt's continuation was cleared."


class GenerationPane(Panel):
    """Generate from a prompt and inspect every step. See the module docstring.

    Signals
    -------
    trace_requested(str, list)
        Prompt plus continuation up to a clicked token, and its exact token ids.
    step_added(int)
        A step arrived and is shown (its index).
    generation_finished(object)
        The ``GenerationResult`` (None if the generation failed).
    """

    trace_requested = Signal(str, object)
    step_added = Signal(int)
    step_chosen = Signal(int)  # the user chose step t in the step box (the timeline shows it: timeline_bar.py)
    generation_finished = Signal(object)

    def __init__(self, selection: Selection, parent: QWidget | None = None) -> None:
        super().__init__(selection, parent)
        self.loaded: LoadedModel | None = None
        self.stop_at_eos = True  # end at the end-of-text token (no control for it here)
        self._pinned: tuple[str, list[int]] | None = None  # prompt text -> exact ids (continue, clicks)
        self._own_prompt = False
        self._setting_prompt = False
        self._sized = False
        self._build()
        self.run = GenerationRun(self.text_view, self.status, on_start=self.step_view.start,
                                 on_steps=self._steps_added, on_finished=self._run_finished)
        self._connect()
        self.set_model(None)

    # --- the run (stream.py: GenerationRun), as the pane's own names ----------------------------------
    # the run's data, read from it (tests, the window and notebooks use the pane's names)
    steps = property(lambda self: self.run.steps, doc="The steps generated so far.")
    result = property(lambda self: self.run.result, doc="The finished run's GenerationResult (None: none).")
    error = property(lambda self: self.run.error, doc="Why the last run failed (None: it did not).")
    running = property(lambda self: self.run.running, doc="Whether a generation runs now.")
    prompt_ids = property(lambda self: self.run.prompt_ids, doc="The ids the shown continuation continues.")
    prompt_text = property(lambda self: self.run.prompt_text, doc="That prompt as the text view shows it.")
    params_used = property(lambda self: self.run.params_used, doc="The controls the run was drawn with.")
    _cancel = property(lambda self: self.run.cancel, doc="The running generation's Cancel.")

    def stop(self) -> None:
        """Stop the running generation before its next step (its result comes back as "cancelled")."""
        self.run.stop()

    def has_output(self) -> bool:
        """Whether a continuation (running, finished or failed) is shown."""
        return self.run.has_output()

    def shutdown(self) -> None:
        """The window closes: stop, and let nothing the worker still sends reach the (deleted) widgets."""
        self.run.shutdown()

    # --- building --------------------------------------------------------------------------------
    def _build(self) -> None:
        self.prompt_edit = QPlainTextEdit(self)
        self.prompt_edit.setObjectName("generation-prompt")
        self.prompt_edit.setPlaceholderText("Prompt to continue (Ctrl+Enter generates)")
        self.prompt_edit.setTabChangesFocus(True)
        line = self.prompt_edit.fontMetrics().lineSpacing()
        self.prompt_edit.setFixedHeight(3 * line + 12)
        self.body.addWidget(self.prompt_edit)

        self.generate_button = QPushButton("Generate", self)
        self.generate_button.setToolTip("Continue the prompt with the controls below (Ctrl+Enter)")
        self.stop_button = QPushButton("Stop", self)
        self.stop_button.setToolTip("Stop after the step that is running (Esc)")
        self.continue_button = QPushButton("Continue from here", self)
        self.continue_button.setToolTip("Generate again from the selected token with the current controls")
        self.export_button = QPushButton("Export transcript…", self)
        self.export_button.setToolTip("Write every step (chosen token, candidates before and after the "
                                      "controls) to a JSON file")
        buttons = QHBoxLayout()
        buttons.setSpacing(4)
        for button in (self.generate_button, self.stop_button, self.continue_button, self.export_button):
            buttons.addWidget(button)
        buttons.addStretch(1)
        self.body.addLayout(buttons)

        self.controls = SamplingControls(self)
        self.body.addWidget(self.controls)
        c = self.controls  # the controls are the pane's attributes too (tests, benchmarks, callers)
        self.greedy, self.temperature, self.top_k, self.top_p = c.greedy, c.temperature, c.top_k, c.top_p
        self.min_p, self.repetition, self.max_new = c.min_p, c.repetition, c.max_new
        self.seed, self.random_seed = c.seed, c.random_seed

        self.status = QLabel("", self)
        self.status.setObjectName("generation-status")
        self.status.setWordWrap(True)
        self.status.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)
        # two lines, always: a new message must not move (and so repaint) everything below it
        self.status.setFixedHeight(2 * self.status.fontMetrics().lineSpacing() + 4)
        self.body.addWidget(self.status)

        self.text_view = TokenText(self)
        self.text_view.setObjectName("generation-text")
        self.text_view.setMinimumHeight(70)
        self.text_view.tooltip_for = self.tooltip_for
        self.legend = QLabel(legend_html(), self)
        self.legend.setToolTip("Probability of each chosen token under the controls it was drawn with "
                               "(greedy: always 1). Hover a token for details; click it to show the "
                               "internals at that token in every panel.")
        top = QWidget(self)
        top_layout = QVBoxLayout(top)
        top_layout.setContentsMargins(0, 0, 0, 0)
        top_layout.setSpacing(2)
        top_layout.addWidget(self.text_view, 1)
        self.assistant = AssistantTurn(self)  # a conversation's assistant turn: its end, its thinking, kept as a turn
        top_layout.addLayout(self.assistant.legend_row(self.legend))

        self.step_view = sv = StepView(self, self.text_view, steps=lambda: self.run.steps, loaded=lambda: self.loaded,
                                       params=self.current_params, params_used=lambda: self.run.params_used,
                                       selected_changed=self._update_buttons, step_chosen=self.step_chosen.emit)
        self.step_spin, self.info, self.chart, self._bar_timer = sv.step_spin, sv.info, sv.chart, sv.bar_timer
        bottom = sv.widget
        self.splitter = QSplitter(Qt.Orientation.Vertical, self)
        self.splitter.addWidget(top)
        self.splitter.addWidget(bottom)
        self.splitter.setChildrenCollapsible(False)
        self.splitter.setStretchFactor(0, 2)
        self.splitter.setStretchFactor(1, 3)
        self.body.addWidget(self.splitter, 1)
        self.add_exportable("next-token candidates", self.chart.getPlotItem(), sv.chart_data)

    def _connect(self) -> None:
        self.generate_button.clicked.connect(self.generate)
        self.stop_button.clicked.connect(self.stop)
        self.continue_button.clicked.connect(self.continue_from_here)
        self.export_button.clicked.connect(self.export_transcript_dialog)
        for keys in ("Ctrl+Return", "Ctrl+Enter"):
            shortcut = QShortcut(QKeySequence(keys), self)
            shortcut.setContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
            shortcut.activated.connect(self.generate)
        escape = QShortcut(QKeySequence(Qt.Key.Key_Escape), self)
        escape.setContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
        escape.activated.connect(self.stop)
        self.controls.changed.connect(self._controls_changed)
        self.prompt_edit.textChanged.connect(self._on_prompt_edited)
        self.text_view.token_clicked.connect(self.click_token)

    # --- the model and the prompt --------------------------------------------------------------------
    def attach(self, session: Session) -> None:
        """Follow ``session``: its model, the prompt the user types (unless this pane's was edited),
        its interventions; a clicked token becomes the session's trace."""
        super().attach(session)
        session.model_loaded.connect(self._on_model_loaded)
        session.trace_file_opened.connect(self._on_trace_file_opened)
        session.prompt_edited.connect(self.follow_prompt)
        self.trace_requested.connect(session.trace_ids)
        self.assistant.attach(session)

    def _on_model_loaded(self, loaded: LoadedModel) -> None:
        self.set_model(loaded)
        if self.session is not None:
            self.follow_prompt(self.session.prompt)

    def _on_trace_file_opened(self, _path: str) -> None:
        self.set_model(None)

    def set_model(self, loaded: LoadedModel | None) -> None:
        """A new model: whatever runs is stopped and forgotten, saying so if something was shown."""
        had_output = self.has_output()
        self.forget_run()
        self.loaded = loaded
        if loaded is not None:
            self.controls.set_max_new_cap(loaded.config.n_ctx)
        blocked = getattr(loaded, "generation_blocked", None)
        self.status.setText("No model loaded." if loaded is None else f"Generation is off: {blocked}." if blocked
                            else MODEL_CHANGED if had_output else "")
        self.prompt_edit.setEnabled(not blocked)
        self.controls.setEnabled(not blocked)
        self._update_buttons()

    prompt_is_own = property(lambda self: self._own_prompt, doc="Whether the pane's prompt was edited by hand.")

    def follow_prompt(self, text: str) -> None:
        """The window's prompt changed: use it, unless this pane's prompt was edited by hand."""
        if not self._own_prompt:
            self.set_prompt(text)

    def set_prompt(self, text: str, ids: Sequence[int] | None = None) -> None:
        """Put ``text`` in the prompt box; ``ids``: the exact tokens it stands for (else it is encoded)."""
        self._setting_prompt = True
        try:
            if text != self.prompt_edit.toPlainText():
                self.prompt_edit.setPlainText(text)
        finally:
            self._setting_prompt = False
        self._pinned = (text, [int(i) for i in ids]) if ids is not None else None

    def _on_prompt_edited(self) -> None:
        text = self.prompt_edit.toPlainText()
        if not self._setting_prompt:
            self._own_prompt = bool(text)
        if self.has_output() and text != self.run.run_prompt:  # the continuation was for another prompt
            self.forget_run()
            self.status.setText(PROMPT_CHANGED)

    def _encode_prompt(self) -> list[int]:
        text = self.prompt_edit.toPlainText()
        if self._pinned is not None and self._pinned[0] == text:
            return list(self._pinned[1])
        if not text:
            raise PromptError("the prompt is empty: type some text to continue")
        ids = self.loaded.tokenizer.encode(text)
        if not ids:
            raise PromptError("the prompt has no tokens in this model's vocabulary")
        n_ctx = self.loaded.config.n_ctx
        if len(ids) >= n_ctx:
            raise PromptError(f"the prompt has {len(ids)} tokens and the model's context holds {n_ctx}: "
                              "shorten it to leave room for the continuation")
        return ids

    # --- generating (the worker's side: stream.py) -------------------------------------------------------
    def generate(self) -> bool:
        """Continue the prompt box's text with the current controls. False if it could not start."""
        if self.loaded is None or self.running or getattr(self.loaded, "generation_blocked", None):
            return False
        try:
            ids = self._encode_prompt()
        except ExplorerError as exc:
            self.run.show_error(str(exc))
            return False
        return self._start(ids)

    def continue_from_here(self) -> bool:
        """Generate again from the selected step: prompt + generated tokens up to it are the new prompt."""
        if self.loaded is None or self.running or self.selected is None or not self.steps:
            return False
        ids = self.prompt_ids + [s.token_id for s in self.steps[: self.selected + 1]]
        self.set_prompt(self.loaded.tokenizer.decode(ids), ids)
        self._own_prompt = True
        return self._start(ids)

    def _start(self, ids: list[int]) -> bool:
        seed = secrets.randbelow(MAX_SEED + 1) if self.random_seed.isChecked() else int(self.seed.value())
        if self.random_seed.isChecked():
            self.seed.setValue(seed)
        interventions = self.interventions.active() if self.interventions is not None else ()
        params = self.assistant.params(self.current_params(seed), ids)  # a conversation: stop at its end of turn
        self.run.start(self.loaded, ids, params, self.prompt_edit.toPlainText(), interventions)
        self._update_buttons()
        self.run.launch()
        return True

    def _steps_added(self, steps: list[Step]) -> None:
        self.step_view.steps_added(steps)
        self.assistant.steps_added()
        for step in steps:
            self.step_added.emit(step.index)

    def _run_finished(self, result: GenerationResult | None) -> None:
        self.step_view.finished()
        self._update_buttons()
        self.assistant.update()
        self.generation_finished.emit(result)

    def forget_run(self) -> None:
        """Stop what runs and clear the continuation, its status, the chart and the step selector."""
        self.run.forget()
        self.step_view.clear()
        self._pinned = None
        self.text_view.start("")
        self.status.setText("")
        self.status.setStyleSheet("")
        self._update_buttons()

    def _update_buttons(self) -> None:
        ready = self.loaded is not None and not getattr(self.loaded, "generation_blocked", None)
        self.generate_button.setEnabled(ready and not self.running)
        self.stop_button.setEnabled(self.running)
        self.continue_button.setEnabled(ready and not self.running and self.selected is not None)
        self.export_button.setEnabled(not self.running and self.result is not None)

    # --- the controls ----------------------------------------------------------------------------------
    def current_params(self, seed: int | None = None) -> SamplingParams:
        """The controls as they are now (``seed``: the one to record; default the seed box's)."""
        return self.controls.params(seed, self.stop_at_eos)

    def _controls_changed(self) -> None:
        """Re-score the shown step under the new controls (no forward pass)."""
        if self.running:
            self.step_view.schedule()
        else:
            self.step_view.draw()

    # --- steps: selection, clicks, the chart ----------------------------------------------------------
    selected = property(lambda self: self.step_view.selected, doc="The step shown (None: none).")
    table = property(lambda self: self.step_view.table, doc="The shown step's CandidateTable.")

    def show_end(self, total: int) -> None:
        """The timeline is at its last step ``total``: the step box says so (no candidates: none is produced)."""
        self.step_view.show_end(total)

    def select_step(self, index: int, follow: bool = False) -> None:
        """Show step ``index``'s candidates (``follow``: keep following the newest step while streaming)."""
        self.step_view.select(index, follow)

    def _draw_bars(self) -> None:
        self.step_view.draw()

    def click_token(self, index: int) -> None:
        """Select step ``index`` and make prompt + continuation up to it the window's current trace."""
        self.select_step(index)
        ids = self.ids_through(index)
        self.trace_requested.emit(self.loaded.tokenizer.decode(ids), ids)

    def ids_through(self, index: int) -> list[int]:
        return self.prompt_ids + [s.token_id for s in self.steps[: index + 1]]

    def tooltip_for(self, index: int) -> str:
        return step_tooltip(self.steps[index])

    # --- export -----------------------------------------------------------------------------------------
    def transcript(self) -> dict[str, Any]:
        if self.result is None:
            raise ExplorerError("there is no finished generation to export")
        return transcript_dict(self.prompt_text, self.result.steps, self.params_used, text=self.result.text,
                               display=self.loaded.tokenizer.display, stop_reason=self.result.stop_reason,
                               model=getattr(self.loaded, "name", None),
                               interventions=[iv.describe() for iv in self.result.interventions])

    def export_transcript(self, path: Any) -> None:
        """Write the last generation's transcript as JSON (atomically)."""
        write_transcript_json(path, self.transcript())

    def export_transcript_dialog(self) -> None:
        path = ask_path(self, "Export transcript", "transcript", ".json", "JSON transcript (*.json)")
        if path is None:
            return
        try:
            self.export_transcript(path)
        except Exception as exc:  # noqa: BLE001 - shown to the user
            QMessageBox.warning(self, "Export transcript", f"Could not write {path}:\n{exc}")

    # --- Panel contract and window events -----------------------------------------------------------
    def show_trace(self, trace: Trace) -> None:
        """Not a trace panel: the window never hands it traces."""

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt override
        if event.type() == QEvent.Type.Close:  # the window closes: do not keep it waiting
            self.stop()
        return False

    def showEvent(self, event: Any) -> None:  # noqa: N802
        super().showEvent(event)
        if self._sized:
            return
        self._sized = True
        dock, window = self.parentWidget(), self.window()
        if isinstance(window, QMainWindow) and isinstance(dock, QDockWidget) and not dock.isFloating():
            if dock.width() < 360:
                width = min(max(380, int(window.width() * 0.34)), 620)
                window.resizeDocks([dock], [width], Qt.Orientation.Horizontal)
