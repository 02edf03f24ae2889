"""The desktop app's entry point: ``transformer-explorer [CHECKPOINT] [--device D] [--dtype T]``."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

ORGANIZATION = "TransformerExplorer"
APPLICATION = "TransformerExplorer"
SHOW_AFTER_MS = 2500  # show the window by then even if the first analysis is still running


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="transformer-explorer",
                                     description="Look inside a transformer language model (desktop app).")
    parser.add_argument("checkpoint", nargs="?", default=None,
                        help="a checkpoint directory, a file inside one, or a built-in model name "
                             "(default: the last one opened, else the bundled default model)")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda", "mps"])
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    return parser.parse_args(list(argv))


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    # torch's OpenMP threads otherwise spin while they wait and take the CPU from the GUI thread
    # (and from each other when the machine is busy); read when torch first loads, in the loader.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")

    import explorer.ui  # noqa: F401  (binds pyqtgraph to PySide6 and sets its options)
    from PySide6.QtCore import QCoreApplication, QTimer
    from PySide6.QtWidgets import QApplication

    QCoreApplication.setOrganizationName(ORGANIZATION)
    QCoreApplication.setApplicationName(APPLICATION)
    app = QApplication.instance() or QApplication(sys.argv[:1])
    QApplication.setApplicationDisplayName("Transformer Explorer")

    from explorer.ui.main_window import MainWindow

    window = MainWindow(device=args.device, dtype=args.dtype)

    def show() -> None:
        if not window.isVisible():
            window.show()

    # The model loads and the first prompt is analysed before the window appears, so that every
    # panel is already drawn; a slow load still shows the window (with its progress) soon.
    window.trace_applied.connect(show)
    window.load_failed.connect(show)
    QTimer.singleShot(SHOW_AFTER_MS, show)
    window.start(args.checkpoint)
    return int(app.exec())
