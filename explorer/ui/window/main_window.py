"""The main window: lays out the prompt, the panel docks, menus, toolbar and status bar around one
``Session`` (``explorer.ui.session``).

It owns no analysis and no shared state: the Session loads models and runs traces in worker threads
and holds the model, the trace, the selection and the interventions; the window's parts (the docks,
``PanelDrawing``, ``WindowState``, the export actions, the trace-file opener) are handed the Session
and the widgets they draw on, never the window. Closing the window shuts the Session down (its
workers stop and nothing they still send is applied) and deletes the window's widgets.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

import shiboken6
from PySide6.QtCore import QByteArray, QMimeData, QSettings, Qt, SignalInstance
from PySide6.QtGui import QCloseEvent, QDragEnterEvent, QDropEvent, QGuiApplication
from PySide6.QtWidgets import QApplication, QMainWindow, QToolBar, QWidget

from explorer.ui.generation import GenerationPane
from explorer.ui.panels.base import Panel
from explorer.ui.panels.registry import available
from explorer.ui.session.interventions import InterventionState
from explorer.ui.session.presenter import Presenter
from explorer.ui.session.progressive import ProgressiveWork
from explorer.ui.session.selection import Selection
from explorer.ui.session.session import Session
from explorer.ui.session.workers import LoadRequest, ModelLoader, TraceController
from explorer.ui.widgets.plots import adopt_plot_menus
from explorer.ui.window import export_actions, places
from explorer.ui.window.applicable import PanelApplicability
from explorer.ui.window.chrome.intervention_strip import InterventionStrip
from explorer.ui.window.chrome.model_menu import ModelMenus, RecentCheckpoints
from explorer.ui.window.chrome.prompt_area import add_prompt_area
from explorer.ui.window.chrome.prompt_editor import PromptEditor
from explorer.ui.window.chrome.run_controls import DeviceControls, LayerHeadControls
from explorer.ui.window.chrome.status_bar import StatusBar
from explorer.ui.window.chrome.timeline_bar import add_timeline_bar
from explorer.ui.window.compare_view import add_compare_dock, ask_and_compare
from explorer.ui.window.corpus_runs import CorpusRuns
from explorer.ui.window.docks import PanelDock, add_generation_dock, dock_of, place_docks, size_docks
from explorer.ui.window.drawing import PanelDrawing
from explorer.ui.window.features import FeatureTools
from explorer.ui.window.interventions import add_intervention_bar
from explorer.ui.window.loading import APP_NAME, LoadingChrome, sample_prompts
from explorer.ui.window.menus import build_menus
from explorer.ui.window.open_trace import TraceFileOpener
from explorer.ui.window.remote_trace import RemoteTraceOpener
from explorer.ui.window.session_files import SessionFiles
from explorer.ui.window.window_state import WindowState

if TYPE_CHECKING:
    from explorer.core.loaded import LoadedModel
    from explorer.core.trace import Trace

log = logging.getLogger(__name__)

__all__ = ["APP_NAME", "MainWindow", "checkpoint_from_mime", "sample_prompts"]


def checkpoint_from_mime(mime: QMimeData) -> str | None:
    """The first local directory or file among dropped URLs (a checkpoint or a file inside one)."""
    for url in mime.urls() if mime.hasUrls() else []:
        if url.isLocalFile() and Path(url.toLocalFile()).exists():
            return url.toLocalFile()
    return None


def _builtin_names() -> list[str]:
    from explorer.core.checkpoint import builtin_names

    return builtin_names()


class MainWindow(QMainWindow):
    """The window around one ``Session`` (``self.session``).

    Signals (the Session's and the drawing's, named here for callers): ``model_loaded(LoadedModel)``,
    ``trace_applied(Trace)`` (every shown panel has drawn it: the presenter's ``drawn``), ``load_failed(str)``.
    ``presenter`` is the Session's: ``presenter.is_idle()`` says nothing more is coming.
    The window is deleted when it is closed (``WA_DeleteOnClose``); its Session outlives it only as
    long as something still refers to it."""

    def __init__(self, settings: QSettings | None = None, device: str = "auto", dtype: str = "float32",
                 debounce_ms: int = 150, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self.settings = settings if settings is not None else QSettings()
        self.setWindowTitle(APP_NAME)
        # no Qt parent: the workers' callbacks may still reach the Session after the window is deleted
        self.session = Session(debounce_ms)
        self.attention_export: export_actions.AttentionMapsExport | None = None  # a running File > Export attention maps
        self._last_panel: Panel | None = None
        self.recent = RecentCheckpoints(self.settings, _builtin_names)
        self.prompt = PromptEditor(self)
        self.prompt_area = add_prompt_area(self)  # the raw prompt, or the conversation editor in its place
        self.docks = self._build_docks()
        self.generation = GenerationPane(self.session.selection)
        self.generation_dock = add_generation_dock(self, self.session, self.generation)
        self.device_controls = DeviceControls(device, dtype, self)
        self.layer_head = LayerHeadControls(self.session.selection, self)
        self.status = StatusBar(self)
        self.setStatusBar(self.status)
        self.menus = ModelMenus(self.recent, _builtin_names, self)
        self.loading = LoadingChrome(self.session, self, self.settings, self.status, self.device_controls,
                                     self.layer_head, self.recent, self.menus)
        self.drawing = PanelDrawing(self.session, self.docks, self.prompt, self.status, self.isVisible, self)
        self.trace_files = TraceFileOpener(self.session, self, self.prompt, self.status, self.layer_head)
        self.remote_traces = RemoteTraceOpener(self.settings, self.prompt.text, self.trace_files.show, self.menus, self)
        self._build_toolbar()
        self.timeline_bar = add_timeline_bar(self, self.session, self.generation)  # step through a generation
        self.compare_dock = add_compare_dock(self, self.session)  # Models > Compare with another model…
        self.intervention_strip: InterventionStrip = add_intervention_bar(self, self.session)
        self.feature_tools = FeatureTools(self)  # File > Open SAE…, the Steering tab
        self.session_files = SessionFiles(self)  # File > Save session…, Open session…, Export as script…
        self.corpus_runs = CorpusRuns(self)  # File > Run over a corpus…, Open corpus run…
        actions = build_menus(self)
        self.open_trace_action, self.hub_action = actions.open_trace, actions.hub
        self.export_trace_action, self.export_maps_action = actions.export_trace, actions.export_maps
        self._connect()
        self.window_state = WindowState(self.session, self.prompt, self.status, self.docks, APP_NAME, self)
        self.window_state.title_changed.connect(self.setWindowTitle)
        self.setAcceptDrops(True)
        self.setDockOptions(QMainWindow.DockOption.AnimatedDocks | QMainWindow.DockOption.AllowTabbedDocks
                            | QMainWindow.DockOption.AllowNestedDocks)
        self._default_size()
        self._default_state = self.saveState()
        self._sized_docks = self._restore_window()

    # --- the Session's state, read through the window (tests, notebooks) ----------------------------------
    @property
    def model_loaded(self) -> SignalInstance:
        return self.session.model_loaded

    @property
    def load_failed(self) -> SignalInstance:
        return self.session.load_failed

    @property
    def trace_applied(self) -> SignalInstance:
        return self.drawing.applied

    @property
    def presenter(self) -> Presenter:
        return self.session.presenter

    def panel(self, panel_id: str) -> Panel | None:
        """The panel of ``panel_id`` (its registry id: "attention"), None if the window has none."""
        return next((dock.panel for dock in self.docks if dock.panel_id == panel_id), None)

    def dock(self, panel_id: str) -> PanelDock | None:
        return next((dock for dock in [*self.docks, self.generation_dock] if dock.panel_id == panel_id), None)

    @property
    def loaded(self) -> LoadedModel | None:
        return self.session.loaded

    @property
    def trace(self) -> Trace | None:
        return self.session.trace

    @property
    def source(self) -> str | None:
        return self.session.source

    @property
    def selection(self) -> Selection:
        return self.session.selection

    @property
    def interventions(self) -> InterventionState:
        return self.session.interventions

    @property
    def controller(self) -> TraceController:
        return self.session.controller

    @property
    def loader(self) -> ModelLoader:
        return self.session.loader

    @property
    def progressive(self) -> ProgressiveWork:
        return self.session.progressive

    @property
    def last_update_seconds(self) -> float | None:
        return self.drawing.last_update_seconds

    @property
    def panels(self) -> list[Panel]:
        return [dock.panel for dock in self.docks]

    # --- building ----------------------------------------------------------------------------
    def _build_docks(self) -> list[PanelDock]:
        docks = []
        for record, cls in available():
            try:
                panel = cls(self.session.selection)
            except Exception:  # noqa: BLE001 - one broken panel must not stop the window
                log.exception("skipping panel %s: its constructor failed", record.id)
                continue
            panel.attach(self.session)
            docks.append(PanelDock(panel, self))
        self.tab_titles = place_docks(self, docks)  # short tab titles, the full one in the tooltip and View menu
        self.applicable = PanelApplicability(self.session, docks, self)  # hide the docks that do not apply
        return docks

    def _build_toolbar(self) -> None:
        bar = QToolBar("Controls", self)
        bar.setObjectName("toolbar-controls")
        bar.setMovable(True)
        bar.addWidget(self.device_controls)
        bar.addSeparator()
        bar.addWidget(self.layer_head)
        self.addToolBar(Qt.ToolBarArea.TopToolBarArea, bar)
        self.toolbar = bar

    def _connect(self) -> None:
        session = self.session
        self.prompt.text_edited.connect(session.edit_prompt)
        session.prompt_changed.connect(self.prompt.set_text)
        session.failed.connect(self._on_trace_failed)
        session.panel_requested.connect(self.raise_panel)
        self.status.cancel_requested.connect(self._cancel_load)
        self.menus.source_chosen.connect(lambda source: self.open_checkpoint(source))
        self.menus.fit_chosen.connect(lambda source: self.open_checkpoint(source, fit=True))
        self.menus.compare_chosen.connect(lambda: ask_and_compare(self, self.session, self._dialog_dir()))
        self.device_controls.changed.connect(self._on_device_changed)
        self.device_controls.weights_changed.connect(lambda _w: self._on_device_changed(
            self.device_controls.device, self.device_controls.dtype))  # reopened with the new way to hold them
        app = QApplication.instance()
        if isinstance(app, QApplication):
            app.focusChanged.connect(self._on_focus_changed)

    # --- loading -----------------------------------------------------------------------------
    def start(self, source: str | None = None) -> None:
        """First load: ``source``; else the last model if it is still there (said in the status bar); else the
        default (``places``)."""
        last = places.first_model(self.recent) if source is None else None
        if last is not None:
            places.say_reopened(self.session, self.status, last)
        self.open_checkpoint(source or last, fallbacks=(None,) if source or last else (), quiet=last is not None)

    def open_checkpoint(self, source: str | None, fallbacks: tuple[str | None, ...] = (), quiet: bool = False,
                        device: str | None = None, dtype: str | None = None, fit: bool = False) -> LoadRequest:
        return self.session.open(source, device or self.device_controls.device, dtype or self.device_controls.dtype,
                                 fallbacks, quiet, fit=fit, weights=self.device_controls.weights)

    def _cancel_load(self) -> None:
        self.loader.cancel()  # looked up now: a test replaces it

    def open_checkpoint_dialog(self) -> None:
        path = places.ask_checkpoint(self, self.settings)  # starts in the last folder used, else home
        if path:
            self.open_checkpoint(path)

    def open_hub_dialog(self) -> None:
        from explorer.ui.window.chrome.hub_dialog import HubCacheDialog

        dialog = HubCacheDialog(self)
        if dialog.exec() and dialog.chosen:
            self.open_checkpoint(dialog.chosen)

    def open_get_dialog(self) -> None:
        """File > Get a model…: download from the Hub on request, then open it (its sample prompt analysed)."""
        from explorer.ui.window.get_model import GetModelDialog

        dialog = GetModelDialog(self.settings, self)
        if dialog.exec() and dialog.chosen:
            self.open_checkpoint(dialog.chosen)

    def open_folder_dialog(self) -> None:
        path = places.ask_checkpoint(self, self.settings, folder=True, caption="Open checkpoint folder")
        if path:
            self.open_checkpoint(path)

    def open_trace_file(self, path: str | Path) -> object:
        """File > Open trace… without the dialog: read ``path`` in the background and show it."""
        return self.trace_files.open(path)

    def _dialog_dir(self) -> str:
        return places.start_folder(self.settings)

    def _on_device_changed(self, device: str, dtype: str) -> None:
        if self.session.source is not None:
            self.open_checkpoint(self.session.source, device=device, dtype=dtype)

    # --- tracing -----------------------------------------------------------------------------
    def set_prompt(self, text: str) -> None:
        self.session.set_prompt(text)

    def show_generated(self, text: str, ids: list[int]) -> None:
        """Make a prompt and its generated tokens the current trace, tokenized exactly as ``ids``."""
        self.session.trace_ids(text, ids)

    def focus_prompt(self) -> None:
        self.prompt.edit.setFocus(Qt.FocusReason.ShortcutFocusReason)
        self.prompt.edit.selectAll()

    def _on_trace_failed(self, message: str) -> None:
        self.prompt.show_error(message)
        self.status.notice(message)

    # --- exports -----------------------------------------------------------------------------
    def export_trace(self) -> None:
        export_actions.export_trace(self.session, self)

    def export_attention_maps(self, directory: str | None = None) -> export_actions.AttentionMapsExport | None:
        """File > Export attention maps… (one at a time); ``directory``: skip the folder dialog."""
        if self.attention_export is not None:
            return None
        self.attention_export = export_actions.export_attention_maps(self.session, self, directory,
                                                                     self._attention_export_finished)
        return self.attention_export

    def _attention_export_finished(self, export: export_actions.AttentionMapsExport) -> None:
        if self.attention_export is export:
            self.attention_export = None

    # --- focus, help, layout -----------------------------------------------------------------
    def _on_focus_changed(self, _old: QWidget | None, new: QWidget | None) -> None:
        while new is not None and not isinstance(new, Panel):
            new = new.parentWidget()
        if new is not None and new in self.panels:
            self._last_panel = new
            self.presenter.set_focus(next(d.panel_id for d in self.docks if d.panel is new))  # drawn first

    def toggle_focused_explanation(self) -> None:
        panel = self._last_panel or next((d.panel for d in self.docks if self.drawing.shows(d)), None)
        if panel is None:
            return
        dock = dock_of(panel)
        if dock is not None:
            dock.show()
            dock.raise_()
        panel.show_explanation(not panel.explain_button.isChecked())

    def raise_panel(self, panel_id: str) -> None:
        """Show the dock of the panel ``panel_id`` (Session.show_panel: the diagram, the tour)."""
        dock = self.dock(panel_id)
        if dock is not None:
            dock.show(), dock.raise_()

    def reset_layout(self) -> None:
        self.restoreState(self._default_state)
        self.applicable.show_all()  # then hides again those that do not apply to the model

    def _default_size(self) -> None:
        """Most of the screen on a first start (later starts restore the saved geometry)."""
        screen = QGuiApplication.primaryScreen()
        area = screen.availableGeometry() if screen is not None else None
        if area is None or area.width() < 400:
            self.resize(1400, 900)
            return
        width, height = min(int(area.width() * 0.94), 1800), min(int(area.height() * 0.94), 1150)
        self.setGeometry(area.x() + (area.width() - width) // 2, area.y() + (area.height() - height) // 2,
                         width, height)

    def _restore_window(self) -> bool:
        geometry, state = self.settings.value("window/geometry"), self.settings.value("window/state")
        if isinstance(geometry, QByteArray):
            self.restoreGeometry(geometry)
        return isinstance(state, QByteArray) and self.restoreState(state)

    def showEvent(self, event) -> None:  # noqa: N802 - Qt override
        super().showEvent(event)
        if not self._sized_docks:  # dock sizes only take once the window has its size
            self._sized_docks = True
            size_docks(self, self.docks, self.generation_dock)

    def save_window(self) -> None:
        self.settings.setValue("window/geometry", self.saveGeometry())
        self.settings.setValue("window/state", self.applicable.saved_state(self))
        self.settings.setValue("prompt/last", self.prompt.text())
        self.settings.sync()

    # --- drag and drop, closing --------------------------------------------------------------
    def dragEnterEvent(self, event: QDragEnterEvent) -> None:  # noqa: N802 - Qt override
        if checkpoint_from_mime(event.mimeData()):
            event.acceptProposedAction()
        else:
            event.ignore()

    def dropEvent(self, event: QDropEvent) -> None:  # noqa: N802
        path = checkpoint_from_mime(event.mimeData())
        if path:
            event.acceptProposedAction()
            self.open_checkpoint(path)

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802
        """Stop every worker and dialog of this window; nothing they still send reaches it."""
        if self.session.closed:  # closed before (a second close() before the deferred delete ran)
            super().closeEvent(event)
            return
        self.save_window()
        if self.attention_export is not None:  # stops before the next head; its dialog goes now
            self.attention_export.shutdown()
            self.attention_export = None
        self.generation.shutdown()
        self.feature_tools.shutdown()
        self.corpus_runs.shutdown()
        self.drawing.shutdown()
        self.session.shutdown()  # loads, traces and the panels' views stop; waits briefly for them
        app = QApplication.instance()
        if isinstance(app, QApplication):
            app.focusChanged.disconnect(self._on_focus_changed)
        adopt_plot_menus(self)  # pyqtgraph's parentless menus are deleted with the window (WA_DeleteOnClose)
        super().closeEvent(event)

    def close(self) -> bool:
        """Close the window; a window that was closed (and so deleted) before stays closed."""
        return super().close() if shiboken6.isValid(self) else True

    def deleteLater(self) -> None:  # noqa: N802 - Qt override
        if shiboken6.isValid(self):
            super().deleteLater()
