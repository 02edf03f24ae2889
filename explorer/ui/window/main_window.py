"""The main window: wires the prompt, the panel docks, menus, toolbar and status bar together.

It owns no analysis: the ``ModelLoader`` and the ``TraceController`` (``explorer.ui.session.workers``)
run the model in worker threads, and panels draw the ``Trace`` they are handed.
"""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path
from typing import Any

from PySide6.QtCore import (
    QByteArray,
    QMimeData,
    QSettings,
    Qt,
    QThreadPool,
    Signal,
)
from PySide6.QtGui import (
    QAction,
    QCloseEvent,
    QDragEnterEvent,
    QDropEvent,
    QGuiApplication,
    QKeySequence,
)
from PySide6.QtWidgets import (
    QApplication,
    QFileDialog,
    QMainWindow,
    QMessageBox,
    QToolBar,
    QWidget,
)

from explorer.core.cancel import Cancel
from explorer.core.paths import resources_dir
from explorer.ui.window.about import show_about
from explorer.ui.window.docks import (
    PanelDock,
    add_generation_dock,
    dock_of,
    load_panel_classes,
    place_docks,
    size_docks,
)
from explorer.ui.window import export_actions
from explorer.ui.generation import GenerationPane
from explorer.ui.window.interventions import wire_interventions
from explorer.ui.window.open_trace import add_open_trace_action
from explorer.ui.panels.base import Panel
from explorer.ui.session.progressive import ProgressiveWork
from explorer.ui.session.selection import Selection
from explorer.ui.window.drawing import TraceDrawing
from explorer.ui.window.chrome.model_menu import ModelMenus, RecentCheckpoints
from explorer.ui.window.chrome.prompt_editor import PromptEditor
from explorer.ui.window.chrome.run_controls import DeviceControls, LayerHeadControls
from explorer.ui.window.chrome.status_bar import StatusBar
from explorer.ui.window.window_state import WindowState, prompt_for_model
from explorer.ui.session.workers import (
    LoadRequest,
    LoadResult,
    ModelLoader,
    TraceController,
)

log = logging.getLogger(__name__)

APP_NAME = "Transformer Explorer"
CLOSE_WAIT_MS = 1000  # closing waits at most this long for cancelled work to reach a layer boundary


