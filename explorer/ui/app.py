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


NO_DISPLAY = ("error: the window needs a display, and neither DISPLAY nor WAYLAND_DISPLAY is set; "
              "the headless commands work without one (transformer-explorer info|export|generate|train)")


def display_missing(environ: dict[str, str] | None = None, platform: str | None = None) -> bool:
    """Whether Qt would abort for want of a display: on Linux, no X11 or Wayland display and no
    platform plugin that needs none (offscreen, minimal, vnc, eglfs, linuxfb) chosen."""
    environ = dict(os.environ) if environ is None else environ
    platform = sys.platform if platform is None else platform
    if not platform.startswith("linux"):
        return False
    if environ.get("DISPLAY") or environ.get("WAYLAND_DISPLAY"):
        return False
    chosen = environ.get("QT_QPA_PLATFORM", "").split(":")[0].strip().lower()
    return chosen not in ("offscreen", "minimal", "vnc", "eglfs", "linuxfb", "minimalegl")


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="transformer-explorer",
                                     description="Look inside a transformer language model (desktop app). "
                                                 "With a command (info, export, generate, train) it runs "
                                                 "headless instead: transformer-explorer --help lists them.")
    parser.add_argument("checkpoint", nargs="?", default=None,
                        help="a checkpoint directory, a file inside one, or a built-in model name "
                             "(default: the last one opened, else the bundled default model)")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda", "mps"],
                        help="where the model runs (default: auto)")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"],
                        help="the precision it runs in (default: float32)")
    return parser.parse_args(list(argv))


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if display_missing():  # before QApplication: Qt would abort with a message about its plugins
        print(NO_DISPLAY, file=sys.stderr)
        return 2
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
