"""File ▸ Get a model…: a real model from the Hugging Face Hub, only when the user presses Download.

The dialog lists laptop-sized models (``core.download.SUGGESTED``) with their size on disk and in memory,
or takes any repository id (and a GGUF file of it). Download asks the Hub what it will fetch (refusing a
repository that needs remote code, has no usable weights or does not fit on the disk, before any weight is
fetched), then fetches into the user's Hugging Face cache on a worker: a progress bar with bytes, speed and
time left, Cancel (the next Download resumes), one line for every failure. A gated repository's token is
asked for and kept like the NDIF key (this session, or the system's key store when remembered). Once done,
``chosen`` is what the window opens; the model is in File ▸ Open from Hugging Face cache from then on.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from PySide6.QtCore import QObject, QSettings, Qt, Signal
from PySide6.QtWidgets import (QAbstractItemView, QCheckBox, QDialog, QFormLayout, QLabel, QLineEdit, QTreeWidget,
                               QTreeWidgetItem, QVBoxLayout, QWidget)

from explorer.core.cancel import Cancel
from explorer.core.checkpoint.hub_cache import cache_dir
from explorer.core.download import SUGGESTED, Progress, download, plan_download
from explorer.ui.session import background
from explorer.ui.window.job_rows import add_job_rows, say
from explorer.ui.window.remote_key import HF_TOKEN_USER, KeyStore


def size_text(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:,.1f} {unit}"
    return f"{int(n)} B"


def progress_text(p: Progress) -> str:
    """'412.3 MB of 1.5 GB, 38.2 MB/s, about 29 s left (model.safetensors)'"""
    speed = f", {size_text(p.bytes_per_second)}/s" if p.bytes_per_second else ""
    left = p.seconds_left
    when = (f", about {left:,.0f} s left" if left < 120 else f", about {left / 60:,.0f} min left") \
        if left is not None and p.bytes_per_second else ""
    return f"{size_text(p.done_bytes)} of {size_text(p.total_bytes)}{speed}{when} ({p.file})"


class _Relay(QObject):
    """Carries the worker's progress to the GUI thread (a queued signal)."""

    progressed = Signal(object)


def fetch(repo_id: str, revision: str | None, gguf: str | None, token: str | None, relay: _Relay,
          cancel: Cancel) -> str:
    """The worker: plan (the refusals come here, before any weight), then download; the path to open."""
    plan = plan_download(repo_id, revision, gguf, token=token)
    relay.progressed.emit(("plan", plan))
    # a copy per report: the worker goes on counting while the GUI thread reads it
    return str(download(plan, progress=lambda p: relay.progressed.emit(dataclasses.replace(p)), cancel=cancel,
                        token=token))


