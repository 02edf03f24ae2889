"""The foot of a dialog that runs a job on a worker (Get a model, Run over a corpus): a progress bar, a status
line, and the buttons to start, cancel and close."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QBoxLayout, QHBoxLayout, QLabel, QProgressBar, QPushButton, QWidget

ERROR_STYLE = "color: #c0392b;"


def add_job_rows(layout: QBoxLayout, parent: QWidget, start: str,
                 cancel: str) -> tuple[QProgressBar, QLabel, QPushButton, QPushButton, QPushButton]:
    """Add to ``layout`` a progress bar (0 to 1,000, no text), a word-wrapped status line one can select and copy,
    and right-aligned buttons ``start`` (the default), ``cancel`` (off until a job runs) and Close; returns them
    in that order."""
    bar = QProgressBar(parent)
    bar.setRange(0, 1000)
    bar.setTextVisible(False)
    status = QLabel("", parent)
    status.setWordWrap(True)
    status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    layout.addWidget(bar)
    layout.addWidget(status)
    buttons = QHBoxLayout()
    buttons.addStretch(1)
    start_button, cancel_button, close_button = (QPushButton(start, parent), QPushButton(cancel, parent),
                                                 QPushButton("Close", parent))
    start_button.setDefault(True)
    cancel_button.setEnabled(False)
    for button in (start_button, cancel_button, close_button):
        buttons.addWidget(button)
    layout.addLayout(buttons)
    return bar, status, start_button, cancel_button, close_button


def say(status: QLabel, text: str, error: bool = False) -> None:
    """Show ``text`` on the status line, in red when it is an error."""
    status.setStyleSheet(ERROR_STYLE if error else "")
    status.setText(text)
