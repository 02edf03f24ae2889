"""Help > About: what the app is, and the versions of everything it runs on, with a Copy button.

The engine's versions (Python, torch and CUDA, numpy, ...) come from
``explorer.core.device.runtime_versions``; the Qt side (Qt, PySide6, pyqtgraph, superqt) and the
loaded model's device are added here.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

import pyqtgraph as pg
from PySide6 import __version__ as pyside_version
from PySide6.QtCore import Qt, qVersion
from PySide6.QtGui import QGuiApplication, QIcon
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFrame,
    QHBoxLayout,
    QLabel,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from explorer.ui.icon import app_icon

if TYPE_CHECKING:
    from explorer.core.loaded import LoadedModel

APP_NAME = "Transformer Explorer"
WIDTH = 640  # the dialog's widest: long values (a GGUF file's quantisation line) wrap within it
MARGIN = 40  # kept free around the dialog on a small screen


def versions(loaded: LoadedModel | None = None) -> dict[str, str]:
    from explorer.core.device import runtime_versions

    info = runtime_versions()
    try:
        import superqt

        superqt_version = getattr(superqt, "__version__", "?")
    except ImportError:  # pragma: no cover - a dependency
        superqt_version = "not installed"
    info.update({"Qt": qVersion(), "PySide6": pyside_version, "pyqtgraph": pg.__version__, "superqt": superqt_version,
                 "platform": QGuiApplication.platformName() or "?"})
    if loaded is not None:
        info["model"] = f"{loaded.name} on {loaded.device} ({str(loaded.dtype).replace('torch.', '')})"
        gguf = next((n for n in getattr(loaded, "notes", []) if n.startswith("GGUF file")), None)
        if gguf:  # a quantised file: each type's tensor count, and that the numbers are the dequantised weights'
            info["weights"] = gguf
    return info


def versions_text(loaded: LoadedModel | None = None) -> str:
    info = versions(loaded)
    width = max(len(k) for k in info)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in info.items())


class AboutDialog(QDialog):
    def __init__(self, loaded: LoadedModel | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle(f"About {APP_NAME}")
        self.text = versions_text(loaded)
        icon = QLabel(self)
        icon.setPixmap(app_icon().pixmap(96, 96))
        title = QLabel(f"<h2>{APP_NAME}</h2><p>Look inside a transformer language model: every number of one "
                       "forward pass, computed offline on this machine.</p><p>MIT licence.</p>", self)
        title.setWordWrap(True)
        top = QHBoxLayout()
        top.addWidget(icon, 0, Qt.AlignmentFlag.AlignTop)
        top.addWidget(title, 1)
        rows = "".join(f"<tr><td style='padding-right: 12px; white-space: nowrap'><b>{html.escape(k)}</b></td>"
                       f"<td>{html.escape(v)}</td></tr>" for k, v in versions(loaded).items())
        self.table = QLabel(f"<table>{rows}</table>", self)
        self.table.setWordWrap(True)  # a long value wraps in its cell instead of widening the dialog
        self.table.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        scroll = QScrollArea(self)  # on a short screen the table scrolls; the buttons stay in view
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        scroll.setWidget(self.table)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close, self)
        self.copy_button = buttons.addButton("Copy", QDialogButtonBox.ButtonRole.ActionRole)
        self.copy_button.setToolTip("Copy these versions, e.g. for a bug report")
        self.copy_button.clicked.connect(self.copy)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(scroll, 1)
        layout.addWidget(buttons)
        self.setWindowIcon(QIcon(app_icon()))
        self._fit_screen(scroll)

    def _fit_screen(self, scroll: QScrollArea) -> None:
        """At most ``WIDTH`` wide and never larger than the screen (less ``MARGIN``): the table wraps and
        scrolls, the Close button stays on screen."""
        screen = self.screen() or QGuiApplication.primaryScreen()
        area = screen.availableGeometry() if screen is not None else None
        width = WIDTH if area is None else min(WIDTH, area.width() - MARGIN)
        self.table.setFixedWidth(width - 2 * self.layout().contentsMargins().left())
        table_height = self.table.heightForWidth(self.table.width())
        scroll.setMinimumHeight(min(table_height, 240))
        self.setMaximumSize(width, 16_777_215 if area is None else area.height() - MARGIN)
        height = self.layout().sizeHint().height() - scroll.minimumHeight() + table_height
        self.resize(width, height if area is None else min(height, area.height() - MARGIN))

    def copy(self) -> None:
        QGuiApplication.clipboard().setText(self.text)
        self.copy_button.setText("Copied")


def show_about(loaded: LoadedModel | None, parent: QWidget) -> AboutDialog:
    dialog = AboutDialog(loaded, parent)
    dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    dialog.show()
    return dialog
