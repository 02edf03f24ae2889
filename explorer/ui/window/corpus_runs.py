"""Corpus runs in the window: File ▸ Run over a corpus… (``corpus_dialog.py``), File ▸ Open corpus run…, and the
last run of each model opened again with it.

Opening a run goes through the session's ``CorpusState`` (its check that the run was made with the open model
runs on a worker); a run that does not match is one line: a warning for a run the user chose, the status bar
for one reopened by itself. The run open for a model is remembered in the settings (``corpus/runs``: model ->
database) and opened again whenever that model is loaded, if the file is still there.

The Head finder's dock is a tab beside the generation pane (as the Journey's is): selecting a head there shows
it in the Attention panel beside it. A run the user opened brings it to the front.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, QTimer
from PySide6.QtWidgets import QFileDialog, QMessageBox

from explorer.ui.window.corpus_dialog import RUNS_FOLDER, CorpusRunDialog

KEY = "corpus/runs"
MAX_REMEMBERED = 64
OPENED_MS = 12_000


class CorpusRuns(QObject):
    """What the window adds for corpus runs (``window.corpus_runs``); ``dialog``: the run dialog, once opened."""

    def __init__(self, window: Any) -> None:
        super().__init__(window)
        self.window, self.session, self.settings = window, window.session, window.settings
        self.state = self.session.corpus
        self.dialog: CorpusRunDialog | None = None
        self._asked: str | None = None  # a run the user chose (its failure is a warning, not a status line)
        self.state.changed.connect(self._changed)
        self.state.failed.connect(self._failed)
        self.session.model_loaded.connect(lambda _loaded: self.reopen_last())
        finder, side = window.dock("head_finder"), getattr(window, "generation_dock", None)
        if finder is not None and side is not None:  # once the window is shown (see timeline_bar's Journey)
            QTimer.singleShot(0, window, lambda: (window.tabifyDockWidget(side, finder), side.raise_()))

    # --- the menu's verbs ---------------------------------------------------------------------------
    def run_dialog(self) -> CorpusRunDialog | None:
        """File ▸ Run over a corpus…: the dialog (one at a time; it does not block the window)."""
        if self.session.loaded is None:
            QMessageBox.information(self.window, "Run over a corpus", "Open a model first: the corpus run reads it.")
            return None
        if self.dialog is None:  # kept: a run under way goes on while it is closed, and shows again here
            self.dialog = CorpusRunDialog(self.session, self.window)
            self.dialog.finished_run.connect(self.open)
        self.dialog.show()
        self.dialog.raise_()
        return self.dialog

    def open_dialog(self) -> None:
        """File ▸ Open corpus run…: a database made by a run of this model."""
        start = self._folder()
        path, _ = QFileDialog.getOpenFileName(self.window, "Open corpus run", start, "Corpus runs (*.db);;All files (*)")
        if path:
            self.open(path)

    def open(self, path: str) -> None:
        """Open the run at ``path`` for the open model (checked on a worker)."""
        self._asked = str(Path(path))
        self.state.open(path)

    # --- remembering the last run of each model --------------------------------------------------------
    def _model_key(self) -> str | None:
        loaded = self.session.loaded
        return None if loaded is None else str(self.session.source or loaded.name)

    def remembered(self) -> dict[str, str]:
        try:
            value = json.loads(str(self.settings.value(KEY, "{}") or "{}"))
        except ValueError:
            return {}
        return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}

    def _remember(self, path: Path) -> None:
        key = self._model_key()
        if key is None:
            return
        runs = {k: v for k, v in self.remembered().items() if k != key}
        runs[key] = str(path)
        self.settings.setValue(KEY, json.dumps(dict(list(runs.items())[-MAX_REMEMBERED:])))

    def reopen_last(self) -> None:
        """The run last open for this model, opened again (quietly: a problem is a status-bar line)."""
        key = self._model_key()
        path = self.remembered().get(key) if key is not None else None
        if path and Path(path).is_file() and (self.state.path is None or Path(path) != self.state.path):
            self._asked = None
            self.state.open(path)

    # --- what the state says --------------------------------------------------------------------------
    def _changed(self) -> None:
        run = self.state.run
        if run is None:
            return
        self._remember(run.path)
        info = run.info
        self.window.status.notice(f"Corpus run {run.path.name}: {info.model} over {info.corpus}, "
                                  f"{info.tokens:,} tokens", OPENED_MS)
        finder = self.window.dock("head_finder")
        if self._asked is not None and finder is not None and self.state.has_heads():
            finder.show()
            finder.raise_()  # a run the user chose: its heads ranked, beside the panels
        self._asked = None

    def _failed(self, line: str) -> None:
        if self._asked is not None:
            self._asked = None
            QMessageBox.warning(self.window, "Open corpus run", line)
        else:
            self.window.status.notice(line, OPENED_MS)

    def _folder(self) -> str:
        if self.state.path is not None:
            return str(self.state.path.parent)
        from explorer.core.paths import user_data_dir

        folder = user_data_dir() / RUNS_FOLDER
        return str(folder if folder.is_dir() else Path.home())

    def shutdown(self) -> None:
        if self.dialog is not None:
            self.dialog.shutdown()

