"""File ▸ Run over a corpus…: the open model reads a corpus and every unit's evidence goes to a database.

The dialog chooses the corpus (the bundled sample, a text file, a folder of them, JSON Lines or Parquet), how
many tokens to read, the window, an open SAE whose features to keep too, and the database (named after the
model, the corpus and the SAE in the user's data folder unless another is given). Run starts
``explorer.core.corpus.run_corpus`` on a worker (``background.run``): a progress bar with tokens, tokens per
second and the time left; Cancel stops after the block under way and keeps every finished batch; Resume runs
the same settings into the same database and goes on where it stopped (also after a crash: the button reads
Resume whenever the database holds an unfinished run). The dialog does not block the window. When the run
is done, ``finished_run(path)`` asks the window to open it.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import (QButtonGroup, QComboBox, QDialog, QFileDialog, QFormLayout, QHBoxLayout, QLabel,
                               QLineEdit, QPushButton, QRadioButton, QSpinBox, QVBoxLayout, QWidget)

from explorer.core.cancel import Cancel
from explorer.core.corpus.read import open_run
from explorer.core.corpus.reading import SAMPLE, Corpus, CorpusError
from explorer.core.paths import user_data_dir
from explorer.ui.session import background
from explorer.ui.window.job_rows import add_job_rows, say

if TYPE_CHECKING:
    from explorer.ui.session.session import Session

DEFAULT_TOKENS = 100_000
RUNS_FOLDER = "corpus-runs"


class _Relay(QObject):
    """Carries the worker's progress to the GUI thread (a queued signal)."""

    progressed = Signal(object)


def corpus_run(loaded: Any, corpus: str, text_field: str, out: str, sae: Any, tokens: int | None, window: int,
               relay: _Relay, cancel: Cancel, batch: int | None = None) -> Any:
    """The worker: ``run_corpus`` with its progress carried by ``relay``; its ``RunSummary``."""
    from explorer.core.corpus.run import run_corpus

    Path(out).parent.mkdir(parents=True, exist_ok=True)
    return run_corpus(loaded, Corpus(corpus, text_field), out, sae, tokens, 0, window, batch,
                      progress=relay.progressed.emit, cancel=cancel)


def default_out(model: str, corpus: str, sae: Any, text_field: str = "text") -> Path:
    """The database a run of ``model`` over ``corpus`` (with ``sae``) goes to by default (``run.default_name``)."""
    from explorer.core.corpus.run import default_name

    return user_data_dir() / RUNS_FOLDER / default_name(model, Corpus(corpus, text_field), sae)


def resumable(path: str | Path, tokens: int | None = None) -> int:
    """Tokens an unfinished run at ``path`` holds, short of ``tokens`` (None: the whole corpus); 0: no run there,
    or one that read them all."""
    try:
        with open_run(path) as run:
            info = run.info
            return 0 if info.complete or (tokens is not None and info.tokens >= tokens) else info.tokens
    except (CorpusError, OSError, sqlite3.Error):
        return 0


