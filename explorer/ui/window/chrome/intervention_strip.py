"""The "Interventions" strip: one toggle per intervention of the session, a remove button, Clear all.

Checked means active: the traces are run with it. The strip rebuilds itself whenever the
:class:`~explorer.ui.session.interventions.InterventionState` changes.
"""

from __future__ import annotations

from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QToolButton, QWidget

from explorer.ui.session.interventions import InterventionState

HINT = "none: right-click a head, a neuron or a residual cell to switch it off"


class InterventionStrip(QWidget):
    def __init__(self, state: InterventionState, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self.layout_ = QHBoxLayout(self)
        self.layout_.setContentsMargins(4, 0, 4, 0)
        self.title = QLabel("<b>Interventions:</b>", self)
        self.hint = QLabel(HINT, self)
        self.hint.setStyleSheet("color: gray")
        self.clear_button = QPushButton("Clear all", self)
        self.clear_button.clicked.connect(state.clear)
        self.toggles: list[QPushButton] = []
        self._removers: list[QToolButton] = []
        state.changed.connect(self.rebuild)
        self.rebuild()

    def rebuild(self) -> None:
        for w in [*self.toggles, *self._removers]:
            self.layout_.removeWidget(w)
            w.hide()  # at once: deleteLater waits for the event loop
            w.deleteLater()
        self.toggles, self._removers = [], []
        while self.layout_.count():
            self.layout_.takeAt(0)
        self.layout_.addWidget(self.title)
        for i, entry in enumerate(self.state.entries):
            toggle = QPushButton(entry.intervention.label, self)
            toggle.setCheckable(True)
            toggle.setChecked(entry.enabled)
            toggle.setToolTip("Checked: active in every run. Uncheck to compare without it.")
            toggle.setStyleSheet("QPushButton:checked { background: #ffd6d6; color: #a00000; font-weight: bold; }")
            toggle.toggled.connect(lambda on, i=i: self.state.toggle(i, on))
            remove = QToolButton(self)
            remove.setText("\u00d7")
            remove.setToolTip(f"Remove {entry.intervention.label}")
            remove.clicked.connect(lambda _=False, i=i: self.state.remove(i))
            self.layout_.addWidget(toggle)
            self.layout_.addWidget(remove)
            self.toggles.append(toggle)
            self._removers.append(remove)
        self.hint.setVisible(not self.state.entries)
        self.layout_.addWidget(self.hint)
        self.layout_.addStretch(1)
        self.clear_button.setEnabled(bool(self.state.entries))
        self.layout_.addWidget(self.clear_button)
