"""Where the window starts: the first model, and the folder the Open dialogs show first.

* The first model is the command line's, else the one open when the app last closed, only if it is
  still there, and then the status bar says so (an old settings file silently reopened a model the user
  did not expect); else the bundled default.
* File ▸ Open (checkpoint, folder, compare) starts in the folder the user last opened from, else the
  home folder; never inside the installed package (the bundled models' folder is not where a user
  keeps checkpoints).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QFileDialog, QWidget

if TYPE_CHECKING:
    from explorer.ui.session.session import Session
    from explorer.ui.window.chrome.model_menu import RecentCheckpoints
    from explorer.ui.window.chrome.status_bar import StatusBar

KEY = "open/last_folder"
REOPENED_MS = 20_000
CHECKPOINT_FILTER = "Checkpoint files (config.json *.safetensors *.bin *.pt *.ckpt *.gguf);;All files (*)"


def _bundled_folders() -> list[Path]:
    from explorer.core import paths

    package = Path(paths.__file__).resolve().parents[1]  # explorer/
    return [package, paths.models_dir().resolve(), paths.resources_dir().resolve()]


def inside_package(path: str | Path) -> bool:
    """Whether ``path`` is in the installed package (its code, bundled models or resources)."""
    try:
        resolved = Path(path).expanduser().resolve()
    except (OSError, RuntimeError):
        return False
    return any(resolved == folder or folder in resolved.parents for folder in _bundled_folders())


def start_folder(settings: QSettings) -> str:
    """The folder an Open dialog shows first: the last one used (still there, not the package's), else home."""
    value = str(settings.value(KEY, "") or "")
    if value and Path(value).is_dir() and not inside_package(value):
        return value
    return str(Path.home())


def remember_folder(settings: QSettings, chosen: str | Path) -> None:
    """Keep the folder of ``chosen`` (a file's folder, or the folder itself) for the next Open dialog."""
    path = Path(chosen)
    folder = path if path.is_dir() else path.parent
    if not inside_package(folder):
        settings.setValue(KEY, str(folder))
        settings.sync()


def ask_checkpoint(parent: QWidget, settings: QSettings, folder: bool = False,
                   caption: str = "Open checkpoint") -> str | None:
    """File ▸ Open checkpoint… (a file) or Open checkpoint folder… (``folder``): the path chosen, or None."""
    if folder:
        path = QFileDialog.getExistingDirectory(parent, caption, start_folder(settings))
    else:
        path, _ = QFileDialog.getOpenFileName(parent, caption, start_folder(settings), CHECKPOINT_FILTER)
    if path:
        remember_folder(settings, path)
    return path or None


def first_model(recent: RecentCheckpoints) -> str | None:
    """The model to open when none is named: the last one if it is still there, else None (the default)."""
    last = recent.last
    return last if last and recent.present(last) else None


def say_reopened(session: Session, status: StatusBar, source: str) -> None:
    """Once ``source`` has loaded, say in the status bar that it is the last session's model, not the default."""
    def loaded(model: object) -> None:
        session.model_loaded.disconnect(loaded)
        if session.source != source:
            return  # it did not load (the default came instead): the loader's own line says why
        from explorer.core.checkpoint import default_model_name

        earlier = status.currentMessage()  # what the loader wanted said (a GGUF file's types), kept after this
        status.notice(f"Reopened {source}, the model open when the app last closed (Models ▸ "
                      f"{default_model_name()} is the default)." + (f"  {earlier}" if earlier else ""), REOPENED_MS)

    session.model_loaded.connect(loaded)
