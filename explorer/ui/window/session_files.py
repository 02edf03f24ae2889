"""File ▸ Save session…, Open session… and Export as script… (``core/session_file.py``, ``core/export_script.py``).

Saving hashes the model's files on a worker (``core/model_files.py``: the files read once per model, later
saves reuse the hash), then writes the session. Opening reads the file (bounded; a bad one is one line),
compares the model's files with the saved hash on a worker, and when they differ says "the model file
changed since this session was saved" and asks before going on, rather than show other numbers under the
session's name. Then ``SessionRestore`` puts it back through the Session's verbs, one step after another:
the model (unless it is the one open), the SAEs, the interventions, the prompt as the exact ids traced,
the widgets' settings and layout (``session_state``), and, once that trace is drawn, the selection; then
a patching grid is run again when the session had one. ``restored(SessionState)`` says it is done.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QFileDialog, QMessageBox

from explorer.core import session_file
from explorer.core.errors import ExplorerError
from explorer.ui.session import background
from explorer.ui.session.frame import PROMPT, Frame
from explorer.ui.window import places
from explorer.ui.window.session_state import PatchingPanel, apply_settings, capture, panel_of

if TYPE_CHECKING:
    from explorer.core.model_files import Fingerprint
    from explorer.core.session_file import SessionState
    from explorer.ui.window.main_window import MainWindow

FILTER = "Transformer Explorer sessions (*.explorer-session.json *.json);;All files (*)"
SCRIPT_FILTER = "Python scripts (*.py)"


def _version() -> str:
    from explorer.core.provenance import versions

    return versions()["transformer-explorer"] or ""


def _hash(source: str) -> Fingerprint | None:
    from explorer.core.model_files import fingerprint
    from explorer.ui.session.priority import background

    background()  # below the GUI thread
    return fingerprint(source)


class SessionFiles(QObject):
    """The window's session files. Signals: ``saved(str)`` (the path written: a session or a script),
    ``restored(object)`` (the SessionState now shown), ``failed(str)`` (one line, also in the status bar)."""

    saved = Signal(str)
    restored = Signal(object)
    failed = Signal(str)

    def __init__(self, window: MainWindow) -> None:
        super().__init__(window)
        self.window, self.session = window, window.session
        self.restore: SessionRestore | None = None
        self.failed.connect(lambda line: window.status.notice(line))
        # the model's files are hashed once it loads (on a worker): saves and exports name them without waiting
        self.session.model_loaded.connect(lambda _loaded: self._hash_now())

    def _hash_now(self) -> None:
        source = self.session.source
        if source is not None:
            background.run(_hash, str(source), on_error=lambda _failure: None)

    # --- saving ----------------------------------------------------------------------------------
    def save(self, path: str | Path, then: Callable[[SessionState], str] | None = None) -> None:
        """Write the session (``then``: write something else made of the state instead, e.g. a script)."""
        source = self.session.source
        if self.session.loaded is None or source is None:
            self.failed.emit("Open a model first: a session names the model its numbers come from.")
            return
        self.window.status.notice(f"Saving {Path(path).name}: hashing the model's files…")

        def write(found: Fingerprint | None) -> None:
            if self.session.closed:  # the window closed while the files were hashed
                return
            try:
                state = capture(self.window, found, _version())
                if then is None:
                    session_file.save(state, path)
                else:
                    from explorer.core.export import write_text

                    write_text(path, then(state))
            except (ExplorerError, OSError, ValueError) as exc:
                self.failed.emit(f"Could not write {path}: {exc}")
                return
            self.window.status.notice(f"Saved {path}")
            self.saved.emit(str(path))

        background.run(_hash, str(source), on_done=write,
                       on_error=lambda failure: self.failed.emit(f"Could not hash the model's files: {failure.message}"))

    def export_script(self, path: str | Path) -> None:
        """File ▸ Export as script…: a Python script that recomputes what the window shows."""
        from explorer.core.export_script import script_for

        self.save(path, lambda state: script_for(state, _version(), Path(path).name))

    def save_dialog(self) -> None:
        path = self._ask("Save session", "session.explorer-session.json", FILTER, save=True)
        if path:
            self.save(path)

    def export_script_dialog(self) -> None:
        path = self._ask("Export as script", "reproduce.py", SCRIPT_FILTER, save=True)
        if path:
            self.export_script(path)

    def open_dialog(self) -> None:
        path = self._ask("Open session", "", FILTER, save=False)
        if path:
            self.open(path)

    def _ask(self, caption: str, name: str, filter_: str, save: bool) -> str | None:
        start = str(Path(places.start_folder(self.window.settings)) / name)
        if save:
            path, _ = QFileDialog.getSaveFileName(self.window, caption, start, filter_)
        else:
            path, _ = QFileDialog.getOpenFileName(self.window, caption, start, filter_)
        if path:
            places.remember_folder(self.window.settings, path)
        return path or None

    # --- opening ---------------------------------------------------------------------------------
    def open(self, path: str | Path, confirm: Callable[[str], bool] | None = None) -> SessionRestore | None:
        """Open the session in ``path``; ``confirm(line)`` decides whether to go on when the model's files
        changed (default: a question dialog). Returns the restore under way (None: the file is not readable)."""
        try:
            state = session_file.read(path)
        except session_file.SessionFileError as exc:
            self.failed.emit(str(exc))
            return None
        ask = confirm or self._ask_changed
        restore = self.restore = SessionRestore(self.window, state, self)
        restore.finished.connect(self._finished)
        self.window.status.notice(f"Opening {Path(path).name}: checking the model's files…")

        def checked(message: str | None) -> None:
            if self.session.closed:
                return
            if message is not None:
                self.window.status.set_warning(message)
                if not ask(message):
                    restore.fail(message[0].upper() + message[1:] + ".")
                    return
            restore.start()

        background.run(session_file.model_changed, state, on_done=checked,
                       on_error=lambda failure: restore.fail(failure.message))
        return restore

    def _ask_changed(self, message: str) -> bool:
        answer = QMessageBox.question(self.window, "The model changed",
                                      f"{message[0].upper()}{message[1:]}.\n\nOpen the session on the model as it "
                                      "is now anyway?", QMessageBox.StandardButton.Open | QMessageBox.StandardButton.Cancel,
                                      QMessageBox.StandardButton.Cancel)
        return answer == QMessageBox.StandardButton.Open

    def _finished(self, state: Any, message: str) -> None:
        if message:
            self.failed.emit(message)
        else:
            self.window.status.notice(f"Reopened the session on {state.model_name or state.source}.")
            self.restored.emit(state)


class SessionRestore(QObject):
    """Puts one ``SessionState`` back, step by step (see the module docstring). ``finished(state, message)``:
    message is "" when it is all back, else why it stopped."""

    finished = Signal(object, str)

    def __init__(self, window: MainWindow, state: SessionState, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.window, self.session, self.state = window, window.session, state
        self.request_id = 0
        self.done = False
        self._pending_saes: list[str] = []
        self._listening: list[tuple[Any, Any]] = []  # (signal, slot) connected now

    def fail(self, message: str) -> None:
        self._end(message)

    def _listen(self, *pairs: tuple[Any, Any]) -> None:
        for signal, slot in pairs:
            signal.connect(slot)
            self._listening.append((signal, slot))

    def _stop(self, *slots: Any) -> None:
        for signal, slot in [pair for pair in self._listening if pair[1] in slots]:
            signal.disconnect(slot)
            self._listening.remove((signal, slot))

    def _end(self, message: str = "") -> None:
        if self.done:
            return
        self.done = True
        self._stop(*[slot for _signal, slot in self._listening])
        if not self.session.closed:
            self.finished.emit(self.state, message)

    def start(self) -> None:
        state, session = self.state, self.session
        if session.closed:
            return
        request = session.model_request
        same = (session.loaded is not None and str(session.source) == state.source and request is not None
                and (request.device, request.dtype) == (state.device, state.dtype))
        if same:
            self._model_ready(session.loaded)
            return
        self._listen((session.model_loaded, self._model_ready), (session.load_failed, self._load_failed))
        self.window.open_checkpoint(state.source, device=state.device, dtype=state.dtype)

    def _load_failed(self, message: str) -> None:
        self._end(f"Could not reopen the session's model {self.state.source}: {message}")

    def _model_ready(self, _loaded: Any) -> None:
        self._stop(self._model_ready, self._load_failed)
        self._pending_saes = list(self.state.saes)
        features = self.session.features
        self._listen((features.changed, self._sae_step), (features.failed, self._sae_failed))
        self._sae_step()

    def _sae_step(self) -> None:
        """Open the next SAE (on a worker); when all are open, go on."""
        if self.done:
            return
        if self._pending_saes:
            self.session.features.open(self._pending_saes.pop(0), allow_other_model=True)
            return
        self._stop(self._sae_step, self._sae_failed)
        self._trace()

    def _sae_failed(self, message: str) -> None:
        self._end(f"Could not reopen the session's SAE: {message}")

    def _trace(self) -> None:
        state, session = self.state, self.session
        saes = {str(sae.path): sae for sae in session.features.saes}
        if state.feature is not None and state.feature.get("sae") in saes:
            session.features.select(saes[state.feature["sae"]], int(state.feature["index"]))
        try:
            entries = [(session_file.intervention_from(r, saes), r.get("enabled", True)) for r in state.interventions]
        except ExplorerError as exc:
            self._end(f"Could not reopen the session's interventions: {exc}")
            return
        session.set_interventions([iv for iv, _ in entries])  # all on, then those that were off switched off
        for index, (_iv, enabled) in enumerate(entries):
            if not enabled:
                session.interventions.toggle(index, False)
        apply_settings(self.window, state)
        if state.conversation and session.conversation.available:  # through the template again, then traced
            self._listen((session.conversation.encoded, self._encoded), (session.conversation.failed, self._chat_failed))
            session.conversation.restore(state.conversation, state.panels.get("chat") or {})
            self.window.prompt_area.show_conversation(True)
            return
        self._listen((session.presenter.drawn, self._drawn))
        ids = state.token_ids
        encoded = session.loaded.encode(state.prompt)[0] if state.prompt else None
        if ids and ids != encoded:  # generated text, a conversation: exactly the ids traced
            self.request_id = session.trace_ids(state.prompt, ids)
        else:
            self.request_id = session.set_prompt(state.prompt)

    def _encoded(self, encoding: Any) -> None:
        self._stop(self._encoded, self._chat_failed)
        self.request_id = self.session.controller.latest_id  # the conversation's trace, asked for before this
        self._listen((self.session.presenter.drawn, self._drawn))
        ids = self.state.token_ids
        if ids and list(encoding.ids) != list(ids):
            self.window.status.set_warning("The conversation renders to other tokens than when the session was "
                                           "saved (the chat template changed?): its numbers may differ.")

    def _chat_failed(self, message: str) -> None:
        self._end(f"Could not reopen the session's conversation: {message}")

    def _drawn(self, frame: Frame) -> None:
        if self.done or frame.source.kind != PROMPT or frame.source.request_id < self.request_id:
            return  # an older trace (the new model's first one, the interventions' retrace), or not a prompt's
        self._stop(self._drawn)
        selection, saved = self.session.selection, self.state.selection
        if isinstance(saved.get("layer"), int) and isinstance(saved.get("head"), int):
            selection.set_layer_head(saved["layer"], saved["head"])
        selection.set_token(saved.get("token"))
        patching = panel_of(self.window, PatchingPanel)
        mode = (self.state.panels.get("patching") or {}).get("mode")
        if (patching is not None and mode in ("exact", "estimate") and patching.corrupt_edit.text()
                and patching.trace is self.session.trace):  # drawn on this trace (a hidden tab is not)
            patching.start()  # the grid the session showed, computed again
        self._end()
