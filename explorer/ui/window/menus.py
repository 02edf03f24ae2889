"""The main window's menu bar (File, Models, Prompt, View, Help), built from the window's verbs."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QMenu

from explorer.ui.window.about import show_about
from explorer.ui.window.loading import sample_prompts
from explorer.ui.window.verify_dialog import verify_model

if TYPE_CHECKING:
    from explorer.ui.window.main_window import MainWindow


@dataclass(frozen=True)
class MenuActions:
    open_trace: QAction
    hub: QAction
    export_trace: QAction
    export_maps: QAction


def add_action(menu: QMenu, text: str, slot: Callable[[], object],
               shortcut: QKeySequence | QKeySequence.StandardKey | str | None = None, tip: str = "") -> QAction:
    """A menu entry calling ``slot``, with a window-wide ``shortcut`` and a status-bar ``tip``."""
    action = menu.addAction(text)
    action.triggered.connect(lambda _=False: slot())
    if shortcut is not None:
        action.setShortcut(QKeySequence(shortcut))
        action.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
    if tip:
        action.setStatusTip(tip)
    return action


def _ask_budget(window: MainWindow) -> None:
    from explorer.ui.window.budget_setting import ask_memory_budget

    line = ask_memory_budget(window, window.settings)
    if line is not None:
        window.status.show_memory(line)
        window.status.notice(line)


def build_menus(window: MainWindow) -> MenuActions:
    """The menu bar: File, Models, Prompt, View, Help; returns the actions others enable or trigger."""
    bar = window.menuBar()
    file = bar.addMenu("&File")
    add_action(file, "&Open checkpoint…", window.open_checkpoint_dialog, QKeySequence.StandardKey.Open,
               "Open a checkpoint: pick its config.json or weights file")
    add_action(file, "Open checkpoint &folder…", window.open_folder_dialog, "Ctrl+Shift+O")
    open_trace = add_action(file, "Open &trace…", window.trace_files.dialog, None,
                            "Open a trace.safetensors exported by this app (no model needed)")
    add_action(file, "&Get a model…", window.open_get_dialog, None,
               "Download a real model from the Hugging Face Hub (only when you press Download), then open it")
    hub = add_action(file, "Open from &Hugging Face cache…", window.open_hub_dialog, None,
                     "Pick a model already downloaded to the Hugging Face cache (offline)")
    add_action(file, "Open &SAE…", window.feature_tools.opener.dialog, None,
               "Open a sparse autoencoder (SAELens directory, or a folder of them) for the open model")
    add_action(file, "&Run over a corpus…", window.corpus_runs.run_dialog, None,
               "Read a corpus with the open model: every neuron's, feature's and head's evidence over many texts")
    add_action(file, "Open corpus r&un…", window.corpus_runs.open_dialog, None,
               "Open a database a corpus run of this model wrote (checked against the open model)")
    file.addMenu(window.menus.recent_menu)
    file.addSeparator()
    add_action(file, "Open sessio&n…", window.session_files.open_dialog, None,
               "Reopen a saved session: its model (checked against the saved hash), prompt, selection, "
               "interventions, settings and layout")
    add_action(file, "Sa&ve session…", window.session_files.save_dialog, "Ctrl+Shift+S",
               "Save what the window shows, to reopen it exactly later")
    add_action(file, "Export as scri&pt…", window.session_files.export_script_dialog, None,
               "Write a Python script using explorer.core that recomputes what is on screen and prints the numbers")
    file.addSeparator()
    export_trace = add_action(file, "&Export trace…", window.export_trace, "Ctrl+E",
                              "Write every array of the current trace to a .npz file")
    export_maps = add_action(file, "Export &attention maps…", window.export_attention_maps)
    export_maps.setEnabled(importlib.util.find_spec("explorer.ui.offscreen") is not None)
    file.addSeparator()
    add_action(file, "&Quit", window.close, QKeySequence.StandardKey.Quit).setShortcut(QKeySequence("Ctrl+Q"))
    bar.addMenu(window.menus.models_menu)

    prompt = bar.addMenu("&Prompt")
    add_action(prompt, "&Focus prompt", window.focus_prompt, "Ctrl+L")
    samples = prompt.addMenu("&Sample prompts")
    for text in sample_prompts():
        add_action(samples, text, lambda t=text: window.set_prompt(t))

    view = bar.addMenu("&View")
    for dock in window.docks:
        view.addAction(dock.toggleViewAction())
    view.addAction(window.generation_dock.toggleViewAction())
    view.addAction(window.toolbar.toggleViewAction())
    add_action(view, "&Reset layout", window.reset_layout)
    add_action(view, "&Memory budget…", lambda: _ask_budget(window), None,
               "How much memory traces and their cached views may keep (the rest is recomputed)")
    view.addSeparator()
    add_action(view, "Next layer", lambda: window.layer_head.step_layer(1), "Alt+Up")
    add_action(view, "Previous layer", lambda: window.layer_head.step_layer(-1), "Alt+Down")
    add_action(view, "Next head", lambda: window.layer_head.step_head(1), "Alt+Right")
    add_action(view, "Previous head", lambda: window.layer_head.step_head(-1), "Alt+Left")

    help_menu = bar.addMenu("&Help")
    add_action(help_menu, "&What am I looking at?", window.toggle_focused_explanation,
               QKeySequence.StandardKey.HelpContents, "Explain the focused panel (F1)")
    add_action(help_menu, "&Verify this model…", lambda: verify_model(window.session, window),
               tip="Check this checkpoint against transformers' own model from the same files (never downloads)")
    add_action(help_menu, "&Start here: the model diagram", lambda: window.session.show_panel("diagram"),
               None, "The open model drawn as a flow with this prompt's numbers; 'Follow this token…' starts a tour")
    add_action(help_menu, "&About", lambda: show_about(window.session.loaded, window))  # versions + Copy
    return MenuActions(open_trace, hub, export_trace, export_maps)