class CorpusRunDialog(QDialog):
    """The run's settings, its progress, Run / Resume, Cancel. ``summary``: the last run's ``RunSummary``."""

    finished_run = Signal(str)  # a finished run's database: the window opens it

    def __init__(self, session: Session, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Run the model over a corpus")
        self.session = session
        self.task: background.Task | None = None
        self.cancel: Cancel | None = None
        self.summary: Any = None
        self.batch: int | None = None  # windows per batch (None: run_corpus's default for the device)
        self._out_edited = False
        self.relay = _Relay()  # no Qt parent: a run still going when the window closes reports to a live object
        self.relay.progressed.connect(self._on_progress)
        layout = QVBoxLayout(self)
        intro = QLabel("The model reads the corpus in windows and keeps, for every neuron, feature and expert, the "
                       "contexts where it fires hardest and its histogram, and for every head its scores over the "
                       "corpus. The neuron, feature and expert views and the Head finder show them.")
        intro.setWordWrap(True)
        layout.addWidget(intro)
        form = QFormLayout()
        self.sample = QRadioButton("the bundled sample (about 3 MB: plays, sonnets, Python docs and code, the Rust "
                                   "book; licences in resources/corpus)")
        self.own = QRadioButton("a file or folder:")
        group = QButtonGroup(self)
        group.addButton(self.sample)
        group.addButton(self.own)
        self.sample.setChecked(True)
        self.path = QLineEdit()
        self.path.setPlaceholderText(".txt, .md, .jsonl, .parquet, or a folder of them")
        browse_file, browse_folder = QPushButton("File\u2026"), QPushButton("Folder\u2026")
        browse_file.clicked.connect(lambda: self._browse(folder=False))
        browse_folder.clicked.connect(lambda: self._browse(folder=True))
        own_row = QHBoxLayout()
        for w, stretch in ((self.own, 0), (self.path, 1), (browse_file, 0), (browse_folder, 0)):
            own_row.addWidget(w, stretch)
        form.addRow("Corpus", self.sample)
        form.addRow("", own_row)
        self.text_field = QLineEdit("text")
        self.text_field.setToolTip("The field holding each document's text in JSON Lines and Parquet rows")
        form.addRow("Text field", self.text_field)
        self.tokens = QSpinBox()
        self.tokens.setRange(0, 2_000_000_000)
        self.tokens.setSingleStep(10_000)
        self.tokens.setGroupSeparatorShown(True)
        self.tokens.setSpecialValueText("the whole corpus")
        self.tokens.setValue(DEFAULT_TOKENS)
        form.addRow("Tokens to read", self.tokens)
        self.window_size = QSpinBox()
        self.window_size.setToolTip("Tokens per window: the model reads the corpus this many tokens at a time")
        form.addRow("Window", self.window_size)
        self.sae_box = QComboBox()
        self.sae_box.setToolTip("Keep every feature of an open SAE too (File \u25b8 Open SAE\u2026 opens one)")
        form.addRow("SAE", self.sae_box)
        self.out = QLineEdit()
        save_as = QPushButton("Save as\u2026")
        save_as.clicked.connect(self._ask_out)
        out_row = QHBoxLayout()
        out_row.addWidget(self.out, 1)
        out_row.addWidget(save_as)
        form.addRow("Database", out_row)
        layout.addLayout(form)
        self.bar, self.status, self.run_button, self.cancel_button, self.close_button = add_job_rows(
            layout, self, "Run", "Cancel run")
        self.run_button.clicked.connect(self.start)
        self.cancel_button.clicked.connect(self.stop)
        self.close_button.clicked.connect(self.close)
        self.out.textEdited.connect(lambda _t: self._edited_out())
        for signal in (self.sample.toggled, self.path.editingFinished, self.sae_box.currentIndexChanged,
                       self.text_field.editingFinished):
            signal.connect(lambda *_: self._suggest_out())
        self.tokens.valueChanged.connect(lambda _v: self._update_button())
        self.loaded: Any = None
        self.model_changed()
        session.model_loaded.connect(lambda _loaded: self.model_changed())
        session.features.changed.connect(self.model_changed)
        self.resize(760, 430)

    # --- the settings -------------------------------------------------------------------------------
    def model_changed(self) -> None:
        """The window's model or its SAEs changed: the window's range, the SAEs and the database follow (a run under
        way goes on with the model it started with)."""
        loaded = self.session.loaded
        if loaded is not self.loaded:
            self.loaded, self._out_edited = loaded, False  # a database named for the old model is not this one's
            n_ctx = loaded.config.n_ctx if loaded is not None else 256
            self.window_size.setRange(2, n_ctx)
            self.window_size.setValue(min(n_ctx, 256))
        current = self.sae()
        self.sae_box.blockSignals(True)
        self.sae_box.clear()
        self.sae_box.addItem("none", None)
        for sae in self.session.features.saes:
            self.sae_box.addItem(f"{sae.path.name} ({sae.hook.hook_name}, {sae.d_sae:,} features)", sae)
        self.sae_box.setCurrentIndex(max(0, self.sae_box.findData(current)) if current is not None else 0)
        self.sae_box.blockSignals(False)
        self.sae_box.setEnabled(self.sae_box.count() > 1)
        self._suggest_out()

    def corpus_spec(self) -> str:
        return SAMPLE if self.sample.isChecked() else self.path.text().strip()

    def sae(self) -> Any:
        return self.sae_box.currentData() if self.sae_box.count() else None

    def set_corpus(self, path: str | None) -> None:
        """The corpus to read: a file or folder, or None for the bundled sample."""
        (self.own if path else self.sample).setChecked(True)
        self.path.setText(path or "")
        self._suggest_out()

    def set_out(self, path: str | Path) -> None:
        self.out.setText(str(path))
        self._edited_out()

    def _browse(self, folder: bool) -> None:
        chosen = (QFileDialog.getExistingDirectory(self, "A folder of texts") if folder else
                  QFileDialog.getOpenFileName(self, "A corpus file", "", "Texts (*.txt *.md *.rst *.jsonl *.ndjson "
                                              "*.parquet *.gz);;All files (*)")[0])
        if chosen:
            self.set_corpus(chosen)

    def _ask_out(self) -> None:
        chosen, _ = QFileDialog.getSaveFileName(self, "The run's database", self.out.text(), "Corpus runs (*.db)")
        if chosen:
            self.set_out(chosen if chosen.endswith(".db") else chosen + ".db")

    def _edited_out(self) -> None:
        self._out_edited = True
        self._update_button()

    def _suggest_out(self) -> None:
        """The default database for the model, corpus and SAE, unless the user named one."""
        loaded, spec = self.session.loaded, self.corpus_spec()
        if not self._out_edited and loaded is not None and spec:
            try:
                self.out.setText(str(default_out(loaded.name, spec, self.sae(), self.text_field.text() or "text")))
            except CorpusError as exc:
                self._say(str(exc), error=True)
        self._update_button()

    def _update_button(self) -> None:
        out = self.out.text().strip()
        held = resumable(out, self.tokens.value() or None) if out and not self.busy() else 0
        self.run_button.setText("Resume" if held else "Run")
        self.run_button.setToolTip(f"Go on from the {held:,} tokens this database holds" if held else
                                   "Start the run (a database of the same settings is resumed)")

    # --- running ------------------------------------------------------------------------------------------
    def busy(self) -> bool:
        return self.task is not None

    def start(self) -> None:
        """Run (or resume) with the settings shown, on a worker."""
        loaded = self.session.loaded
        if self.busy():
            return
        if loaded is None:
            return self._say("Open a model first: the corpus run reads it.", error=True)
        spec, out = self.corpus_spec(), self.out.text().strip()
        if not spec or not out:
            return self._say("Choose a corpus and a database.", error=True)
        self.cancel, self.summary = Cancel(), None
        held = resumable(out, self.tokens.value() or None)
        self.bar.setValue(0)
        self._say(f"Resuming after {held:,} tokens\u2026" if held else "Reading the corpus\u2026")
        self._set_running(True)
        tokens = self.tokens.value() or None
        self.task = background.run(corpus_run, loaded, spec, self.text_field.text() or "text", out, self.sae(), tokens,
                                   self.window_size.value(), self.relay, self.cancel, self.batch,
                                   on_done=self._on_done, on_error=self._on_error, on_cancelled=self._on_stopped)

    def stop(self) -> None:
        """Cancel: the run stops after the block under way; every finished batch is kept for Resume."""
        if self.cancel is not None and self.busy():
            self.cancel.set()
            self._say("Stopping after the block under way\u2026")

    def _on_progress(self, progress: Any) -> None:
        if not self.busy():
            return
        target = progress.target or 0
        self.bar.setValue(min(1000, int(1000 * progress.tokens / target)) if target else 0)
        self._say(progress.line())

    def _on_done(self, summary: Any) -> None:
        self.task, self.summary = None, summary
        self._set_running(False)
        if summary.cancelled:
            self._say(f"Stopped: {summary.tokens:,} tokens are kept in {summary.path.name}. Resume goes on from there.")
            return
        self.bar.setValue(1000)
        self._say(f"Done: {summary.tokens:,} tokens in {summary.windows:,} windows, in {summary.path}. "
                  "Opened in the window.")
        self.finished_run.emit(str(summary.path))

    def _on_error(self, failure: background.Failure) -> None:
        self.task = None
        self._set_running(False)
        self._say(failure.message, error=True)

    def _on_stopped(self) -> None:
        self.task = None
        self._set_running(False)
        self._say("Stopped. Every finished batch is kept: Resume goes on from there.")

    def _set_running(self, running: bool) -> None:
        self.run_button.setEnabled(not running)
        self.cancel_button.setEnabled(running)
        self._update_button()

    def _say(self, text: str, error: bool = False) -> None:
        say(self.status, text, error)

    def shutdown(self) -> None:
        """The window closes: a run under way stops after its block (it resumes next time); nothing it still
        sends reaches this closed dialog."""
        self.stop()
        if self.task is not None:
            self.task.release()
            self.task = None
