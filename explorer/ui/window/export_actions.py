"""File > Export trace… and File > Export attention maps… for the main window.

Both run in worker threads. The attention maps (one PNG, NPY and CSV per head: 144 heads for GPT-2
small) go into a new subfolder named after the model and the prompt's length, with a progress dialog
whose Cancel stops the worker before the next head. The dialogs start in the last export folder and
the status bar says what was written where.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFileDialog, QMessageBox, QProgressDialog

from explorer.ui.export.folders import last_folder, new_subfolder, remember, tell
from explorer.ui.session.workers import run_in_background

if TYPE_CHECKING:
    from explorer.ui.window.main_window import MainWindow


def export_trace(window: MainWindow) -> None:
    """Ask for a .npz path and write the current trace there in a worker (it derives every head)."""
    trace = window.trace
    if trace is None:
        return
    path, _ = QFileDialog.getSaveFileName(window, "Export trace", str(Path(last_folder(window)) / "trace.npz"),
                                          "NumPy archive (*.npz)")
    if not path:
        return
    remember(window, Path(path).parent)
    from explorer.core.export import write_trace_npz

    tell(window, f"Writing {path}…")
    run_in_background(write_trace_npz, trace, path,
                      on_done=lambda _: tell(window, f"Wrote the trace ({trace.n_tokens} tokens) to {path}"),
                      on_error=lambda exc: QMessageBox.warning(window, "Export failed", str(exc)))


class AttentionMapsExport:
    """One running export: the worker, its progress dialog and its Cancel (``cancel`` is the event
    the worker checks before each head). ``finished(message)`` is called on the GUI thread at the end."""

    def __init__(self, window: Any, trace: Any, folder: Path) -> None:
        from superqt.utils import create_worker

        from explorer.ui.export.attention_maps import write_attention_maps

        self.window, self.folder = window, folder
        self.cancel = threading.Event()
        self.total = trace.config.n_layers * trace.config.n_heads
        self.done = 0
        self.message = ""
        self.dialog = QProgressDialog(f"Writing {self.total} attention maps to\n{folder}", "Cancel", 0, self.total,
                                      window)
        self.dialog.setWindowTitle("Export attention maps")
        self.dialog.setWindowModality(Qt.WindowModality.WindowModal)
        self.dialog.setMinimumDuration(300)
        self.dialog.setAutoClose(False)
        self.dialog.setAutoReset(False)
        self.dialog.canceled.connect(self.cancel.set)
        self.worker = create_worker(write_attention_maps, trace, folder, None, self.cancel,
                                    _start_thread=False, _ignore_errors=True)
        self.worker.yielded.connect(self._on_progress)
        self.worker.errored.connect(self._on_error)
        self.worker.finished.connect(self._on_finished)
        self._error: str | None = None

    def start(self) -> None:
        self.dialog.setValue(0)
        self.worker.start()

    def _on_progress(self, progress: Any) -> None:
        self.done = progress.done
        self.dialog.setValue(progress.done)
        self.dialog.setLabelText(f"Writing attention maps to\n{self.folder}\nlayer {progress.layer}, head "
                                 f"{progress.head} ({progress.done} of {progress.total})")

    def _on_error(self, exc: BaseException) -> None:
        self._error = f"{type(exc).__name__}: {exc}"

    def _on_finished(self) -> None:
        self.dialog.close()
        self.dialog.deleteLater()  # destroyed on the GUI thread, not by a garbage collection elsewhere
        if self._error is not None:
            self.message = f"Attention maps failed after {self.done} of {self.total} heads ({self.folder}): {self._error}"
            QMessageBox.warning(self.window, "Export failed", self.message)
        elif self.cancel.is_set() and self.done < self.total:
            self.message = f"Cancelled: wrote {self.done} of {self.total} attention maps (PNG, NPY, CSV) to {self.folder}"
        else:
            self.message = f"Wrote {self.done} attention maps (PNG, NPY, CSV) to {self.folder}"
        tell(self.window, self.message)
        if getattr(self.window, "attention_export", None) is self:
            self.window.attention_export = None


def export_attention_maps(window: MainWindow, directory: str | None = None) -> AttentionMapsExport | None:
    """Ask for a folder (or use ``directory``), make a new subfolder in it and write one map per head
    of every layer there, in a worker with progress and Cancel. Returns the running export."""
    trace = window.trace
    if trace is None or getattr(window, "attention_export", None) is not None:
        return None
    if directory is None:
        directory = QFileDialog.getExistingDirectory(window, "Export attention maps into", last_folder(window))
        if not directory:
            return None
    remember(window, directory)
    name = getattr(getattr(window, "loaded", None), "name", "model")
    try:
        folder = new_subfolder(directory, f"attention-maps-{name}-{trace.n_tokens}-tokens")
    except OSError as exc:
        QMessageBox.warning(window, "Export failed", f"Could not create a folder in {directory}: {exc}")
        return None
    export = AttentionMapsExport(window, trace, folder)
    window.attention_export = export
    export.start()
    return export
