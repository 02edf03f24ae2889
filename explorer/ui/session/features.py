"""FeatureState: the SAEs opened for the session's model, and the feature the user selected.

SAEs are opened from SAELens directories (``explorer.core.features.sae.open_sae``: headers checked
before anything is read) in a worker. Several at once, one per hook point: opening a second SAE on
the same hook point replaces the first. A directory trained on another model is refused with a
warning the user may override (``mismatch``); anything else wrong is one clear line (``failed``).
A new model closes them all (their hook points name the old model's layers).

Signals: ``changed()`` (an SAE opened, replaced or closed), ``selected_changed()`` (the selected
feature), ``failed(str)``, ``mismatch(str, str)`` (the warning, the directory).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, Signal

from explorer.core.errors import ExplorerError
from explorer.ui.session import background

if TYPE_CHECKING:
    from explorer.core.features.sae import SAE
    from explorer.core.loaded import LoadedModel


def _open(path: str, loaded: LoadedModel, allow_other_model: bool) -> SAE:
    from explorer.core.features.sae import open_sae

    return open_sae(path, loaded.config, getattr(loaded, "name", None), allow_other_model=allow_other_model)


class FeatureState(QObject):
    changed = Signal()
    selected_changed = Signal()
    failed = Signal(str)
    mismatch = Signal(str, str)
    opening = Signal(bool)

    def __init__(self, model: Callable[[], Any], parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._model = model  # the session's LoadedModel now (None: none)
        self.saes: list[SAE] = []
        self.selected: tuple[SAE, int] | None = None  # (sae, feature) chosen in the Features panel

    # --- opening ---------------------------------------------------------------------------------
    def open(self, path: str, allow_other_model: bool = False) -> None:
        """Open the SAE in ``path`` in a worker; ``changed`` (or ``failed`` / ``mismatch``) follows."""
        loaded = self._model()
        if loaded is None:
            self.failed.emit("Open a model first: an SAE is read against the open model's layers")
            return
        self.opening.emit(True)
        background.run(_open, str(path), loaded, allow_other_model, on_done=lambda sae: self._opened(sae, loaded),
                       on_error=lambda failure, p=str(path): self._error(failure.exc, p),
                       on_finished=lambda: self.opening.emit(False))

    def open_now(self, path: str, allow_other_model: bool = False) -> SAE:
        """Open on this thread (tests, benchmarks, notebooks); raises ``SAEError``."""
        loaded = self._model()
        if loaded is None:
            raise ExplorerError("open a model first")
        sae = _open(str(path), loaded, allow_other_model)
        self.add(sae)
        return sae

    def _opened(self, sae: SAE, loaded: Any) -> None:
        if self._model() is loaded:  # a model changed meanwhile: the SAE names the old one's layers
            self.add(sae)

    def _error(self, exc: BaseException, path: str) -> None:
        from explorer.core.features.sae import SAEModelMismatch

        if isinstance(exc, SAEModelMismatch):
            self.mismatch.emit(str(exc), path)
        elif isinstance(exc, (ExplorerError, OSError, MemoryError)):
            self.failed.emit(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        else:
            self.failed.emit(f"{path}: cannot open this SAE ({type(exc).__name__}: {str(exc)[:160]})")

    # --- the list --------------------------------------------------------------------------------
    def add(self, sae: SAE) -> None:
        self.saes = [s for s in self.saes if s.hook.key != sae.hook.key] + [sae]
        self.saes.sort(key=lambda s: (s.hook.block, s.hook.key))
        if self.selected is not None and self.selected[0] not in self.saes:
            self.select(None)
        self.changed.emit()

    def close_all(self) -> None:
        if self.saes:
            self.saes = []
            self.select(None)
            self.changed.emit()

    def select(self, sae: SAE | None, feature: int | None = None) -> None:
        chosen = None if sae is None or feature is None else (sae, int(feature))
        if chosen != self.selected:
            self.selected = chosen
            self.selected_changed.emit()
