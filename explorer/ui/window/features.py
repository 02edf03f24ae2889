"""File ▸ Open SAE…: SAELens directories opened for the session's model (``session/features.py``).

A directory with ``cfg.json`` is one SAE; a directory whose subdirectories hold SAEs opens each of
them (one per layer). An SAE trained on another model asks before it is used; a directory that
cannot be opened is one line in a warning. Once an SAE is open the Features dock is shown and raised.
``FeatureTools`` is what the window adds: the opener and the Steering tab (``generation/steering.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QFileDialog, QMessageBox, QTabWidget, QWidget

from explorer.core.features.sae import CFG
from explorer.ui.generation.steering import SteeringPane

if TYPE_CHECKING:
    from explorer.ui.session.session import Session
    from explorer.ui.window.docks import PanelDock

MAX_SUBDIRECTORIES = 64


def sae_directories(path: str) -> list[str]:
    """``path`` itself when it holds ``cfg.json``, else its subdirectories that do (sorted), else ``[path]``
    (so that opening it says what is missing)."""
    root = Path(path)
    if (root / CFG).exists() or not root.is_dir():
        return [str(root)]
    found = sorted(str(p) for p in root.iterdir() if p.is_dir() and (p / CFG).exists())
    return found[:MAX_SUBDIRECTORIES] or [str(root)]


class SAEOpener(QObject):
    """Opens SAEs for ``session`` on behalf of ``parent`` (the window); shows ``dock`` once one is open."""

    def __init__(self, session: Session, dock: PanelDock | None, parent: QWidget) -> None:
        super().__init__(parent)
        self.session, self.dock, self.window = session, dock, parent
        self.last_error: str | None = None
        state = session.features
        state.failed.connect(self._failed)
        state.mismatch.connect(self._mismatch)
        state.changed.connect(self._changed)

    def dialog(self) -> None:
        path = QFileDialog.getExistingDirectory(self.window, "Open SAE (a SAELens directory, or a folder of them)")
        if path:
            self.open(path)

    def open(self, path: str, allow_other_model: bool = False) -> None:
        for directory in sae_directories(path):
            self.session.features.open(directory, allow_other_model)

    def _failed(self, line: str) -> None:
        self.last_error = line
        QMessageBox.warning(self.window, "Open SAE", line)

    def _mismatch(self, line: str, path: str) -> None:
        answer = QMessageBox.question(self.window, "Open SAE", f"{line}.\n\nUse it on this model anyway?")
        if answer == QMessageBox.StandardButton.Yes:
            self.session.features.open(path, allow_other_model=True)

    def _changed(self) -> None:
        if self.dock is not None and self.session.features.saes:
            self.dock.show()
            self.dock.raise_()


class FeatureTools(QObject):
    """What the window adds for learned features: the SAE opener and the Steering tab, beside the generation
    pane's in its dock (one dock, two tabs: the pane and ``generation/steering.py``'s SteeringPane)."""

    def __init__(self, window: Any) -> None:
        super().__init__(window)
        features = window.dock("features")
        self.opener = SAEOpener(window.session, features, window)
        self.steering = SteeringPane(window.session, window.generation)
        self.tabs = QTabWidget()
        self.tabs.setObjectName("generation-tabs")
        self.tabs.setDocumentMode(True)
        window.generation.body.setContentsMargins(2, 4, 2, 4)  # in a tab: the dock no wider than the pane was
        # verbs, not the dock's own title: the dock's tab above already reads "Generation"
        self.tabs.addTab(window.generation, "Generate")
        self.tabs.addTab(self.steering, "Steer")
        self.tabs.setTabToolTip(0, "Generate a continuation: the sampling controls and the streamed tokens")
        self.tabs.setTabToolTip(1, "Steer the generation: add a direction to the residual stream and compare")
        window.generation_dock.setWidget(self.tabs)

    def show_steering(self) -> None:
        self.tabs.setCurrentWidget(self.steering)

    def shutdown(self) -> None:
        self.steering.shutdown()
