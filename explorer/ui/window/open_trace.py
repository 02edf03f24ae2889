"""File > Open trace: show a trace exported as ``trace.safetensors`` without its model.

Someone without the checkpoint can look at everything that was exported: tokens, every head's
pattern and scores, q/k/v, the neurons, the residual stream. What needs the weights says so in its
panel (the logit lens, a neuron's vocabulary effect, nearest vocabulary neighbours), the prompt is
read-only (typing would need the model), and generation is off until a model is opened again.
The file is read in a worker; the Session then hands it to the presenter, which prepares and draws the
panels as for any trace (``Session.open_trace_file``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QFileDialog, QMessageBox, QWidget

from explorer.core.analysis.layer_maps import max_maps
from explorer.ui.session import background
from explorer.ui.session.frame import FILE, REMOTE, Frame
from explorer.ui.session.session import Session
from explorer.ui.window.chrome.prompt_editor import PromptEditor
from explorer.ui.window.chrome.run_controls import LayerHeadControls
from explorer.ui.window.chrome.status_bar import StatusBar

if TYPE_CHECKING:
    from explorer.core.trace import Trace

READ_ONLY_NOTICE = ("Trace opened from {name}: the model is not loaded, so the prompt cannot be changed and the "
                    "logit lens, neuron vocabulary effects and nearest neighbours are unavailable. "
                    "Open a model to run prompts again.")


def _read(path: str) -> Trace:
    from explorer.core.interop import read_trace_safetensors

    return read_trace_safetensors(path)


class TraceFileOpener(QObject):
    """Opens trace files into ``session`` and shows the window's chrome for them (a read-only prompt,
    the status bar's model fields); a model loading later makes the prompt editable again. A trace
    source: ``is_idle`` while no file is being read."""

    def __init__(self, session: Session, parent: QWidget, prompt: PromptEditor, status: StatusBar,
                 layer_head: LayerHeadControls) -> None:
        super().__init__(parent)
        self.session, self.parent_widget = session, parent
        self.prompt, self.status, self.layer_head = prompt, status, layer_head
        self.requests = background.Newest()  # the newest file opened wins
        self.reading = 0
        session.model_loaded.connect(self._leave_trace_mode)
        session.presenter.add_source(self)
        session.presenter.shown.connect(self._on_shown)

    def is_idle(self) -> bool:
        return self.reading == 0

    def dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self.parent_widget, "Open trace", str(Path.home()),
                                              "Exported traces (*.safetensors);;All files (*)")
        if path:
            self.open(path)

    def open(self, path: str | Path) -> Any:
        """Read ``path`` in the background and show it; a bad file is one line in a dialog."""
        path = str(path)
        self.status.set_loading(f"Opening trace {Path(path).name}…")
        requested = time.perf_counter()

        def done(trace: Trace) -> None:
            if not self.session.closed:
                self.show(trace, path, requested)

        def failed(failure: background.Failure) -> None:
            if not self.session.closed:
                self.status.set_loading(None)
                QMessageBox.critical(self.parent_widget, "Could not open the trace", failure.message)

        def finished() -> None:
            self.reading -= 1

        self.reading += 1
        return background.run(_read, path, newest=self.requests, on_done=done, on_error=failed, on_finished=finished)

    def show(self, trace: Trace, path: str, requested: float | None = None, kind: str = FILE) -> None:
        """Make ``trace`` (from a file, without a model; ``kind`` REMOTE: a remote trace, ``path`` its
        label) the session's trace."""
        cfg = trace.config
        self.layer_head.set_ranges(cfg.n_layers, max_maps(cfg))
        self.prompt.set_read_only(True)
        self.status.set_loading(None)
        self.status.show_model({"name": f"{trace.meta.model_name or 'trace'} (trace file)", "description": cfg.describe(),
                                "source": path, "vocabulary": cfg.vocab_size, "context_length": cfg.n_ctx,
                                "device": "no model", "dtype": trace.meta.dtype, "parameters": 0})
        self.status.fields["params"].setText("weights not loaded")
        self.status.fields["params"].setToolTip("a trace opened from a file carries activations, not weights")
        self.session.open_trace_file(trace, path, kind, requested)

    def _on_shown(self, frame: Frame) -> None:
        if frame.source.kind in (FILE, REMOTE):  # after the token count (the drawing's), which hides notices
            notes = frame.trace.meta.extra.get("notes", [])  # what of the file's text was cut before it is shown
            cut = " ".join(f"Note: {note}." for note in notes)
            self.prompt.show_notice(READ_ONLY_NOTICE.format(name=Path(frame.source.label).name) + (f" {cut}" if cut else ""))

    def _leave_trace_mode(self, _loaded: object) -> None:
        if self.prompt.edit.isReadOnly():
            self.prompt.set_read_only(False)
