"""File > Recent checkpoints and the Models menu, with the recent list kept in QSettings."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QObject, QSettings, Signal
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QMenu, QWidget

from explorer.core.checkpoint.hub_cache import REPO_ID, cache_dir, repo_folder_name

RECENT_KEY = "checkpoint/recent"
LAST_KEY = "checkpoint/last"
MAX_RECENT = 8


def _local_model(source: str) -> bool:
    from explorer.core.checkpoint.local_stores import resolve
    from explorer.core.errors import CheckpointError

    try:
        return resolve(source) is not None
    except (CheckpointError, OSError):
        return False


def _as_list(value: object) -> list[str]:
    # QSettings returns a str for a one-element list in INI files, and None when unset.
    if value is None:
        return []
    if isinstance(value, str):
        return [value] if value else []
    return [str(v) for v in value]  # type: ignore[union-attr]


class RecentCheckpoints:
    """The most recently loaded checkpoints, newest first, at most ``MAX_RECENT``.

    Entries are directories/files, built-in names or Hugging Face repository ids (``org/name``);
    paths that no longer exist (and ids no longer cached) are dropped whenever the list is read.
    """

    def __init__(self, settings: QSettings, builtin: Callable[[], list[str]] | None = None) -> None:
        self.settings = settings
        self._builtin = builtin

    def present(self, source: str) -> bool:
        """Whether ``source`` is still there to open (a path, a cached repository id, a local model name,
        a built-in name)."""
        return self._exists(source)

    def _exists(self, source: str) -> bool:
        if Path(source).expanduser().exists():
            return True
        if REPO_ID.match(source) and (cache_dir() / repo_folder_name(source)).is_dir():
            return True  # a Hugging Face repository id: kept while it is in the cache
        if _local_model(source):  # an Ollama model name, an LM Studio publisher/repo/file.gguf
            return True
        if REPO_ID.match(source):
            return False
        if self._builtin is None:  # cannot tell a built-in name from a missing path: keep it
            return "/" not in source and "\\" not in source
        return source in self._builtin()

    def entries(self) -> list[str]:
        stored = _as_list(self.settings.value(RECENT_KEY))
        kept = [s for s in stored if self._exists(s)][:MAX_RECENT]
        if kept != stored:
            self._store(kept)
        return kept

    def add(self, source: str) -> None:
        if source.startswith("memory:"):  # a notebook's in-memory model (explorer.show): nothing to reopen
            return
        entries = [source] + [s for s in self.entries() if s != source]
        self._store(entries[:MAX_RECENT])
        self.settings.setValue(LAST_KEY, source)

    def clear(self) -> None:
        self._store([])

    @property
    def last(self) -> str | None:
        value = self.settings.value(LAST_KEY)
        return str(value) if value else None

    def _store(self, entries: list[str]) -> None:
        self.settings.setValue(RECENT_KEY, entries)
        self.settings.sync()


class ModelMenus(QObject):
    """Builds "Recent checkpoints" and "Models" menus; both are filled when about to show.

    Signals
    -------
    source_chosen(str)
        A recent checkpoint or a built-in model was picked.
    """

    source_chosen = Signal(str)
    fit_chosen = Signal(str)  # Models > Fit … to this machine: load it again, laid out across GPU, CPU and disk
    remote_chosen = Signal()  # Models > Trace a remote model (NDIF)…
    compare_chosen = Signal()  # Models > Compare with another model…

    def __init__(self, recent: RecentCheckpoints, builtin: Callable[[], list[str]], parent: QWidget) -> None:
        super().__init__(parent)
        self.recent = recent
        self._builtin = builtin
        self.recent_menu = QMenu("Recent checkpoints", parent)
        self.models_menu = QMenu("&Models", parent)
        self.current: str | None = None
        self.unfit: str | None = None  # the last source refused because it does not fit the GPU
        self.recent_menu.aboutToShow.connect(self.fill_recent)
        self.models_menu.aboutToShow.connect(self.fill_models)

    def fill_recent(self) -> None:
        menu = self.recent_menu
        menu.clear()
        entries = self.recent.entries()
        for i, source in enumerate(entries):
            action = menu.addAction(f"&{i + 1}  {source}")
            action.setData(source)
            action.triggered.connect(lambda _=False, s=source: self.source_chosen.emit(s))
        if not entries:
            menu.addAction("(none yet)").setEnabled(False)
        menu.addSeparator()
        menu.addAction("Clear list", self.recent.clear).setEnabled(bool(entries))

    def is_current(self, name: str) -> bool:
        """Whether the built-in model ``name`` is the one loaded (by name, or by its bundled path)."""
        if not self.current:
            return False
        if name == self.current:
            return True
        from explorer.core.paths import models_dir

        try:
            return Path(self.current).resolve() == (models_dir() / name).resolve()
        except OSError:
            return False

    def fill_models(self) -> None:
        menu = self.models_menu
        menu.clear()
        names = self._builtin()
        ticked = False
        for name in names:
            action = menu.addAction(name)
            action.setCheckable(True)
            action.setChecked(self.is_current(name))
            ticked = ticked or action.isChecked()
            action.triggered.connect(lambda _=False, s=name: self.source_chosen.emit(s))
        if self.current and not ticked:  # a checkpoint from disk: named, ticked, above the built-ins
            menu.insertSeparator(menu.actions()[0] if menu.actions() else None)
            action = QAction(Path(self.current).name or self.current, menu)
            action.setToolTip(self.current)
            action.setCheckable(True)
            action.setChecked(True)
            action.setEnabled(False)
            menu.insertAction(menu.actions()[0], action)
        if self.unfit:
            menu.addSeparator()
            fit = menu.addAction(f"Fit {Path(self.unfit).name or self.unfit} to this machine")
            fit.setToolTip("load it again with its layers on the GPU while they fit, then CPU memory, then disk")
            fit.triggered.connect(lambda _=False, s=self.unfit: self.fit_chosen.emit(s))
        menu.addSeparator()
        remote = menu.addAction("Trace a remote model (NDIF)…")
        remote.setToolTip("trace the prompt through nnsight on an NDIF server, or on this machine; shown like a trace file")
        remote.triggered.connect(lambda _=False: self.remote_chosen.emit())
        compare = menu.addAction("Compare with another model…")
        compare.setToolTip("open a second model with the same tokenizer beside this one, on the same prompt")
        compare.triggered.connect(lambda _=False: self.compare_chosen.emit())
