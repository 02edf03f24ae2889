"""The head-statistics heatmap's "over the corpus" switch: every head coloured by its mean score over the open
corpus run (``CorpusRun.head_scores``) instead of this prompt's. Shown only while a run with head statistics is
open (``session/corpus.py``); ``of(name)`` is what the overview asks before computing the prompt's values."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from PySide6.QtWidgets import QCheckBox


@dataclass(frozen=True)
class CorpusStatistic:
    """One statistic over the run: [L, H] values, its chance level, where it comes from (for titles) and the
    window length (entropy's colour levels reach ln of it)."""

    values: np.ndarray
    chance: float
    source: str
    window: int


class CorpusScores:
    """The checkbox and what it switches on. ``redraw()``: draw the statistics again (showing them if hidden)."""

    def __init__(self, redraw: Callable[[], None]) -> None:
        self.redraw = redraw
        self.state: Any = None
        self.toggle = QCheckBox("over the corpus")
        self.toggle.setToolTip("Colour every head by its mean score over the open corpus run, beside that run's "
                               "chance level, instead of this prompt's")
        self.toggle.setVisible(False)
        self.toggle.toggled.connect(lambda _on: self.redraw())

    def attach(self, state: Any) -> None:
        """Follow the session's corpus run (``CorpusState``)."""
        self.state = state
        state.changed.connect(self._changed)
        self._changed()

    def _changed(self) -> None:
        available = self.state is not None and self.state.has_heads()
        self.toggle.setVisible(available)
        if self.toggle.isChecked():
            if available:
                self.redraw()  # another run: its scores
            else:
                self.toggle.setChecked(False)  # redraws this prompt's, through toggled

    def of(self, name: str) -> CorpusStatistic | None:
        """The run's ``name`` scores while the switch is on (else None: this prompt's are shown)."""
        if not self.toggle.isChecked() or self.state is None:
            return None
        table = self.state.head_table()
        if table is None or name not in table["scores"]:
            return None
        return CorpusStatistic(table["scores"][name], float(table["chance"][name]),
                               f"over {self.state.describe()}", int(self.state.run.info.window))
