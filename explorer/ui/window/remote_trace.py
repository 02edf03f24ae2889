"""Models > Trace a remote model (NDIF)…: the prompt traced through nnsight, on an NDIF server or on this machine.

The dialog asks for the model (a Hugging Face id, or a local folder), the NDIF host (kept in the settings),
the API key (never in the settings file: kept for the session, falling back to ``NDIF_API_KEY``, stored in
the system's key store only when "Remember the key" is ticked; ``remote_key``) and whether it runs remotely. "Estimate"
plans the trace in the background (``core.remote.job.plan_job``: config.json, the tokens) and says
what it will transfer; "Start trace" then streams the compact set a few layers a request
(``run_job``), the progress bar counting layers as they arrive. The result is a model-less Trace,
shown as File > Open trace shows one (``TraceFileOpener.show``). Anything that goes wrong is one line
in the dialog, and the current model stays as it was: nothing changes until the trace is complete.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, QSettings, Signal
from PySide6.QtWidgets import (QCheckBox, QDialog, QDialogButtonBox, QFormLayout, QLabel, QLineEdit, QProgressBar,
                               QPushButton, QVBoxLayout, QWidget)

from explorer.ui.session import background
from explorer.ui.session.frame import REMOTE
from explorer.ui.window.remote_key import LEGACY_KEY, KeyStore

MODEL_KEY, HOST_KEY, API_KEY, REMOTE_KEY = "remote/model", "remote/host", LEGACY_KEY, "remote/remote"
DEFAULT_MODEL = "meta-llama/Llama-3.1-70B"


class RemoteTraceDialog(QDialog):
    """The form, the estimate and the progress of one remote trace; ``traced(trace, label)`` when it is complete.

    ``backend_for(lm)``, if given, makes each request's nnsight backend (tests: the network replaced);
    ``keys`` keeps the API key (the window's, so a key typed once lasts the session)."""

    traced = Signal(object, str)

    def __init__(self, settings: QSettings, prompt: str, parent: QWidget | None = None,
                 backend_for: Callable[[Any], Any] | None = None, layers_per_request: int = 4,
                 keys: KeyStore | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Trace a remote model (NDIF)")
        self.settings, self.prompt = settings, prompt
        self.keys = KeyStore(settings) if keys is None else keys
        self.backend_for, self.layers_per_request = backend_for, layers_per_request
        self.job: Any = None  # the plan of the fields as they are (core.remote.job.RemoteJob)
        self.worker: Any = None
        self.stopped = False
        layout = QVBoxLayout(self)
        intro = QLabel("The prompt is traced through nnsight: on an NDIF server (the model is named by its Hugging "
                       "Face id; only its config and tokenizer are read here), or on this machine from a local "
                       "folder. The result opens like a trace file: activations, no weights.", self)
        intro.setWordWrap(True)
        layout.addWidget(intro)
        form = QFormLayout()
        from explorer.core.remote.backend import DEFAULT_HOST

        self.model = QLineEdit(str(settings.value(MODEL_KEY, DEFAULT_MODEL)), self)
        self.host = QLineEdit(str(settings.value(HOST_KEY, os.environ.get("NDIF_HOST") or DEFAULT_HOST)), self)
        self.api_key = QLineEdit(self.keys.initial(), self)
        self.api_key.setEchoMode(QLineEdit.EchoMode.Password)
        self.api_key.setPlaceholderText("from NDIF_API_KEY" if os.environ.get("NDIF_API_KEY") else "your NDIF key")
        self.remote = QCheckBox("on the NDIF server (off: nnsight on this machine, from a local folder)", self)
        self.remote.setChecked(str(settings.value(REMOTE_KEY, "true")).lower() == "true")
        form.addRow("Model", self.model)
        form.addRow("NDIF host", self.host)
        form.addRow("API key", self.api_key)
        usable, why = self.keys.available()
        self.remember_key = QCheckBox("Remember the key (in the system's key store)", self)
        self.remember_key.setEnabled(usable)
        self.remember_key.setChecked(usable and bool(self.keys.stored()))
        self.remember_key.setToolTip("Stored with the keyring package, never in the settings file" if usable else why)
        form.addRow("", self.remember_key)
        self.legacy_note = QLabel(self)  # a key an earlier version left in plain text in the settings file
        self.legacy_note.setWordWrap(True)
        self.move_key_button = QPushButton("Move the key out of the settings file", self)
        self.move_key_button.clicked.connect(self.move_legacy_key)
        form.addRow("", self.remote)
        shown = prompt if len(prompt) <= 80 else prompt[:77] + "…"
        form.addRow("Prompt", QLabel(shown or "(empty: type a prompt first)", self))
        layout.addLayout(form)
        layout.addWidget(self.legacy_note)
        layout.addWidget(self.move_key_button)
        self._show_legacy(usable)
        self.plan = QLabel("Estimate first: it says what the trace will transfer.", self)
        self.plan.setWordWrap(True)
        layout.addWidget(self.plan)
        self.progress = QProgressBar(self)
        self.progress.setFormat("%v of %m layers")
        self.progress.setValue(0)
        layout.addWidget(self.progress)
        self.status = QLabel("", self)
        self.status.setObjectName("remote_status")
        self.status.setWordWrap(True)
        layout.addWidget(self.status)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close, parent=self)
        self.estimate_button = QPushButton("Estimate", self)
        self.start_button = QPushButton("Start trace", self)
        self.start_button.setEnabled(False)
        self.buttons.addButton(self.estimate_button, QDialogButtonBox.ButtonRole.ActionRole)
        self.buttons.addButton(self.start_button, QDialogButtonBox.ButtonRole.ActionRole)
        self.buttons.rejected.connect(self.reject)
        layout.addWidget(self.buttons)
        self.estimate_button.clicked.connect(self.estimate)
        self.start_button.clicked.connect(self.start)
        for field in (self.model, self.host, self.api_key):
            field.textChanged.connect(self._forget_plan)
        self.remote.toggled.connect(self._forget_plan)
        self.resize(620, max(320, self.sizeHint().height()))

    # --- the key -------------------------------------------------------------------------------------------
    def _show_legacy(self, usable: bool) -> None:
        legacy = bool(self.keys.legacy())
        self.legacy_note.setVisible(legacy)
        self.move_key_button.setVisible(legacy)
        if legacy:
            where = "to the system's key store" if usable else \
                "into memory for this session only (no usable key store here), so you will type it again next time"
            self.legacy_note.setText("An earlier version saved your API key in plain text in the settings file "
                                     f"(shown above). Moving it puts it {where}, then removes it from that file.")

    def move_legacy_key(self) -> None:
        """The user confirmed: the old plain-text key leaves the settings file (``KeyStore.move_legacy``)."""
        usable, _ = self.keys.available()
        said = self.keys.move_legacy()
        if not self.keys.legacy():
            self.api_key.setText(self.keys.session)
            self.remember_key.setChecked(usable)
        self._show_legacy(usable)
        self.status.setText(said)

    # --- the plan ------------------------------------------------------------------------------------------
    def _forget_plan(self, *_: object) -> None:
        self.job = None
        self.start_button.setEnabled(False)
        self.plan.setText("Estimate first: it says what the trace will transfer.")

    def _settings(self) -> Any:
        from explorer.core.remote.backend import RemoteSettings

        return RemoteSettings.resolve(self.host.text().strip() or None, self.api_key.text().strip() or None)

    def estimate(self) -> None:
        """Plan the trace in the background: config.json, the tokens, the bytes to come back."""
        from explorer.core.remote.job import plan_job

        self._busy("Reading the model's config and tokenizer…")
        try:
            settings = self._settings() if self.remote.isChecked() else None
        except Exception as exc:  # noqa: BLE001 - a bad host: one line
            return self._failed(background.one_line(exc))
        self._run(plan_job, (self.model.text(), self.prompt, self.remote.isChecked(), settings),
                  self._planned, None)

    def _planned(self, job: Any) -> None:
        self.job = job
        self.plan.setText(job.summary())
        self.progress.setRange(0, job.cfg.n_layers)
        self.progress.setValue(0)
        self._idle("")
        self.start_button.setEnabled(True)

    # --- the trace -----------------------------------------------------------------------------------------
    def start(self) -> None:
        """Stream the compact set; each request's layers move the progress bar."""
        from explorer.core.remote.job import run_job

        if self.job is None:
            return
        problem = self._remember()
        self._busy("Tracing: the first layers are on their way…" + (f" ({problem})" if problem else ""))
        self._run(run_job, (self.job, self.layers_per_request, self.backend_for, lambda: self.stopped),
                  self._done, self._arrived)

    def _arrived(self, step: tuple[int, int]) -> None:
        done, total = step
        self.progress.setRange(0, total)
        self.progress.setValue(done)
        self.status.setText(f"layer {done} of {total} arrived")

    def _done(self, trace: Any) -> None:
        self._idle("")
        job, self.job = self.job, None
        label = f"{'NDIF' if job.remote else 'nnsight'}: {job.source}"
        self.traced.emit(trace, label)
        self.accept()

    # --- workers -------------------------------------------------------------------------------------------
    def _run(self, func: Callable[..., Any], args: tuple, on_done: Callable[[Any], None],
             on_yield: Callable[[Any], None] | None) -> None:
        self.worker = background.run(func, *args, on_yield=on_yield,
                                     on_done=lambda value: None if self.stopped else on_done(value),
                                     on_error=lambda failure: None if self.stopped else self._failed(failure.message))

    def _busy(self, text: str) -> None:
        self.status.setText(text)
        self.estimate_button.setEnabled(False)
        self.start_button.setEnabled(False)

    def _idle(self, text: str) -> None:
        self.worker = None
        self.status.setText(text)
        self.estimate_button.setEnabled(True)

    def _failed(self, message: str) -> None:
        self._idle(message)
        self.start_button.setEnabled(self.job is not None)

    def _remember(self) -> str:
        self.settings.setValue(MODEL_KEY, self.model.text().strip())
        self.settings.setValue(HOST_KEY, self.host.text().strip())
        self.settings.setValue(REMOTE_KEY, "true" if self.remote.isChecked() else "false")
        return self.keys.keep(self.api_key.text().strip(), self.remember_key.isChecked())

    def done(self, result: int) -> None:  # noqa: D401 - Qt's name: closing stops a running trace at its next request
        self.stopped = self.worker is not None
        super().done(result)


class RemoteTraceOpener(QObject):
    """Opens the dialog from Models > Trace a remote model (NDIF)… and shows its trace as a trace file is shown."""

    def __init__(self, settings: QSettings, prompt_text: Callable[[], str], show: Callable[..., None],
                 menus: Any, parent: QWidget) -> None:
        super().__init__(parent)
        self.settings, self.prompt_text, self.show, self.parent_widget = settings, prompt_text, show, parent
        self.dialog: RemoteTraceDialog | None = None
        self.keys = KeyStore(settings)  # the API key for this window's session
        menus.remote_chosen.connect(lambda: self.open())  # ModelMenus' entry

    def open(self, backend_for: Callable[[Any], Any] | None = None) -> RemoteTraceDialog:
        self.dialog = RemoteTraceDialog(self.settings, self.prompt_text(), self.parent_widget, backend_for,
                                        keys=self.keys)
        self.dialog.traced.connect(lambda trace, label: self.show(trace, label, None, REMOTE))
        self.dialog.show()
        return self.dialog
