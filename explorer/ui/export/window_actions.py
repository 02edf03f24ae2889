"""File > Export trace… and File > Export attention maps… for the main window."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QFileDialog, QMessageBox

from explorer.ui.workers import run_in_background

if TYPE_CHECKING:
    from explorer.ui.main_window import MainWindow


def _start_dir(window: MainWindow) -> str:
    return window.source if window.source and Path(window.source).is_dir() else str(Path.home())


def export_trace(window: MainWindow) -> None:
    """Ask for a .npz path and write the current trace there in a worker (it derives every head)."""
    trace = window.trace
    if trace is None:
        return
    path, _ = QFileDialog.getSaveFileName(window, "Export trace", str(Path(_start_dir(window)) / "trace.npz"),
                                          "NumPy archive (*.npz)")
    if not path:
        return
    from explorer.core.export import write_trace_npz

    window.status.notice(f"Writing {path}…")
    run_in_background(write_trace_npz, trace, path,
                      on_done=lambda _: window.status.notice(f"Wrote {path}"),
                      on_error=lambda exc: QMessageBox.warning(window, "Export failed", str(exc)))


def export_attention_maps(window: MainWindow) -> None:
    """Ask for a folder and write one PNG (+ .npy, .csv) per head of every layer."""
    trace = window.trace
    if trace is None:
        return
    directory = QFileDialog.getExistingDirectory(window, "Export attention maps into", _start_dir(window))
    if not directory:
        return
    from explorer.ui.export.offscreen import export_attention_maps as render_maps

    QGuiApplication.setOverrideCursor(Qt.CursorShape.WaitCursor)
    try:  # rendering draws Qt items, so it runs here, on the GUI thread
        written = render_maps(trace, Path(directory), list(range(trace.config.n_layers)))
    except Exception as exc:  # noqa: BLE001 - any failure is reported, the window goes on
        QMessageBox.warning(window, "Export failed", f"{type(exc).__name__}: {exc}")
        return
    finally:
        QGuiApplication.restoreOverrideCursor()
    pngs = [p for p in written if Path(p).suffix == ".png"]
    window.status.notice(f"Wrote {len(pngs)} attention maps (and their .npy/.csv) to {directory}")
