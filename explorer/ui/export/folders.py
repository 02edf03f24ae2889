"""Where export dialogs start and how the window says what was written: the last folder used is
kept in the window's settings, multi-file exports go into a new named subfolder, and every export
ends with a status-bar message naming what was written where."""

from __future__ import annotations

import re
from pathlib import Path

from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QMainWindow, QWidget

KEY = "export/last_folder"
MESSAGE_MS = 15_000


def _settings(widget: QWidget | None) -> QSettings:
    window = widget.window() if widget is not None else None
    settings = getattr(window, "settings", None)
    return settings if isinstance(settings, QSettings) else QSettings()


def last_folder(widget: QWidget | None) -> str:
    """The folder the last export went to (if it still exists), else the home folder."""
    value = str(_settings(widget).value(KEY, "") or "")
    return value if value and Path(value).is_dir() else str(Path.home())


def remember(widget: QWidget | None, folder: str | Path) -> None:
    settings = _settings(widget)
    settings.setValue(KEY, str(folder))
    settings.sync()


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-._") or "export"


def new_subfolder(parent: str | Path, name: str) -> Path:
    """A new folder ``parent/name`` (``name-2``, ``name-3``, … when taken), created."""
    parent = Path(parent)
    candidate, i = parent / slug(name), 2
    while candidate.exists():
        candidate = parent / f"{slug(name)}-{i}"
        i += 1
    candidate.mkdir(parents=True)
    return candidate


def tell(widget: QWidget | None, message: str) -> None:
    """Show ``message`` in the window's status bar (the app's StatusBar.notice when there is one)."""
    window = widget.window() if widget is not None else None
    status = getattr(window, "status", None)
    if status is not None and hasattr(status, "notice"):
        status.notice(message, MESSAGE_MS)
    elif isinstance(window, QMainWindow):
        window.statusBar().showMessage(message, MESSAGE_MS)
