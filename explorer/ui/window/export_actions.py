"""File > Export trace… and File > Export attention maps… for the main window.

Both run in worker threads on the Session's trace. The attention maps (one PNG, NPY and CSV per head:
144 heads for GPT-2 small) go into a new subfolder named after the model and the prompt's length,
with a progress dialog whose Cancel stops the worker before the next head. The dialogs start in the
last export folder and the status bar says what was written where.

The progress dialog is not modal: a modal ``QProgressDialog.setValue`` runs the event loop inside
the call, and an event handled there (the window closing) could delete the dialog under it. Progress
reaches the GUI thread as queued signals, the newest is drawn from the event loop (a zero-delay
timer owned by the export), and the dialog is only closed and deleted from there (``finish``,
``shutdown``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, QTimer
from PySide6.QtWidgets import QFileDialog, QMessageBox, QProgressDialog, QWidget

from explorer.core.cancel import Cancel
from explorer.ui.export.folders import last_folder, new_subfolder, remember, tell
from explorer.ui.session import background
from explorer.ui.session.session import Session

if TYPE_CHECKING:
    from explorer.core.trace import Trace
    from explorer.ui.export.attention_maps import Progress


def export_trace(session: Session, parent: QWidget) -> None:
    """Ask for a .npz path and write the current trace there in a worker (it derives every head)."""
    trace = session.trace
    if trace is None:
        return
    path, _ = QFileDialog.getSaveFileName(parent, "Export trace", str(Path(last_folder(parent)) / "trace.npz"),
                                          "NumPy archive (*.npz)")
    if not path:
        return
    remember(parent, Path(path).parent)
    from explorer.core.export import write_trace_npz

    from explorer.ui.export.provenance import record_for

    tell(parent, f"Writing {path}…")
    n = trace.n_tokens
    background.run(write_trace_npz, trace, path, provenance=record_for(session, trace, "trace.npz"),
                   on_done=lambda _: tell(parent, f"Wrote the trace ({n} tokens) to {path}"),
                   on_error=lambda failure: QMessageBox.warning(parent, "Export failed", failure.message))


class AttentionMapsExport(QObject):
    """One running export: the worker, its progress dialog and its Cancel (``cancel`` is the event
    the worker checks before each head). ``on_finished(self)`` is called on the GUI thread at the end
    (not after ``shutdown``); ``message`` then says what was written."""

    def __init__(self, trace: Trace, folder: Path, parent: QWidget,
                 on_finished: Callable[[AttentionMapsExport], None] | None = None) -> None:
        super().__init__(parent)
        from explorer.ui.export.attention_maps import map_count, write_attention_maps

        self.parent_widget, self.folder, self.on_finished = parent, folder, on_finished
        self.cancel = Cancel()
        self.total = map_count(trace)
        self.done = 0
        self.message = ""
        self.closed = False
        self._progress: Progress | None = None  # the newest progress, drawn by the next redraw
        self._error: str | None = None
        self.dialog = QProgressDialog(f"Writing {self.total} attention maps to\n{folder}", "Cancel", 0, self.total,
                                      parent)
        self.dialog.setWindowTitle("Export attention maps")
        self.dialog.setMinimumDuration(300)
        self.dialog.setAutoClose(False)
        self.dialog.setAutoReset(False)
        self.dialog.canceled.connect(self.cancel.set)
        self._redraw = QTimer(self)  # the newest progress, drawn from the event loop
        self._redraw.setSingleShot(True)
        self._redraw.setInterval(0)
        self._redraw.timeout.connect(self._draw_progress)
        self.task = background.run(write_attention_maps, trace, folder, None, self.cancel, on_yield=self._on_progress,
                                   on_error=self._on_error, on_finished=self._on_finished, start=False)

    def start(self) -> None:
        self.dialog.setValue(0)
        self.task.start()

    def _on_progress(self, progress: Any) -> None:
        if self.closed:
            return
        self.done, self._progress = progress.done, progress
        self._redraw.start()

    def _draw_progress(self) -> None:
        progress = self._progress
        if self.closed or progress is None:
            return
        self.dialog.setValue(progress.done)
        self.dialog.setLabelText(f"Writing attention maps to\n{self.folder}\nlayer {progress.layer}, head "
                                 f"{progress.head} ({progress.done} of {progress.total})")

    def _on_error(self, failure: background.Failure) -> None:
        self._error = failure.message

    def _on_finished(self) -> None:
        if self.closed:
            return
        self._close()
        if self._error is not None:
            self.message = f"Attention maps failed after {self.done} of {self.total} heads ({self.folder}): {self._error}"
            QMessageBox.warning(self.parent_widget, "Export failed", self.message)
        elif self.cancel.is_set() and self.done < self.total:
            self.message = f"Cancelled: wrote {self.done} of {self.total} attention maps (PNG, NPY, CSV) to {self.folder}"
        else:
            self.message = f"Wrote {self.done} attention maps (PNG, NPY, CSV) to {self.folder}"
        tell(self.parent_widget, self.message)
        if self.on_finished is not None:
            self.on_finished(self)

    def shutdown(self) -> None:
        """The window closes: the worker stops before its next head and nothing it sends arrives."""
        self.cancel.set()
        if self.closed:
            return
        self.task.release()
        self._close()

    def _close(self) -> None:
        self.closed = True
        self._redraw.stop()
        self.dialog.canceled.disconnect()
        self.dialog.close()
        self.dialog.deleteLater()  # destroyed on the GUI thread, from the event loop


def export_attention_maps(session: Session, parent: QWidget, directory: str | None = None,
                          on_finished: Callable[[AttentionMapsExport], None] | None = None,
                          ) -> AttentionMapsExport | None:
    """Ask for a folder (or use ``directory``), make a new subfolder in it and write one map per head
    of every layer there, in a worker with progress and Cancel. Returns the running export."""
    trace = session.trace
    if trace is None:
        return None
    if directory is None:
        directory = QFileDialog.getExistingDirectory(parent, "Export attention maps into", last_folder(parent))
        if not directory:
            return None
    remember(parent, directory)
    name = session.loaded.name if session.loaded is not None else "model"
    try:
        folder = new_subfolder(directory, f"attention-maps-{name}-{trace.n_tokens}-tokens")
    except OSError as exc:
        QMessageBox.warning(parent, "Export failed", f"Could not create a folder in {directory}: {exc}")
        return None
    from explorer.ui.export.provenance import record_for

    try:
        from explorer.core import provenance

        provenance.write(folder / provenance.FILE, record_for(session, trace, "attention maps"))
    except OSError as exc:
        QMessageBox.warning(parent, "Export failed", f"Could not write into {folder}: {exc}")
        return None
    export = AttentionMapsExport(trace, folder, parent, on_finished)
    export.start()
    return export
