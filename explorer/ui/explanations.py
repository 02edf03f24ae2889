""""What am I looking at?": a panel's explanation (resources/explanations/<name>.md) in its own
window, rendered from Markdown with headings, lists and the formula blocks, at a readable size,
instead of a few lines squeezed above the plots. The window is not modal (read it beside the plots)
and remembers nothing but its size."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QFont, QFontDatabase
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

WIDTH, HEIGHT = 620, 640  # about 75 characters a line; shrunk to the screen when smaller


def explanation_browser(parent: QWidget | None = None) -> QTextBrowser:
    """A read-only text browser for an explanation: body text a little larger than the UI's, formula
    blocks in the fixed-width font (so the aligned columns of ``Q = X·W_Q   K = …`` stay aligned)."""
    browser = QTextBrowser(parent)
    browser.setOpenExternalLinks(False)
    browser.setOpenLinks(False)
    font = QFont(browser.font())
    font.setPointSizeF(max(font.pointSizeF(), 9.0) * 1.1)
    browser.setFont(font)
    fixed = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
    browser.document().setDefaultStyleSheet(f"pre, code {{ font-family: '{fixed.family()}'; }}")
    browser.document().setDocumentMargin(14)
    return browser


class ExplanationWindow(QDialog):
    """One panel's explanation as a separate, non-modal window (``show_markdown`` fills it)."""

    def __init__(self, title: str, parent: QWidget | None = None) -> None:
        super().__init__(parent, Qt.WindowType.Window)
        self.setWindowTitle(f"What am I looking at? \u2014 {title}")
        self.setModal(False)
        self.text = explanation_browser(self)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close, self)
        buttons.rejected.connect(self.close)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addWidget(self.text, 1)
        layout.addWidget(buttons)
        self.resize(WIDTH, HEIGHT)
        self._sized = False

    def load(self, path: Path | None) -> bool:
        """Render ``path`` (Markdown) once; False when there is no such file."""
        if self.text.toMarkdown().strip():
            return True
        if path is None or not path.is_file():
            return False
        self.text.setMarkdown(path.read_text(encoding="utf-8"))
        return True

    def present(self) -> None:
        """Show beside the window it belongs to, inside the screen."""
        if not self._sized:
            self._sized = True
            screen = (self.parentWidget() or self).screen()
            area = screen.availableGeometry() if screen is not None else None
            if area is not None and area.width() > 300:
                self.resize(min(WIDTH, area.width() - 40), min(HEIGHT, area.height() - 60))
                self.move(area.right() - self.width() - 20, area.top() + 40)
        self.show()
        self.raise_()
        self.activateWindow()
