"""What the window shows about loading models (``LoadingChrome``, a collaborator of ``MainWindow``).

The Session loads; this part of the window follows it: the fallback notice or dialog, the recent
list and the Models menu, the layer/head ranges, the device controls, the status bar's model fields
and the title, a failed or cancelled load's message, and which prompt a new model traces first
(the user's if the model can read it, else a sample, after asking: ``prompt_for_model``; the Session
traces it once ``model_changed`` returns).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, QSettings
from PySide6.QtWidgets import QMessageBox, QWidget

from explorer.core.budget import global_budget
from explorer.core.paths import resources_dir
from explorer.core.analysis.layer_maps import max_maps
from explorer.ui.session.session import Session
from explorer.ui.session.workers import LoadRequest, LoadResult
from explorer.ui.window.chrome.model_menu import ModelMenus, RecentCheckpoints
from explorer.ui.window.chrome.run_controls import DeviceControls, LayerHeadControls
from explorer.ui.window.chrome.status_bar import StatusBar
from explorer.ui.window.window_state import prompt_for_model

if TYPE_CHECKING:
    from explorer.core.loaded import LoadedModel

APP_NAME = "Transformer Explorer"


def sample_prompts() -> list[str]:
    path = resources_dir() / "sample_prompts.txt"
    try:
        return [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except OSError:
        return []


class LoadingChrome(QObject):
    """Follows ``session``'s loads on the window's widgets (see the module docstring); ``parent`` is
    the window (dialogs and the title)."""

    def __init__(self, session: Session, parent: QWidget, settings: QSettings, status: StatusBar,
                 devices: DeviceControls, layer_head: LayerHeadControls, recent: RecentCheckpoints,
                 menus: ModelMenus) -> None:
        super().__init__(parent)
        self.session, self.window, self.settings, self.status = session, parent, settings, status
        self.devices, self.layer_head, self.recent, self.menus = devices, layer_head, recent, menus
        session.model_changed.connect(self._on_model_changed)
        session.load_refused.connect(self._on_load_failed)
        session.load_cancelled.connect(self._on_load_cancelled)
        session.loading.connect(lambda stage: status.set_loading(stage or None))
        session.load_progress.connect(status.set_progress)

    def _on_model_changed(self, result: LoadResult) -> None:
        """A new model is in the Session: the window's chrome follows, and the prompt it traces first is
        chosen (its trace is requested once this returns)."""
        loaded, request = result.model, result.request
        if result.errors:
            message = "\n".join(result.errors) + f"\n\nLoaded {loaded.name} instead."
            if request.quiet:
                self.status.notice(message.replace("\n", " "))
            else:
                QMessageBox.warning(self.window, "Could not load the checkpoint", message)
        self.recent.add(self.session.source)
        self.menus.current, self.menus.unfit = self.session.source, None
        cfg = loaded.config
        self.layer_head.set_ranges(cfg.n_layers, max_maps(cfg))  # a hybrid: its widest layer's heads
        self.devices.set_values(request.device, request.dtype)
        self.devices.set_weights(request.weights)
        self.devices.refresh()
        self.status.show_model(loaded.info())
        budget = global_budget()
        budget.follow_device(loaded.device)  # the device's default unless the user set one
        self.status.show_memory(budget.describe())
        if getattr(loaded, "notes", None):  # what the loader wants the user to know (caps, stand-ins)
            self.status.notice(" ".join(loaded.notes), 20_000)
        self.window.setWindowTitle(f"{loaded.name} — {APP_NAME}")
        self.session.keep_prompt(self.prompt_for(loaded, self.session.prompt))

    def _on_load_failed(self, message: str, request: LoadRequest) -> None:
        self._show_kept_settings()
        self.status.set_loading(None)
        self.status.notice(f"Could not load {request.source or 'the default model'}: {message}")
        if "Fit to this machine" in message and request.source:  # too big for the GPU: offer the placement
            self.menus.unfit = request.source
        if not request.quiet or self.session.loaded is None:
            details = self.session.last_error_details
            if details:  # a bug, not the user's input: the traceback goes in the details pane
                box = QMessageBox(QMessageBox.Icon.Critical, "Could not load the checkpoint", message,
                                  QMessageBox.StandardButton.Ok, self.window)
                box.setDetailedText(details)
                box.exec()
            else:
                QMessageBox.critical(self.window, "Could not load the checkpoint", message)

    def _on_load_cancelled(self, request: LoadRequest) -> None:
        self._show_kept_settings()
        loaded = self.session.loaded
        self.status.notice(f"Loading {request.source or 'the default model'} was cancelled"
                           + (f"; {loaded.name} stays open" if loaded is not None else ""))

    def _show_kept_settings(self) -> None:
        kept = self.session.model_request
        if kept is not None:  # keep the model that is there, and show its settings again
            self.devices.set_values(kept.device, kept.dtype)
            self.devices.set_weights(kept.weights)

    def prompt_for(self, loaded: LoadedModel, current: str) -> str:
        """The current prompt if the new model can read it; else a sample it can, after asking."""
        from explorer.core import worked_example

        last = str(self.settings.value("prompt/last", "") or "")
        candidates = [last] if last else []  # an empty box takes the last prompt, else a sample, unasked
        return prompt_for_model(self.window, loaded, current,
                                [*candidates, *sample_prompts(), worked_example.PROMPT])[0]
