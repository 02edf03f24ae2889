"""The app's icon (a causal attention pattern), for windows, the taskbar and desktop menus.

``resources/icons/`` holds it as SVG and as a 256 px PNG; the same files are installed as
``share/icons/hicolor/.../transformer-explorer`` beside ``share/applications/transformer-explorer.desktop``
(pyproject's shared-data). ``DESKTOP_FILE_NAME`` tells Wayland compositors which .desktop file,
and so which icon, belongs to the window.
"""

from __future__ import annotations

from functools import lru_cache

from PySide6.QtCore import Qt
from PySide6.QtGui import QIcon, QPixmap

from explorer.core.paths import resources_dir

DESKTOP_FILE_NAME = "transformer-explorer"


@lru_cache(maxsize=1)
def app_icon() -> QIcon:
    folder = resources_dir() / "icons"
    icon = QIcon()
    png = QPixmap(str(folder / "transformer-explorer.png"))
    if not png.isNull():
        for size in (16, 24, 32, 48, 64, 128, 256):
            icon.addPixmap(png.scaled(size, size, Qt.AspectRatioMode.KeepAspectRatio,
                                      Qt.TransformationMode.SmoothTransformation))
    return icon
