"""Take the README's window screenshots: the real window under an X server (Xvfb), a GPT-2-small-shaped
random model (or the bundled default), each panel raised in turn, the whole window grabbed to a PNG.

    xvfb-run -s "-screen 0 1920x1200x24" python docs/screenshots.py --size 1280x800 --out docs

``--only explanation``: only ``<prefix>-<size>-explanation.png``, the Attention panel's "What am I looking
at?" window over the right of the main window (the screen grabbed: it is a window of its own).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))


def pump(app, condition, timeout_s=900.0, what: str = "the window to finish"):
    """Process events until ``condition()`` holds; a ``TimeoutError`` naming ``what`` after ``timeout_s``."""
    started = time.perf_counter()
    while not condition():
        app.processEvents()
        if time.perf_counter() - started > timeout_s:
            raise TimeoutError(f"waited {timeout_s:.0f} s for {what}")
        time.sleep(0.005)


def settle(app, seconds=0.6):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        app.processEvents()
        time.sleep(0.01)


def complete(window) -> bool:
    """Every on-screen view finished: a trace, and the presenter idle (``Presenter.is_idle``: nothing in
    flight, every shown panel drawn, no view computing)."""
    return window.trace is not None and window.presenter.is_idle()


def open_window(width: int, height: int, *, theme: str = "light", at_origin: bool = False,
                folder: Path | None = None):
    """The real main window for a screenshot script, as ``(app, window)``: a light-theme application, settings
    in a temporary INI file (``folder``/settings.ini; never the user's), the window resized to ``width`` x
    ``height`` and shown (moved to the screen's corner first when ``at_origin``: a script that grabs the screen
    needs it there). ``screenshot_window`` is the same as a context manager that closes the window after."""
    from PySide6.QtCore import QSettings

    from explorer.ui.app import ensure_app
    from explorer.ui.window.main_window import MainWindow

    app = ensure_app(theme)
    folder = Path(tempfile.mkdtemp(prefix="shots-")) if folder is None else folder
    settings = QSettings(str(folder / "settings.ini"), QSettings.Format.IniFormat)
    window = MainWindow(settings, device="cpu")
    window.resize(width, height)
    if at_origin:
        window.move(0, 0)
    window.show()
    return app, window


@contextmanager
def screenshot_window(width: int, height: int, **options):
    """``open_window(width, height, **options)`` as a context manager: ``with screenshot_window(w, h) as (app,
    window):``, the window closed at the end."""
    app, window = open_window(width, height, **options)
    try:
        yield app, window
    finally:
        from explorer.ui.app import finish_closed_windows

        window.close()
        finish_closed_windows()  # (else the script's exit crashed about one run in two)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", default="1280x800")
    parser.add_argument("--out", default="docs")
    parser.add_argument("--model", choices=["gpt2", "default"], default="gpt2")
    parser.add_argument("--prefix", default="laptop")
    parser.add_argument("--only", choices=("all", "panels", "explanation"), default="all",
                        help="every panel's shot, then the explanation window's (all), or one of the two")
    args = parser.parse_args()
    w, h = (int(x) for x in args.size.split("x"))

    from explorer.ui.session.workers import LoadRequest, LoadResult

    with screenshot_window(w, h, at_origin=True) as (app, window):
        if args.model == "gpt2":
            from _models import gpt2_small_loaded

            loaded = gpt2_small_loaded()
        else:
            from explorer.core.checkpoint import load_checkpoint

            loaded = load_checkpoint(device="cpu")
        window.session.use_model(LoadResult(LoadRequest(None, "cpu"), loaded, None))
        pump(app, lambda: complete(window))
        settle(app)
        out = Path(args.out)
        for dock in window.docks if args.only != "explanation" else ():
            if dock.isHidden():
                continue  # a panel that does not apply to this model
            dock.raise_()
            settle(app, 0.3)
            pump(app, lambda: complete(window))
            settle(app, 0.8)
            name = dock.panel_id.replace("_", "-")
            path = out / f"{args.prefix}-{w}x{h}-{name}.png"
            window.grab().save(str(path))
            print("wrote", path)
        if args.only != "panels":
            explanation_shot(app, window, out / f"{args.prefix}-{w}x{h}-explanation.png")


def explanation_shot(app, window, path: Path) -> None:
    """The Attention panel raised and its explanation open over the right of the window; the screen grabbed."""
    from PySide6.QtGui import QGuiApplication

    from explorer.ui.window.docks import dock_of

    panel = window.panel("attention")
    dock_of(panel).raise_()
    settle(app, 0.3)
    pump(app, lambda: complete(window))
    panel.show_explanation(True)
    frame = window.frameGeometry()
    explain = panel.explain_window
    explain.resize(min(620, frame.width() // 2), frame.height() - 90)
    explain.move(frame.x() + frame.width() - explain.width() - 20, frame.y() + 40)
    settle(app, 0.8)
    QGuiApplication.primaryScreen().grabWindow(0, frame.x(), frame.y(), frame.width(), frame.height()).save(str(path))
    print("wrote", path)
    panel.show_explanation(False)


if __name__ == "__main__":
    main()
