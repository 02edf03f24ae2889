"""Following the system's light or dark appearance, plots included.

Qt's own widgets follow the platform palette by themselves; pyqtgraph draws with the background and
foreground set in its global options, which ``explorer.ui`` sets to white and black at import. Here
they are set from the application palette (``Base`` behind plots, ``Text`` for axes and labels)
before any window exists, and every plot already built is repainted when the system switches
between light and dark while the app runs. Muted text uses ``palette(placeholder-text)`` in its style
sheet rather than a fixed grey, so it stays readable on both.

``--color-scheme light|dark`` (or ``TRANSFORMER_EXPLORER_COLOR_SCHEME``) forces one scheme: with
Qt >= 6.8 through ``QStyleHints.setColorScheme``; before, with a Fusion dark palette.
"""

from __future__ import annotations

import os

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QGuiApplication, QPalette
from PySide6.QtWidgets import QApplication, QStyleFactory

SCHEMES = ("auto", "light", "dark")
ENV = "TRANSFORMER_EXPLORER_COLOR_SCHEME"


def is_dark(palette: QPalette | None = None) -> bool:
    palette = palette or QGuiApplication.palette()
    return palette.color(QPalette.ColorRole.Window).lightness() < palette.color(QPalette.ColorRole.WindowText).lightness()


def plot_colours(palette: QPalette | None = None) -> tuple[QColor, QColor]:
    """(background, foreground) for plots: the palette's Base and Text roles."""
    palette = palette or QGuiApplication.palette()
    return palette.color(QPalette.ColorRole.Base), palette.color(QPalette.ColorRole.Text)


def _dark_palette() -> QPalette:
    p = QPalette()
    colours = {QPalette.ColorRole.Window: "#2b2d30", QPalette.ColorRole.WindowText: "#e6e6e6",
               QPalette.ColorRole.Base: "#1e1f22", QPalette.ColorRole.AlternateBase: "#2b2d30",
               QPalette.ColorRole.Text: "#e6e6e6", QPalette.ColorRole.Button: "#3c3f41",
               QPalette.ColorRole.ButtonText: "#e6e6e6", QPalette.ColorRole.Highlight: "#3d6fb4",
               QPalette.ColorRole.HighlightedText: "#ffffff", QPalette.ColorRole.ToolTipBase: "#3c3f41",
               QPalette.ColorRole.ToolTipText: "#e6e6e6", QPalette.ColorRole.PlaceholderText: "#9a9a9a",
               QPalette.ColorRole.Link: "#6ea8fe", QPalette.ColorRole.Mid: "#5a5d61"}
    for role, colour in colours.items():
        p.setColor(role, QColor(colour))
    return p


def force_scheme(app: QApplication, scheme: str) -> None:
    """Use ``scheme`` ('light' or 'dark') whatever the system says; 'auto' leaves the system's."""
    if scheme not in SCHEMES:
        raise ValueError(f"colour scheme must be one of {SCHEMES}")
    if scheme == "auto":
        return
    wanted = Qt.ColorScheme.Dark if scheme == "dark" else Qt.ColorScheme.Light
    hints = app.styleHints()
    if hasattr(hints, "setColorScheme"):  # Qt >= 6.8
        hints.setColorScheme(wanted)
    if is_dark(app.palette()) != (scheme == "dark"):  # the platform theme ignored it (offscreen, old Qt)
        app.setStyle(QStyleFactory.create("Fusion"))
        app.setPalette(_dark_palette() if scheme == "dark" else app.style().standardPalette())


def apply_plot_colours(app: QApplication | None = None) -> None:
    """pyqtgraph's defaults from the palette, and every existing plot repainted with them."""
    app = app or QApplication.instance()
    background, foreground = plot_colours(app.palette() if app is not None else None)
    pg.setConfigOptions(background=background, foreground=foreground)
    if app is None:
        return
    for widget in app.allWidgets():
        if "palette(" in widget.styleSheet():  # style sheets read the palette when applied: apply again
            widget.setStyleSheet(widget.styleSheet())
        if isinstance(widget, pg.GraphicsView):
            widget.setBackground(background)
            scene = widget.scene()
            for item in scene.items() if scene is not None else []:
                if isinstance(item, pg.AxisItem):
                    item.setPen(foreground)
                    item.setTextPen(foreground)
                elif isinstance(item, pg.LabelItem):
                    item.setText(item.text, color=foreground)


def follow_system(app: QApplication, scheme: str | None = None) -> None:
    """Apply ``scheme`` (default: the environment's, else the system's) and keep following changes."""
    force_scheme(app, scheme or os.environ.get(ENV, "auto"))
    apply_plot_colours(app)
    hints = app.styleHints()
    if hasattr(hints, "colorSchemeChanged"):
        hints.colorSchemeChanged.connect(lambda _scheme: apply_plot_colours(app))
