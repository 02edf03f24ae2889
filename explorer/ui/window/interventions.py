"""Wiring the session's interventions into the main window (kept out of main_window.py)."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QToolBar

from explorer.ui.session.interventions import InterventionState
from explorer.ui.window.chrome.intervention_strip import InterventionStrip


def wire_interventions(window: Any) -> tuple[InterventionState, InterventionStrip]:
    """One InterventionState for the window: every panel edits and marks it, the strip (a toolbar
    row of its own) toggles it, and every trace and generation runs with its active interventions."""
    state = InterventionState(window)
    for panel in window.panels:
        panel.set_interventions(state)
        if hasattr(panel, "run_prompt"):  # the patching view runs the corrupted prompt with one patch
            panel.run_prompt.connect(window.set_prompt)
    strip = InterventionStrip(state, window)
    bar = QToolBar("Interventions", window)
    bar.setObjectName("toolbar-interventions")
    bar.addWidget(strip)
    window.addToolBarBreak(Qt.ToolBarArea.TopToolBarArea)
    window.addToolBar(Qt.ToolBarArea.TopToolBarArea, bar)

    def changed() -> None:
        active = state.active()
        window.controller.interventions = active
        window.generation.active_interventions = active  # generate with them too
        window.controller.request()

    state.changed.connect(changed)
    return state, strip
