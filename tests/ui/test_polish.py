"""The desktop polish: About, the exception dialog, Copy image/data, undo after programmatic
prompt changes, remembered device and precision, the icon and desktop file, the dark palette."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import tomllib
from PySide6.QtCore import QTimer
from PySide6.QtGui import QGuiApplication

from explorer.ui import app as app_module
from explorer.ui.window.about import AboutDialog, versions
from explorer.ui.crash import ErrorDialog, ExceptionHook
from explorer.ui.export.clipboard import copy_data, copy_image, data_tsv
from explorer.ui.export.menu import Exportable
from explorer.ui.widgets.heatmap import Heatmap

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


def test_copy_data_is_tab_separated_with_labels_and_copy_image_renders(qtbot):
    heatmap = Heatmap()
    qtbot.addWidget(heatmap)
    heatmap.resize(300, 200)
    heatmap.show()
    matrix = np.array([[0.5, -np.inf], [0.25, 0.75]], dtype=np.float32)
    exportable = Exportable("pattern", heatmap, lambda: (matrix, ["0:To", "1: be"], ["0:To", "1: be"]))
    assert data_tsv(exportable) == "\t0:To\t1: be\n0:To\t0.5\t-inf\n1: be\t0.25\t0.75\n"
    assert copy_data(exportable) == QGuiApplication.clipboard().text()
    vector = Exportable("norms", heatmap, lambda: (np.array([1.0, 2.0]), ["a", "b"], None))
    assert data_tsv(vector) == "\tnorms\na\t1.0\nb\t2.0\n"
    copy_image(exportable)
    image = QGuiApplication.clipboard().image()
    assert not image.isNull() and image.width() > 50


def test_programmatic_prompt_changes_keep_the_undo_history(qtbot, window):
    before = window.prompt.text()
    with qtbot.waitSignal(window.trace_applied, timeout=30_000):
        window.set_prompt("A sample prompt")  # what Prompt > Sample prompts and a model change do
    assert window.prompt.edit.document().isUndoAvailable()
    with qtbot.waitSignal(window.trace_applied, timeout=30_000):
        window.prompt.edit.undo()
    assert window.prompt.text() == before
    assert "".join(window.trace.tokens) == before  # the undone text is analysed again


def test_device_and_precision_are_remembered(qtbot, window, settings, other_checkpoint):
    app_module.remember_device(window)
    with qtbot.waitSignal(window.trace_applied, timeout=30_000):
        window.open_checkpoint(str(other_checkpoint), device="cpu", dtype="float32")
    assert settings.value(app_module.DEVICE_KEY) == "cpu" and settings.value(app_module.DTYPE_KEY) == "float32"
    assert app_module.remembered_device(settings, None, None) == ("cpu", "float32")
    assert app_module.remembered_device(settings, "auto", None) == ("auto", "float32")  # the command line wins
    settings.setValue(app_module.DEVICE_KEY, "mps" if sys.platform != "darwin" else "cuda")
    settings.setValue(app_module.DTYPE_KEY, "float16")
    from explorer.core.device import available_devices

    if settings.value(app_module.DEVICE_KEY) not in available_devices():  # a GPU that is gone: start safely
        assert app_module.remembered_device(settings, None, None) == ("auto", "float32")


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
