"""The application around the window: Help > About, the unexpected-error dialog and the exception
hook, the icon and desktop file, the dark palette."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import tomllib
from PySide6.QtCore import QTimer
from PySide6.QtGui import QGuiApplication

from explorer.ui.crash import ErrorDialog, ExceptionHook
from explorer.ui.window.about import AboutDialog, versions

ROOT = Path(__file__).resolve().parents[2]


def test_about_lists_the_versions_and_copies_them(qtbot, tiny_loaded):
    import pyqtgraph
    import PySide6
    import torch

    dialog = AboutDialog(tiny_loaded)
    qtbot.addWidget(dialog)
    info = versions(tiny_loaded)
    assert info["torch"] == torch.__version__ and info["PySide6"] == PySide6.__version__
    assert info["pyqtgraph"] == pyqtgraph.__version__ and info["Python"].startswith(sys.version.split()[0])
    assert "CUDA" in info and "Qt" in info and "cpu" in info["model"]
    dialog.copy_button.click()
    copied = QGuiApplication.clipboard().text()
    assert copied == dialog.text and "torch" in copied and torch.__version__ in copied


def test_an_unexpected_error_shows_a_dialog_and_the_app_keeps_running(qtbot):
    hook = ExceptionHook()
    try:
        raise ValueError("a bug in a slot")
    except ValueError as exc:
        hook.handle(type(exc), exc, exc.__traceback__)
    qtbot.waitUntil(lambda: bool(hook.dialogs), timeout=5_000)
    dialog = hook.dialogs[0]
    assert isinstance(dialog, ErrorDialog) and dialog.isVisible()
    assert "ValueError: a bug in a slot" in dialog.report and "Traceback" in dialog.report and "torch" in dialog.report
    dialog.copy_button.click()
    assert QGuiApplication.clipboard().text() == dialog.report
    ticks = []
    QTimer.singleShot(0, lambda: ticks.append(1))  # the event loop still runs
    qtbot.waitUntil(lambda: ticks == [1], timeout=5_000)
    dialog.close()


@pytest.mark.qt_no_exception_capture
def test_the_installed_hook_catches_an_exception_raised_in_a_slot(qtbot):
    hook = ExceptionHook().install()
    try:
        def broken() -> None:
            raise RuntimeError("raised inside the event loop")

        QTimer.singleShot(0, broken)
        qtbot.waitUntil(lambda: bool(hook.dialogs), timeout=5_000)
        assert "RuntimeError: raised inside the event loop" in hook.dialogs[0].report
        hook.dialogs[0].close()
    finally:
        hook.uninstall()


def test_icon_desktop_file_gui_script_and_licence_agree():
    from explorer.ui.icon import DESKTOP_FILE_NAME, app_icon

    assert not app_icon().isNull() and app_icon().availableSizes()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))
    gui = project["project"]["gui-scripts"]
    entries = dict(line.split("=", 1) for line in (ROOT / "resources" / "transformer-explorer.desktop")
                   .read_text("utf-8").splitlines() if "=" in line)
    assert entries["Exec"].split()[0] in gui and entries["Icon"] == DESKTOP_FILE_NAME
    shared = project["tool"]["hatch"]["build"]["targets"]["wheel"]["shared-data"]
    assert f"share/applications/{DESKTOP_FILE_NAME}.desktop" in shared.values()
    assert all((ROOT / src).is_file() for src in shared)
    assert project["project"]["license"]["text"] == "MIT" and "MIT License" in (ROOT / "LICENSE").read_text("utf-8")


def test_a_dark_palette_reaches_the_plots():
    """In a fresh process (the palette is global): forced dark, plots get the palette's dark Base."""
    script = textwrap.dedent("""
        import os
        os.environ["QT_QPA_PLATFORM"] = "offscreen"
        import pyqtgraph as pg
        from explorer.ui.app import ensure_app
        app = ensure_app("dark")
        from explorer.ui import theme
        plot = pg.PlotWidget()
        background, foreground = theme.plot_colours()
        assert theme.is_dark() and background.lightness() < 80 and foreground.lightness() > 170
        assert pg.getConfigOption("background") == background
        assert plot.backgroundBrush().color() == background
        theme.force_scheme(app, "light")
        theme.apply_plot_colours(app)
        assert not theme.is_dark() and plot.backgroundBrush().color().lightness() > 200
        print("ok")
    """)
    result = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True, cwd=ROOT,
                            timeout=120)
    assert result.stdout.strip().endswith("ok"), result.stderr


def test_a_closed_window_is_deleted_before_the_program_ends(qtbot, make_window):
    """Once the event loop has returned, a closed window's pending delete would never run, and PySide destroyed
    the window while the interpreter shut down (a segfault at exit): ``finish_closed_windows`` deletes it first."""
    import shiboken6

    from explorer.ui.app import finish_closed_windows

    window = make_window()
    qtbot.waitUntil(lambda: window.isVisible())
    panels = [p for p in window.panels if shiboken6.isValid(p)]
    assert panels
    window.close()
    assert shiboken6.isValid(window)  # closed, its delete only posted
    finish_closed_windows()
    assert not shiboken6.isValid(window) and not any(shiboken6.isValid(p) for p in panels)
