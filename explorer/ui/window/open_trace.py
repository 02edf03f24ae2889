"""File > Open trace: show a trace exported as ``trace.safetensors`` without its model.

Someone without the checkpoint can look at everything that was exported: tokens, every head's
pattern and scores, q/k/v, the neurons, the residual stream. What needs the weights says so in its
panel (the logit lens, a neuron's vocabulary effect, nearest vocabulary neighbours), the prompt is
read-only (typing would need the model), and generation is off until a model is opened again.
The file is read and every shown panel prepares in a worker, like a trace of a loaded model; the
Session then shows it (``Session.open_trace_file``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QFileDialog, QMessageBox, QWidget

from explorer.ui.session.session import Session
from explorer.ui.session.workers import Preparer, error_message, run_in_background
from explorer.ui.window.chrome.prompt_editor import PromptEditor
from explorer.ui.window.chrome.run_controls import LayerHeadControls
from explorer.ui.window.chrome.status_bar import StatusBar

if TYPE_CHECKING:
    from explorer.core.trace import Trace

READ_ONLY_NOTICE = ("Trace opened from {name}: the model is not loaded, so the prompt cannot be changed and the "
                    "logit lens, neuron vocabulary effects and nearest neighbours are unavailable. "
                    "Open a model to run prompts again.")


def _read_and_prepare(path: str, preparers: list[Preparer]) -> tuple[Trace, float, tuple]:
    """The trace read from ``path``, the seconds taken, and each panel's (preparer, view)."""
    from explorer.core.interop import read_trace_safetensors

    t0 = time.perf_counter()
    trace = read_trace_safetensors(path)
    prepared = tuple((prepare, prepare(trace)) for prepare in preparers)
    return trace, time.perf_counter() - t0, prepared


class TraceFileOpener(QObject):
    """Opens trace files into ``session`` and shows the window's chrome for them (a read-only prompt,
    the status bar's model fields); a model loading later makes the prompt editable again.

    ``set_title(text)`` sets the window's title."""

    def __init__(self, session: Session, parent: QWidget, prompt: PromptEditor, status: StatusBar,
                 layer_head: LayerHeadControls) -> None:
        super().__init__(parent)
        self.session, self.parent_widget = session, parent
        self.prompt, self.status, self.layer_head = prompt, status, layer_head
        session.model_loaded.connect(self._leave_trace_mode)

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

        def done(result: tuple[Trace, float, tuple]) -> None:
            if not self.session.closed:
                self.show(result[0], path, result[1], requested, result[2])

        def failed(exc: BaseException) -> None:
            if not self.session.closed:
                self.status.set_loading(None)
                QMessageBox.critical(self.parent_widget, "Could not open the trace", error_message(exc))

        return run_in_background(_read_and_prepare, path, list(self.session.preparers()), on_done=done,
                                 on_error=failed)

    def show(self, trace: Trace, path: str, worker_seconds: float = 0.0, requested: float | None = None,
             prepared: tuple = ()) -> None:
        """Make ``trace`` (from a file, without a model) the session's trace; ``prepared``: the
        panels' (preparer, view) pairs made with it on the worker."""
        name = Path(path).name
        cfg = trace.config
        self.layer_head.set_ranges(cfg.n_layers, cfg.n_heads)
        self.prompt.set_read_only(True)
        self.status.set_loading(None)
        self.status.show_model({"name": f"{trace.meta.model_name or 'trace'} (trace file)", "description": cfg.describe(),
                                "source": path, "vocabulary": cfg.vocab_size, "context_length": cfg.n_ctx,
                                "device": "no model", "dtype": trace.meta.dtype, "parameters": 0})
        self.status.fields["params"].setText("weights not loaded")
        self.status.fields["params"].setToolTip("a trace opened from a file carries activations, not weights")
        self.session.open_trace_file(trace, path, worker_seconds, requested, prepared)
        self.parent_widget.setWindowTitle(
            f"{name} — {trace.meta.model_name or 'trace'} (no model) — Transformer Explorer")
        cut = " ".join(f"Note: {note}." for note in trace.meta.extra.get("notes", []))
        self.prompt.show_notice(READ_ONLY_NOTICE.format(name=name) + (f" {cut}" if cut else ""))  # after the count

    def _leave_trace_mode(self, _loaded: object) -> None:
        if self.prompt.edit.isReadOnly():
            self.prompt.set_read_only(False)
