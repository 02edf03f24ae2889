"""Panels that do not apply to the model are hidden: a dock whose panel says it has nothing to show
for the Session's model (``Panel.applies_to(config)``, e.g. Masked tokens for a decoder) is hidden
and its View-menu entry disabled; it comes back, in its place, for a model it applies to. Only docks
hidden here are shown again: a panel the user closed stays closed."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from PySide6.QtCore import QByteArray, QObject
from PySide6.QtWidgets import QMainWindow

from explorer.ui.session.session import Session

NOT_APPLICABLE = "{title}: does not apply to this model"


class PanelApplicability(QObject):
    def __init__(self, session: Session, docks: list, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.docks = docks
        self.hidden_here: set[str] = set()  # object names of the docks hidden because they do not apply
        self.config: Any = None
        session.model_changed.connect(lambda result: self.apply(result.model.config))
        session.presenter.shown.connect(lambda frame: self.apply(frame.trace.config))
        # a panel with an ``available()`` (Features: an SAE is open) is shown only while it says so, from the start
        session.features.changed.connect(lambda: None if self.config is None else self.apply(self.config))
        session.corpus.changed.connect(lambda: None if self.config is None else self.apply(self.config))  # Head finder
        for dock in docks:
            if not getattr(dock.panel, "available", lambda: True)():
                self.hidden_here.add(dock.objectName())
                dock.hide()
                dock.panel.set_on_screen(False)  # never shown yet: no visibilityChanged tells the drawing
                dock.toggleViewAction().setEnabled(False)

    def apply(self, config: Any) -> None:
        self.config = config
        for dock in self.docks:
            action = dock.toggleViewAction()
            try:
                applies = bool(dock.panel.applies_to(config)) and bool(getattr(dock.panel, "available", lambda: True)())
            except Exception:  # noqa: BLE001 - a panel that cannot tell is shown, as before
                applies = True
            name = dock.objectName()
            if applies:
                action.setEnabled(True)
                action.setToolTip(dock.panel.title)
                if name in self.hidden_here:
                    self.hidden_here.discard(name)
                    dock.show()
            else:
                if not dock.isHidden():
                    self.hidden_here.add(name)
                    dock.hide()
                action.setEnabled(False)
                action.setToolTip(NOT_APPLICABLE.format(title=dock.panel.title))

    def show_all(self) -> None:
        """Every dock shown (the layout reset), then those that do not apply to the model hidden again."""
        for dock in self.docks:
            dock.show()
        self.hidden_here.clear()
        if self.config is not None:
            self.apply(self.config)

    def saved_state(self, window: QMainWindow) -> QByteArray:
        """``window.saveState()`` with the docks hidden here shown: a saved layout must not remember
        them as closed by the user (the next model may need them)."""
        with self.shown():
            return window.saveState()

    @contextmanager
    def shown(self) -> Iterator[None]:
        """Every dock hidden here shown for the duration (a saved layout must not remember them as
        closed by the user: the next model may need them)."""
        names = set(self.hidden_here)
        for dock in self.docks:
            if dock.objectName() in names:
                dock.show()
        try:
            yield
        finally:
            for dock in self.docks:
                if dock.objectName() in names:
                    dock.hide()
