"""What the user sees, for the UI tests: every panel dock on screen at once, and a plot's numbers as its
right-click export writes them."""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import Qt


def every_panel_on_screen(qtbot, window) -> None:
    """Every panel dock side by side (the default layout tabs them), each panel told it is on screen, and
    the panels that missed the trace on screen drawn (``presenter.is_idle``)."""
    docks = window.docks
    for dock in docks[2:]:
        window.splitDockWidget(docks[1], dock, Qt.Orientation.Horizontal)
    for dock in docks:
        dock.show()
    for dock in docks:  # a tab brought forward says so through visibilityChanged; split offscreen, Qt says nothing
        if dock.isVisible():
            dock.visibilityChanged.emit(True)
    qtbot.waitUntil(lambda: sum(p.on_screen for p in window.panels) >= 4 and window.presenter.is_idle(),
                    timeout=60_000)


def exported(panel, name: str) -> np.ndarray:
    """The numbers of ``panel``'s plot ``name`` as right-click > Export data writes them."""
    (exportable,) = [e for e in panel.exportables() if e.name == name]
    return np.asarray(exportable.data()[0])
