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


def _budget_size(text: str) -> int:
    from explorer.core.budget import parse_size

    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="transformer-explorer",
                                     description="Look inside a transformer language model (desktop app). "
                                                 "With a command (info, export, generate, train) it runs "
                                                 "headless instead: transformer-explorer --help lists them.")
    parser.add_argument("checkpoint", nargs="?", default=None,
                        help="a checkpoint directory, a file inside one, or a built-in model name "
                             "(default: the last one opened, else the bundled default model)")
    parser.add_argument("--device", default=None, choices=["auto", "cpu", "cuda", "mps"],
                        help="where the model runs (default: the last choice, else auto)")
    parser.add_argument("--dtype", default=None, choices=["float32", "bfloat16", "float16"],
                        help="precision of the weights (default: the last choice, else float32)")
    parser.add_argument("--memory-budget", default=None, type=_budget_size, metavar="SIZE",
                        help="memory for traces and their cached views, e.g. 4GB (remembered; default: a "
                             "quarter of the device's memory); values beyond it are recomputed, never refused")
    parser.add_argument("--color-scheme", default=None, choices=["auto", "light", "dark"],
                        help="light or dark appearance (default: follow the system)")
    return parser.parse_args(list(argv))


def ensure_app(color_scheme: str | None = None):
    """The QApplication (made once, with its names, icon, desktop file, colours and exception hook)."""
    import explorer.ui  # noqa: F401  (binds pyqtgraph to PySide6 and sets its options)
    from PySide6.QtCore import QCoreApplication
    from PySide6.QtGui import QGuiApplication
    from PySide6.QtWidgets import QApplication

    from explorer.ui import crash, icon, theme

    existing = QApplication.instance()
    if existing is not None and getattr(existing, "_explorer_ready", False):
        return existing
    QCoreApplication.setOrganizationName(ORGANIZATION)
    QCoreApplication.setApplicationName(APPLICATION)
    app = existing or QApplication(sys.argv[:1])
    QApplication.setApplicationDisplayName("Transformer Explorer")
    QGuiApplication.setDesktopFileName(icon.DESKTOP_FILE_NAME)
    QApplication.setWindowIcon(icon.app_icon())
    theme.follow_system(app, color_scheme)
    crash.install_exception_hook(app)
    app._explorer_ready = True
    return app


DEVICE_KEY, DTYPE_KEY, WEIGHTS_KEY = "model/device", "model/dtype", "model/weights"


def finish_closed_windows() -> None:
    """Delete what closed windows left to delete (their ``deleteLater``), while Python still runs: after the
    event loop has stopped Qt never does, and PySide then destroyed the window while the interpreter shut down,
    calling a pyqtgraph item's Python override half torn down (a segfault at exit, about one run in two after a
    long prompt). Call it once the event loop has returned."""
    import gc

    from PySide6.QtCore import QCoreApplication, QEvent

    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    QCoreApplication.processEvents()
    gc.collect()


def remembered_device(settings, device: str | None, dtype: str | None) -> tuple[str, str]:
    """The device and precision to start with: the command line's, else the last ones that loaded
    (if that device is still here: a laptop without its GPU falls back to auto and float32)."""
    if device is not None:
        return device, dtype or "float32"
    stored, stored_dtype = str(settings.value(DEVICE_KEY, "auto") or "auto"), str(settings.value(DTYPE_KEY, "") or "")
    if stored not in ("auto", "cpu"):
        from explorer.core.device import available_devices  # loads torch: only for a remembered accelerator

        if stored not in available_devices():
            return "auto", dtype or "float32"
    return stored, dtype or stored_dtype or "float32"


def remember_device(window) -> None:
    """Keep the device and precision of every model that loads (with the layout, in QSettings)."""
    def store(_loaded: object) -> None:
        window.settings.setValue(DEVICE_KEY, window.device_controls.device)
        window.settings.setValue(DTYPE_KEY, window.device_controls.dtype)
        window.settings.setValue(WEIGHTS_KEY, window.device_controls.weights)

    window.model_loaded.connect(store)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if display_missing():  # before QApplication: Qt would abort with a message about its plugins
        print(NO_DISPLAY, file=sys.stderr)
        return 2
    # torch's OpenMP threads otherwise spin while they wait and take the CPU from the GUI thread
    # (and from each other when the machine is busy); read when torch first loads, in the loader.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")

    app = ensure_app(args.color_scheme)
    from PySide6.QtCore import QSettings, QTimer

    from explorer.ui.window.main_window import MainWindow

    from explorer.ui.window.budget_setting import apply_stored_budget

    settings = QSettings()
    apply_stored_budget(settings, args.memory_budget)
    device, dtype = remembered_device(settings, args.device, args.dtype)
    window = MainWindow(settings, device=device, dtype=dtype)
    window.device_controls.set_weights(str(settings.value(WEIGHTS_KEY, "auto") or "auto"))  # before the first load
    remember_device(window)

    def show() -> None:
        if not window.isVisible():
            window.show()

    # The model loads and the first prompt is analysed before the window appears, so that every
    # panel is already drawn; a slow load still shows the window (with its progress) soon.
    window.trace_applied.connect(show)
    window.load_failed.connect(show)
    QTimer.singleShot(SHOW_AFTER_MS, show)
    window.start(args.checkpoint)
    code = int(app.exec())
    finish_closed_windows()
    return code
