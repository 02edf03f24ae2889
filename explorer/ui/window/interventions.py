"""The interventions strip's toolbar row in the main window (the state itself is the Session's)."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMainWindow, QToolBar

from explorer.ui.session.session import Session
from explorer.ui.window.chrome.intervention_strip import InterventionStrip


def add_intervention_bar(window: QMainWindow, session: Session) -> InterventionStrip:
    """The strip (a toolbar row of its own under the controls) toggles the session's interventions;
    every panel edits and marks them (``Panel.attach``) and every trace and generation runs with the
    active ones (``Session``)."""
    strip = InterventionStrip(session.interventions, window)
    bar = QToolBar("Interventions", window)
    bar.setObjectName("toolbar-interventions")
    bar.addWidget(strip)
    window.addToolBarBreak(Qt.ToolBarArea.TopToolBarArea)
    window.addToolBar(Qt.ToolBarArea.TopToolBarArea, bar)
    return strip