class GetModelDialog(QDialog):
    """``chosen``: the folder or GGUF file to open once a download finished (None until then)."""

    finished_download = Signal(str)  # the path to open

    def __init__(self, settings: QSettings | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Get a model from the Hugging Face Hub")
        self.chosen: str | None = None
        self.tokens = KeyStore(settings or QSettings(), user=HF_TOKEN_USER, legacy_key=None)
        self.cancel: Cancel | None = None
        self.worker = None
        self.relay = _Relay(self)
        self.relay.progressed.connect(self._on_progress)
        layout = QVBoxLayout(self)
        intro = QLabel(f"Nothing is downloaded until you press Download. The files go to your Hugging Face "
                       f"cache ({cache_dir()}), where other tools find them too: only the configuration, the "
                       "safetensors weights and the tokenizer, never code.", self)
        intro.setWordWrap(True)
        layout.addWidget(intro)
        self.list = QTreeWidget(self)
        self.list.setHeaderLabels(["model", "on disk", "in memory", "good for"])
        self.list.setRootIsDecorated(False)
        self.list.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        for s in SUGGESTED:
            item = QTreeWidgetItem([s.title + (" (gated)" if s.gated else ""), "≈ " + size_text(s.disk_bytes),
                                    "≈ " + size_text(s.memory_bytes), s.good_for])
            item.setData(0, Qt.ItemDataRole.UserRole, s.repo_id)
            item.setToolTip(0, s.repo_id + ("\nGated: accept its licence on its Hub page, then give a token."
                                            if s.gated else ""))
            item.setToolTip(3, s.good_for)
            self.list.addTopLevelItem(item)
        for column, width in enumerate((230, 80, 90)):
            self.list.setColumnWidth(column, width)
        layout.addWidget(self.list, 1)
        form = QFormLayout()
        self.repo = QLineEdit(self)
        self.repo.setPlaceholderText("org/name, e.g. HuggingFaceTB/SmolLM2-135M-Instruct")
        self.revision = QLineEdit(self)
        self.revision.setPlaceholderText("main")
        self.gguf = QLineEdit(self)
        self.gguf.setPlaceholderText("optional: one .gguf file of the repository")
        self.token = QLineEdit(self)
        self.token.setEchoMode(QLineEdit.EchoMode.Password)
        self.token.setPlaceholderText("only for gated or private models (else $HF_TOKEN or `hf auth login`'s)")
        self.token.setText(self.tokens.initial())
        self.remember = QCheckBox("Remember the token in the system's key store", self)
        form.addRow("Repository", self.repo)
        form.addRow("Revision", self.revision)
        form.addRow("GGUF file", self.gguf)
        form.addRow("Token", self.token)
        form.addRow("", self.remember)
        layout.addLayout(form)
        self.bar, self.status, self.download_button, self.cancel_button, self.close_button = add_job_rows(
            layout, self, "Download", "Cancel download")
        self.download_button.clicked.connect(self.start)
        self.cancel_button.clicked.connect(self.stop)
        self.close_button.clicked.connect(self.reject)
        self.list.itemSelectionChanged.connect(self._on_pick)
        self.list.itemDoubleClicked.connect(lambda *_: self.start())
        self.resize(900, 560)

    # ------------------------------------------------------------------------------------------
    def _on_pick(self) -> None:
        items = self.list.selectedItems()
        if items:
            self.repo.setText(items[0].data(0, Qt.ItemDataRole.UserRole))
            self.gguf.clear()

    def busy(self) -> bool:
        return self.worker is not None

    def start(self) -> None:
        """Download (or resume) what the fields name, on a worker."""
        if self.busy():
            return
        repo = self.repo.text().strip()
        if not repo:
            self._say("Pick a model above or type a repository id (org/name).", error=True)
            return
        token = self.token.text().strip()
        problem = self.tokens.keep(token, self.remember.isChecked()) if token or self.remember.isChecked() else ""
        self.cancel = Cancel()
        self.bar.setValue(0)
        self._say(f"Asking the Hub about {repo}…" + (f" ({problem})" if problem else ""))
        self._set_running(True)
        self.worker = background.run(fetch, repo, self.revision.text().strip() or None,
                                     self.gguf.text().strip() or None, token or None, self.relay, self.cancel,
                                     on_done=self._on_done, on_error=self._on_error, on_cancelled=self._on_cancelled)

    def stop(self) -> None:
        """Cancel: the worker stops at its next chunk; what arrived is kept for the next Download."""
        if self.cancel is not None:
            self.cancel.set()
            self._say("Stopping…")

    def _on_progress(self, item: object) -> None:
        if isinstance(item, tuple) and item[0] == "plan":
            plan = item[1]
            missing = plan.missing_bytes()
            self._say(f"{plan.repo_id}: {len(plan.files)} files, {size_text(plan.total_bytes)}"
                      + (f" ({size_text(missing)} still to fetch)" if missing != plan.total_bytes else "") + "…")
            return
        if isinstance(item, Progress) and self.busy():
            self.bar.setValue(int(1000 * item.done_bytes / item.total_bytes) if item.total_bytes else 1000)
            self._say(progress_text(item))

    def _on_done(self, path: str) -> None:
        self.worker = None
        self._set_running(False)
        self.bar.setValue(1000)
        self.chosen = path
        self._say(f"Done: {Path(path).name if path.endswith('.gguf') else self.repo.text().strip()} is in the cache; "
                  "opening it.")
        self.finished_download.emit(path)
        self.accept()

    def _on_error(self, failure: background.Failure) -> None:
        self.worker = None
        self._set_running(False)
        self._say(failure.message, error=True)

    def _on_cancelled(self) -> None:  # the user's Cancel (a DownloadCancelled)
        self.worker = None
        self._set_running(False)
        self.download_button.setText("Resume")
        self._say("Stopped. What was fetched is kept: Resume goes on from there.")

    def _set_running(self, running: bool) -> None:
        self.download_button.setEnabled(not running)
        self.cancel_button.setEnabled(running)
        for field in (self.repo, self.revision, self.gguf, self.token, self.list):
            field.setEnabled(not running)

    def _say(self, text: str, error: bool = False) -> None:
        say(self.status, text, error)

    def reject(self) -> None:
        """Closing the dialog stops a running download (it resumes next time)."""
        self.stop()
        super().reject()
