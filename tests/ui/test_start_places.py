"""Issue 42, item 10: where the window starts.

An old settings file silently reopened the last model instead of the default: now the last model is
reopened only when it is still there, and the status bar says so; else the default opens. File > Open
started inside the installed package's folder (the bundled model's); now it starts in the folder last
opened from, else the home folder.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QFileDialog

from explorer.core.checkpoint import default_model_name
from explorer.core.paths import models_dir
from explorer.ui.window.chrome.model_menu import LAST_KEY


def test_an_old_settings_file_reopens_its_model_only_when_present_and_says_so(qtbot, make_window, settings,
                                                                            tiny_checkpoint, tmp_path):
    settings.setValue(LAST_KEY, str(tiny_checkpoint))
    window = make_window()
    with qtbot.waitSignal(window.trace_applied, timeout=60_000):
        window.start()
    assert window.loaded.name == "tiny-a"
    line = window.status.currentMessage()
    assert f"Reopened {tiny_checkpoint}" in line and default_model_name() in line

    settings.setValue(LAST_KEY, str(tmp_path / "moved-away"))  # a model that is gone: the default, no error
    again = make_window()
    with qtbot.waitSignal(again.trace_applied, timeout=60_000):
        again.start()
    assert again.loaded.name == default_model_name()
    assert "Reopened" not in again.status.currentMessage()
    assert "moved-away" not in again.status.currentMessage()


def test_file_open_starts_at_home_then_in_the_last_folder_used(qtbot, window, monkeypatch, tiny_checkpoint):
    shown = []

    def dialog(parent, caption, folder, *rest, **kwargs):
        shown.append(folder)
        return (str(Path(tiny_checkpoint) / "config.json"), "") if len(shown) == 1 else ("", "")

    monkeypatch.setattr(QFileDialog, "getOpenFileName", dialog)
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", lambda parent, caption, folder, *a: shown.append(folder) or "")
    with qtbot.waitSignal(window.trace_applied, timeout=60_000):
        window.open_checkpoint(None)  # the default model, as on a first start: in the package's folder
    window.open_checkpoint_dialog()
    window.open_checkpoint_dialog()
    window.open_folder_dialog()
    assert shown[0] == str(Path.home())  # not the bundled models' folder
    assert not Path(shown[0]).resolve().is_relative_to(models_dir().resolve())
    assert shown[1] == shown[2] == str(tiny_checkpoint)  # where the user opened from last