def sample_prompts() -> list[str]:
    path = resources_dir() / "sample_prompts.txt"
    try:
        return [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except OSError:
        return []


def checkpoint_from_mime(mime: QMimeData) -> str | None:
    """The first local directory or file among dropped URLs (a checkpoint or a file inside one)."""
    for url in mime.urls() if mime.hasUrls() else []:
        if url.isLocalFile() and Path(url.toLocalFile()).exists():
            return url.toLocalFile()
    return None


def _builtin_names() -> list[str]:
    from explorer.core.checkpoint import builtin_names

    return builtin_names()


class MainWindow(TraceDrawing, QMainWindow):
    """Signals: model_loaded(LoadedModel), trace_applied(Trace), load_failed(str)."""

    model_loaded = Signal(object)
    trace_applied = Signal(object)
    load_failed = Signal(str)

    def __init__(self, settings: QSettings | None = None, device: str = "auto", dtype: str = "float32",
                 debounce_ms: int = 150, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.settings = settings if settings is not None else QSettings()
        self.setWindowTitle(APP_NAME)
        self.selection = Selection(self)
        self.loaded: Any = None  # the current LoadedModel
        self._model_request: LoadRequest | None = None
        self.source: str | None = None
        self.trace: Any = None
        self._drawing: Cancel | None = None  # set: the panels' drawing of the last trace is stale (_draw_panels)
        self._drawing_worker: Any = None
        self.last_update_seconds: float | None = None
        self.attention_export: Any = None  # a running File > Export attention maps (window_actions)
        self._stale: set[PanelDock] = set()
        self._last_panel: Panel | None = None
        self.recent = RecentCheckpoints(self.settings, _builtin_names)
        self.loader = ModelLoader(self)
        self.controller = TraceController(self._preparers, debounce_ms, self)
        self.progressive = ProgressiveWork(self)  # the panels' expensive views (explorer.ui.session.progressive)
        self._closing = False
        self._trim_pending = False
        self.prompt = PromptEditor(self)
        self.setCentralWidget(self.prompt)
        self.docks = self._build_docks()
        self.generation_dock = add_generation_dock(self, GenerationPane(self.selection))  # sets self.generation
        self.device_controls = DeviceControls(device, dtype, self)
        self.layer_head = LayerHeadControls(self.selection, self)
        self.status = StatusBar(self)
        self.setStatusBar(self.status)
        self.menus = ModelMenus(self.recent, _builtin_names, self)
        self._build_toolbar()
        self.interventions, self.intervention_strip = wire_interventions(self)  # explorer/ui/interventions/
        self._build_menus()
        self._connect()
        self.window_state = WindowState(self, APP_NAME)  # what the panels show, computing…, placeholders
        self.setAcceptDrops(True)
        self.setDockOptions(QMainWindow.DockOption.AnimatedDocks | QMainWindow.DockOption.AllowTabbedDocks
                            | QMainWindow.DockOption.AllowNestedDocks)
        self._default_size()
        self._default_state = self.saveState()
        self._sized_docks = self._restore_window()

    # --- building ----------------------------------------------------------------------------
    @property
    def panels(self) -> list[Panel]:
        return [dock.panel for dock in self.docks]

    def _build_docks(self) -> list[PanelDock]:
        docks = []
        for cls in load_panel_classes():
            try:
                panel = cls(self.selection)
            except Exception:  # noqa: BLE001 - one broken panel must not stop the window
                log.exception("skipping panel %s: its constructor failed", cls.__name__)
                continue
            panel.progressive = self.progressive
            dock = PanelDock(panel, self)
            dock.visibilityChanged.connect(lambda visible, d=dock: self._on_dock_visible(d, visible))
            docks.append(dock)
        place_docks(self, docks)
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

    def _action(self, menu, text: str, slot, shortcut: Any = None, tip: str = "") -> QAction:
        action = menu.addAction(text)
        action.triggered.connect(lambda _=False: slot())
        if shortcut is not None:
            action.setShortcut(QKeySequence(shortcut))
            action.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
        if tip:
            action.setStatusTip(tip)
        return action

    def _build_menus(self) -> None:
        bar = self.menuBar()
        file = bar.addMenu("&File")
        self._action(file, "&Open checkpoint…", self.open_checkpoint_dialog, QKeySequence.StandardKey.Open,
                     "Open a checkpoint: pick its config.json or weights file")
        self._action(file, "Open checkpoint &folder…", self.open_folder_dialog, "Ctrl+Shift+O")
        add_open_trace_action(self, file)  # File > Open trace… (explorer.ui.window.open_trace)
        self.hub_action = self._action(file, "Open from &Hugging Face cache…", self.open_hub_dialog, None,
                                       "Pick a model already downloaded to the Hugging Face cache (offline)")
        file.addMenu(self.menus.recent_menu)
        file.addSeparator()
        self.export_trace_action = self._action(file, "&Export trace…", self.export_trace, "Ctrl+E",
                                                "Write every array of the current trace to a .npz file")
        self.export_maps_action = self._action(file, "Export &attention maps…", self.export_attention_maps)
        self.export_maps_action.setEnabled(importlib.util.find_spec("explorer.ui.export.offscreen") is not None)
        file.addSeparator()
        self._action(file, "&Quit", self.close, QKeySequence.StandardKey.Quit).setShortcut(QKeySequence("Ctrl+Q"))
        bar.addMenu(self.menus.models_menu)

        prompt = bar.addMenu("&Prompt")
        self._action(prompt, "&Focus prompt", self.focus_prompt, "Ctrl+L")
        samples = prompt.addMenu("&Sample prompts")
        for text in sample_prompts():
            self._action(samples, text, lambda t=text: self.set_prompt(t))

        view = bar.addMenu("&View")
        for dock in self.docks:
            view.addAction(dock.toggleViewAction())
        view.addAction(self.generation_dock.toggleViewAction())
        view.addAction(self.toolbar.toggleViewAction())
        self._action(view, "&Reset layout", self.reset_layout)
        view.addSeparator()
        self._action(view, "Next layer", lambda: self.layer_head.step_layer(1), "Alt+Up")
        self._action(view, "Previous layer", lambda: self.layer_head.step_layer(-1), "Alt+Down")
        self._action(view, "Next head", lambda: self.layer_head.step_head(1), "Alt+Right")
        self._action(view, "Previous head", lambda: self.layer_head.step_head(-1), "Alt+Left")

        help_menu = bar.addMenu("&Help")
        self._action(help_menu, "&What am I looking at?", self.toggle_focused_explanation,
                     QKeySequence.StandardKey.HelpContents, "Explain the focused panel (F1)")
        self._action(help_menu, "&About", lambda: show_about(self))  # versions + Copy (explorer.ui.window.about)

    def _connect(self) -> None:
        self.prompt.text_edited.connect(self.controller.set_text)
        self.controller.trace_ready.connect(self._on_trace_ready)
        self.controller.requested.connect(lambda _id: self.progressive.cancel_all())  # a newer trace comes
        self.progressive.busy_changed.connect(lambda busy: None if busy else self._release_memory())
        self.controller.failed.connect(self._on_trace_failed)
        self.loader.stage.connect(self.status.set_loading)
        self.loader.progress.connect(self.status.set_progress)
        self.loader.cancelled.connect(self._on_load_cancelled)
        self.status.cancel_requested.connect(self.loader.cancel)
        self.loader.busy_changed.connect(lambda busy: None if busy else self.status.set_loading(None))
        self.loader.loaded.connect(self._on_model_loaded)
        self.loader.failed.connect(self._on_load_failed)
        self.menus.source_chosen.connect(lambda source: self.open_checkpoint(source))
        self.device_controls.changed.connect(self._on_device_changed)
        app = QApplication.instance()
        if isinstance(app, QApplication):
            app.focusChanged.connect(self._on_focus_changed)

    # --- loading -----------------------------------------------------------------------------
    def start(self, source: str | None = None) -> None:
        """First load: ``source``; else the last checkpoint if it still loads; else the default."""
        if source is not None:
            self.open_checkpoint(source, fallbacks=(None,))
        elif self.recent.last:
            self.open_checkpoint(self.recent.last, fallbacks=(None,), quiet=True)
        else:
            self.open_checkpoint(None)

    def open_checkpoint(self, source: str | None, fallbacks: tuple[str | None, ...] = (), quiet: bool = False,
                        device: str | None = None, dtype: str | None = None) -> LoadRequest:
        request = LoadRequest(None if source is None else str(source), device or self.device_controls.device,
                              dtype or self.device_controls.dtype, fallbacks, quiet)
        self.status.set_loading(f"Loading {source or 'the default model'}…")
        return self.loader.load(request)

    def open_checkpoint_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self, "Open checkpoint", self._dialog_dir(),
            "Checkpoint files (config.json *.safetensors *.bin *.pt *.ckpt);;All files (*)")
        if path:
            self.open_checkpoint(path)

    def open_hub_dialog(self) -> None:
        from explorer.ui.window.chrome.hub_dialog import HubCacheDialog

        dialog = HubCacheDialog(self)
        if dialog.exec() and dialog.chosen:
            self.open_checkpoint(dialog.chosen)

    def open_folder_dialog(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Open checkpoint folder", self._dialog_dir())
        if path:
            self.open_checkpoint(path)

    def _dialog_dir(self) -> str:
        return self.source if self.source and Path(self.source).exists() else str(Path.home())

    def _on_model_loaded(self, result: LoadResult) -> None:
        if self._closing:  # a load that finishes after the window closed starts nothing
            return
        loaded, request = result.model, result.request
        if result.errors:
            message = "\n".join(result.errors) + f"\n\nLoaded {loaded.name} instead."
            if request.quiet:
                self.status.notice(message.replace("\n", " "))
            else:
                QMessageBox.warning(self, "Could not load the checkpoint", message)
        self.loaded, self._model_request = loaded, request
        self.source = getattr(loaded, "repo_id", None) or result.source or (
            loaded.name if loaded.source == "built-in" else loaded.source)
        self.recent.add(self.source)
        self.menus.current = self.source
        cfg = loaded.config
        self.layer_head.set_ranges(cfg.n_layers, cfg.n_heads)
        self.device_controls.set_values(request.device, request.dtype)
        self.device_controls.refresh()
        self.status.show_model(loaded.info())
        if getattr(loaded, "notes", None):  # what the loader wants the user to know (caps, stand-ins)
            self.status.notice(" ".join(loaded.notes), 20_000)
        self.setWindowTitle(f"{loaded.name} — {APP_NAME}")
        for panel in self.panels:
            panel.set_tokenizer(loaded.tokenizer)
        self.controller.set_model(loaded)
        self.interventions.clear()  # they name this model's heads and neurons: a new model starts clean
        text = self._prompt_for(loaded)
        self.prompt.set_text(text)
        self.controller.request(text)
        self.model_loaded.emit(loaded)

    def _on_load_failed(self, message: str, request: LoadRequest) -> None:
        if self._closing:
            return
        if self._model_request is not None:  # keep the model that is there, and show its settings again
            self.device_controls.set_values(self._model_request.device, self._model_request.dtype)
        self.status.set_loading(None)
        self.status.notice(f"Could not load {request.source or 'the default model'}: {message}")
        self.load_failed.emit(message)
        if not request.quiet or self.loaded is None:
            details = self.loader.last_error_details
            if details:  # a bug, not the user's input: the traceback goes in the details pane
                box = QMessageBox(QMessageBox.Icon.Critical, "Could not load the checkpoint", message,
                                  QMessageBox.StandardButton.Ok, self)
                box.setDetailedText(details)
                box.exec()
            else:
                QMessageBox.critical(self, "Could not load the checkpoint", message)

    def _on_load_cancelled(self, request: LoadRequest) -> None:
        if self._model_request is not None:
            self.device_controls.set_values(self._model_request.device, self._model_request.dtype)
        self.status.set_loading(None)
        kept = f"; {self.loaded.name} stays open" if self.loaded is not None else ""
        self.status.notice(f"Loading {request.source or 'the default model'} was cancelled{kept}")

    def _on_device_changed(self, device: str, dtype: str) -> None:
        if self.source is not None:
            self.open_checkpoint(self.source, device=device, dtype=dtype)

    def _prompt_for(self, loaded: Any) -> str:
        """The current prompt if the new model can read it; else a sample it can, after asking."""
        from explorer.core import worked_example

        last = str(self.settings.value("prompt/last", "") or "")
        candidates = [last] if last else []  # an empty box takes the last prompt, else a sample, unasked
        return prompt_for_model(self, loaded, self.prompt.text(), [*candidates, *sample_prompts(),
                                                                    worked_example.PROMPT])[0]

    # --- tracing -----------------------------------------------------------------------------
    def set_prompt(self, text: str) -> None:
        self.prompt.set_text(text)
        self.window_state.request_started(text)
        self.controller.request(text)

    def focus_prompt(self) -> None:
        self.prompt.edit.setFocus(Qt.FocusReason.ShortcutFocusReason)
        self.prompt.edit.selectAll()

    def _on_trace_failed(self, message: str) -> None:
        self.prompt.show_error(message)
        self.status.notice(message)

    def show_generated(self, text: str, ids: list[int]) -> None:
        """Make a prompt and its generated tokens the current trace, tokenized exactly as ``ids``
        (encoding the decoded text again may cut it into other tokens)."""
        if self.loaded is None:
            return
        ids = list(ids)[: self.loaded.config.n_ctx]
        self.controller.pin_ids(text, ids)
        self.set_prompt(text)

    # --- exports -----------------------------------------------------------------------------
    def export_trace(self) -> None:
        export_actions.export_trace(self)

    def export_attention_maps(self) -> None:
        export_actions.export_attention_maps(self)

    # --- focus, help, layout -----------------------------------------------------------------
    def _on_focus_changed(self, _old: QWidget | None, new: QWidget | None) -> None:
        while new is not None and not isinstance(new, Panel):
            new = new.parentWidget()
        if new is not None and new in self.panels:
            self._last_panel = new

    def toggle_focused_explanation(self) -> None:
        panel = self._last_panel or next((d.panel for d in self.docks if self._shows(d)), None)
        if panel is None:
            return
        dock = dock_of(panel)
        if dock is not None:
            dock.show()
            dock.raise_()
        panel.show_explanation(not panel.explain_button.isChecked())

    def reset_layout(self) -> None:
        self.restoreState(self._default_state)
        for dock in self.docks:
            dock.show()

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
        self.settings.setValue("window/state", self.saveState())
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
        self.save_window()
        self._closing = True
        if self.attention_export is not None:  # stop before the next head; the worker ends in ms
            self.attention_export.cancel.set()
        self.loader.cancel_all()  # a load stops at its next tensor and is never applied
        self.controller.shutdown()  # a running forward pass stops at its next layer boundary
        self.progressive.shutdown()  # so do the panels' background views
        if self._drawing is not None:  # and the panels' preparation
            self._drawing.set()
        stop = getattr(self.generation, "stop", None)
        if callable(stop):
            stop()
        QThreadPool.globalInstance().waitForDone(CLOSE_WAIT_MS)
        super().closeEvent(event)
