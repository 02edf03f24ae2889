"""File > Open trace: show a trace exported as ``trace.safetensors`` without its model.

Someone without the checkpoint can look at everything that was exported: tokens, every head's
pattern and scores, q/k/v, the neurons, the residual stream. What needs the weights says so in its
panel (the logit lens, a neuron's vocabulary effect, nearest vocabulary neighbours), the prompt is
read-only (typing would need the model), and generation is off until a model is opened again.
The file is read and every shown panel prepares in a worker, like a trace of a loaded model.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from PySide6.QtWidgets import QFileDialog, QMenu, QMessageBox

from explorer.ui.window.chrome.prompt_editor import _NOTICE_STYLE
from explorer.ui.session.workers import (
    TraceRequest,
    TraceResult,
    error_message,
    run_in_background,
)

READ_ONLY_NOTICE = ("Trace opened from {name}: the model is not loaded, so the prompt cannot be changed and the "
                    "logit lens, neuron vocabulary effects and nearest neighbours are unavailable. "
                    "Open a model to run prompts again.")


def add_open_trace_action(window: Any, menu: QMenu) -> Any:
    """File > Open trace… on ``menu``; a model loading later makes the prompt editable again."""
    action = menu.addAction("Open &trace…")
    action.setStatusTip("Open a trace.safetensors exported by this app (no model needed)")
    action.triggered.connect(lambda _=False: open_trace_dialog(window))
    window.model_loaded.connect(lambda _loaded: _leave_trace_mode(window))
    window.open_trace_action = action
    return action


def open_trace_dialog(window: Any) -> None:
    path, _ = QFileDialog.getOpenFileName(window, "Open trace", str(Path.home()),
                                          "Exported traces (*.safetensors);;All files (*)")
    if path:
        open_trace(window, path)


def _read_and_prepare(path: str, preparers: list) -> tuple[Any, float]:
    from explorer.core.interop import read_trace_safetensors

    t0 = time.perf_counter()
    trace = read_trace_safetensors(path)
    for prepare in preparers:
        prepare(trace)
    return trace, time.perf_counter() - t0


def open_trace(window: Any, path: str | Path) -> Any:
    """Read ``path`` in the background and show it; a bad file is one line in a dialog."""
    path = str(path)
    window.status.set_loading(f"Opening trace {Path(path).name}…")
    requested = time.perf_counter()

    def done(result: tuple[Any, float]) -> None:
        show_trace(window, result[0], path, result[1], requested)

    def failed(exc: BaseException) -> None:
        window.status.set_loading(None)
        QMessageBox.critical(window, "Could not open the trace", error_message(exc))

    return run_in_background(_read_and_prepare, path, window._preparers(), on_done=done, on_error=failed)


def show_trace(window: Any, trace: Any, path: str, worker_seconds: float = 0.0, requested: float | None = None) -> None:
    """Make ``trace`` (from a file, without a model) the window's trace."""
    name = Path(path).name
    prompt = str(trace.meta.extra.get("prompt", "")) or "".join(trace.tokens)
    window.loaded = None
    window.controller.set_model(None)
    window.generation.set_model(None)
    for panel in window.panels:
        panel.set_tokenizer(None)
    cfg = trace.config
    window.layer_head.set_ranges(cfg.n_layers, cfg.n_heads)
    window.prompt.set_text(prompt)
    window.prompt.edit.setReadOnly(True)
    window.trace_file = path
    window.setWindowTitle(f"{name} — {trace.meta.model_name or 'trace'} (no model) — Transformer Explorer")
    window.status.set_loading(None)
    window.status.show_model({"name": f"{trace.meta.model_name or 'trace'} (trace file)", "description": cfg.describe(),
                              "source": path, "vocabulary": cfg.vocab_size, "context_length": cfg.n_ctx,
                              "device": "no model", "dtype": trace.meta.dtype, "parameters": 0})
    window.status.fields["params"].setText("weights not loaded")
    window.status.fields["params"].setToolTip("a trace opened from a file carries activations, not weights")
    request = TraceRequest(0, None, prompt, requested_at=requested if requested is not None else time.perf_counter())
    window._on_trace_ready(TraceResult(request, trace, worker_seconds))
    window.prompt._notice(READ_ONLY_NOTICE.format(name=name), _NOTICE_STYLE)  # after the token count, which hides notices


def _leave_trace_mode(window: Any) -> None:
    if getattr(window, "trace_file", None) is not None:
        window.trace_file = None
        window.prompt.edit.setReadOnly(False)
        window.prompt.notice.hide()
