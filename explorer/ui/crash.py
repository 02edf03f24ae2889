"""The global exception hook: an unexpected error shows a dialog with its details and a Copy
button, and the app keeps running.

PySide6 hands an exception raised in a slot or a Qt override to ``sys.excepthook`` and carries on
with the event loop; a thread's uncaught exception goes to ``threading.excepthook``. Both are
routed here, logged, and shown once per distinct error in ``ErrorDialog`` on the GUI thread (a
queued signal brings a worker thread's error there). Errors the user can fix (``ExplorerError``)
are shown by their own code paths as one line; this hook is for bugs.
"""

from __future__ import annotations

import logging
import sys
import threading
import traceback
from types import TracebackType

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QFontDatabase, QGuiApplication
from PySide6.QtWidgets import (
    QApplication,
    QDialog,
    QDialogButtonBox,
    QLabel,
    QPlainTextEdit,
    QVBoxLayout,
    QWidget,
)

log = logging.getLogger(__name__)


def report_text(exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None) -> str:
    """The traceback and the versions (Help > About's text), ready to paste into a bug report."""
    from explorer.ui.window.about import versions_text

    details = "".join(traceback.format_exception(exc_type, exc, tb))
    try:
        versions = versions_text()
    except Exception as version_error:  # noqa: BLE001 - the report must not fail on its own
        versions = f"(versions unavailable: {version_error})"
    return f"{details}\n{versions}"


class ErrorDialog(QDialog):
    """The error's one-line summary, the full report in a read-only box, Copy and Close buttons."""

    def __init__(self, summary: str, report: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Unexpected error")
        self.report = report
        self.summary = QLabel(f"<b>Something went wrong</b>, but the app is still running.<br>{_escape(summary)}", self)
        self.summary.setWordWrap(True)
        self.summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.details = QPlainTextEdit(report, self)
        self.details.setReadOnly(True)
        self.details.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.details.setMinimumSize(640, 260)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close, self)
        self.copy_button = buttons.addButton("Copy details", QDialogButtonBox.ButtonRole.ActionRole)
        self.copy_button.clicked.connect(self.copy)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(self.summary)
        layout.addWidget(QLabel("Details (please include them when you report the problem):", self))
        layout.addWidget(self.details, 1)
        layout.addWidget(buttons)

    def copy(self) -> None:
        QGuiApplication.clipboard().setText(self.report)
        self.copy_button.setText("Copied")


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class ExceptionHook(QObject):
    """Installed as ``sys.excepthook`` and ``threading.excepthook``; shows each error in a dialog."""

    error = Signal(str, str)  # summary, report; queued to the GUI thread

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.dialogs: list[ErrorDialog] = []
        self._seen: set[str] = set()
        self._previous = (sys.excepthook, threading.excepthook)
        self.error.connect(self._show, Qt.ConnectionType.QueuedConnection)

    def install(self) -> ExceptionHook:
        sys.excepthook = self.handle
        threading.excepthook = lambda args: self.handle(args.exc_type, args.exc_value, args.exc_traceback)
        return self

    def uninstall(self) -> None:
        sys.excepthook, threading.excepthook = self._previous

    def handle(self, exc_type: type[BaseException], exc: BaseException | None, tb: TracebackType | None) -> None:
        if exc_type is not None and issubclass(exc_type, (KeyboardInterrupt, SystemExit)):
            self._previous[0](exc_type, exc, tb)  # type: ignore[arg-type]
            return
        exc = exc if exc is not None else exc_type()
        log.error("unexpected error", exc_info=(exc_type, exc, tb))
        try:
            self.error.emit(f"{exc_type.__name__}: {exc}", report_text(exc_type, exc, tb))
        except RuntimeError:  # the hook outlived its Qt object (interpreter shutting down)
            self._previous[0](exc_type, exc, tb)  # type: ignore[arg-type]

    def _show(self, summary: str, report: str) -> None:
        if summary in self._seen:  # the same error again (a paint loop): one dialog is enough
            return
        self._seen.add(summary)
        parent = QApplication.activeWindow()
        dialog = ErrorDialog(summary, report, parent)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.finished.connect(lambda _=0, d=dialog: self._closed(d, summary))
        self.dialogs.append(dialog)
        dialog.show()

    def _closed(self, dialog: ErrorDialog, summary: str) -> None:
        if dialog in self.dialogs:
            self.dialogs.remove(dialog)
        self._seen.discard(summary)


_hook: list[ExceptionHook] = []


def install_exception_hook(app: QApplication) -> ExceptionHook:
    """Install the hook once per process (later calls return the same one)."""
    if not _hook:
        _hook.append(ExceptionHook(app).install())
    return _hook[0]
