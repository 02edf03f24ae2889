"""The direct logit attribution's target, chosen: a token typed or picked from the model's top
predictions at the selected position, and optionally a distractor (the attribution is then of the
logit difference, target minus distractor: ``core/analysis/dla.py``, as the CLI's ``patch
--target/--distractor``).

The choice is kept as the text the user gave and read again with each model's tokenizer: a new
model keeps it where the text is still one token, and clears it with a line where it is not; a new
prompt or position refreshes the list of top predictions and keeps the choice.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from PySide6.QtCore import Signal
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QWidget

from explorer.core.analysis.ranking import top_k_ids
from explorer.core.errors import ExplorerError
from explorer.core.display.tokens import visible

TOP = 8  # top predictions offered in the lists
NEXT = "next token"  # the target's default: what follows the position (the top prediction after the last)
NONE = "no distractor"


@dataclass(frozen=True)
class DLAChoice:
    target: int | None = None       # None: the default target (dla.dla_target)
    distractor: int | None = None


def one_token(tokenizer: Any, text: str, what: str) -> int:
    """The single token ``text`` encodes to, or ValueError with one line (a leading space is part of many tokens)."""
    if tokenizer is None:
        raise ValueError(f"the {what} needs the model's tokenizer")
    try:
        ids = tokenizer.encode(text)
    except ExplorerError as exc:  # a word-level vocabulary without it
        raise ValueError(f"the {what} {text!r}: {exc}") from None
    if len(ids) != 1:
        raise ValueError(f"the {what} {text!r} is {len(ids)} tokens for this model, not one")
    return int(ids[0])


def top_predictions(logits: np.ndarray, k: int = TOP) -> list[tuple[int, float]]:
    """(id, probability) of the ``k`` likeliest next tokens for one position's logits."""
    x = np.asarray(logits, dtype=np.float64)
    p = np.exp(x - x.max())
    p /= p.sum()
    return [(int(i), float(p[i])) for i in top_k_ids(x, k, finite_only=True)]


Pick = tuple[int | None, str]  # a listed prediction's (id, text), or a typed text (None, text)


class DLATargetBar(QWidget):
    """Two editable lists: the target (``next token`` or a token) and the distractor (none or a token).
    ``changed`` is emitted when the user picks or types one; ``choice(tokenizer)`` reads them."""

    changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        self.picks: dict[str, Pick | None] = {"target": None, "distractor": None}
        self._offered: dict[str, tuple] = {}  # per box: (items, pick) it shows now
        self.target = self._combo("target", NEXT, "Target token: pick one of the model's top predictions "
                                  "here or type a token (with its leading space, e.g. \" Mary\")")
        self.distractor = self._combo("distractor", NONE, "Distractor (optional): the attribution is then of "
                                      "the logit difference, target minus distractor")
        row.addWidget(QLabel("target"))
        row.addWidget(self.target, 2)
        row.addWidget(QLabel("minus"))
        row.addWidget(self.distractor, 2)
        row.addStretch(1)

    def _combo(self, what: str, default: str, tip: str) -> QComboBox:
        combo = QComboBox(self)
        combo.setObjectName(f"dla-{what}")
        combo.setEditable(True)
        combo.setInsertPolicy(QComboBox.InsertPolicy.NoInsert)
        combo.setToolTip(tip)
        combo.setMinimumContentsLength(12)
        combo.addItem(default, None)
        combo.activated.connect(lambda index: self._picked(what, combo.itemData(index)))
        combo.lineEdit().editingFinished.connect(lambda: self._typed(what, combo, default))
        return combo

    def _picked(self, what: str, data: Pick | None) -> None:
        self.picks[what] = data
        self.changed.emit()

    def _typed(self, what: str, combo: QComboBox, default: str) -> None:
        text = combo.currentText()
        index = combo.findText(text)
        pick = combo.itemData(index) if index >= 0 else (None if text in ("", default) else (None, text))
        if pick != self.picks[what]:
            self._picked(what, pick)

    def choice(self, tokenizer: Any) -> tuple[DLAChoice, str]:
        """The chosen ids, and a line for each typed text that is not one token (left at its default)."""
        ids, notes = [], []
        for what, instead in (("target", "the next token"), ("distractor", "no distractor")):
            pick = self.picks[what]
            try:
                ids.append(None if pick is None else pick[0] if pick[0] is not None
                           else one_token(tokenizer, pick[1], what))
            except ValueError as exc:
                ids.append(None)
                notes.append(f"{exc}: {instead} instead.")
        return DLAChoice(*ids), " ".join(notes)

    def set_pick(self, what: str, text: str | None) -> None:
        """Choose a typed token text (None: the default) as the user would."""
        combo = self.target if what == "target" else self.distractor
        combo.setCurrentText(text if text is not None else combo.itemText(0))
        self._picked(what, None if text is None else (None, text))

    def follow_model(self, tokenizer: Any) -> str:
        """Another model: each choice is read again as text with its tokenizer; one that is no longer a
        single token is cleared. Returns the line saying what was cleared ("" when nothing was)."""
        cleared = []
        for what, combo in (("target", self.target), ("distractor", self.distractor)):
            pick = self.picks[what]
            if pick is None:
                continue
            try:
                one_token(tokenizer, pick[1], what)
                self.picks[what] = (None, pick[1])
                combo.setCurrentText(pick[1])
            except ValueError as exc:
                self.picks[what] = None
                combo.setCurrentText(combo.itemText(0))
                cleared.append(str(exc))
        if not cleared:
            return ""
        return "A new model: " + "; ".join(cleared) + ", so it was cleared."

    def offer(self, tokenizer: Any, predictions: list[tuple[int, float]]) -> None:
        """List ``predictions`` (id, probability) under both boxes, each box still showing its choice."""
        items = []
        for token, prob in predictions:
            text = tokenizer.display(token) if tokenizer is not None else f"#{token}"
            items.append((f"{visible(text)}  (p {prob:.3f})", (token, text)))
        for what, combo in (("target", self.target), ("distractor", self.distractor)):
            pick = self.picks[what]
            if self._offered.get(what) == (items, pick) and combo.count() == len(items) + 1:
                continue  # the same list and choice (a switch back, a second draw): nothing to rewrite
            self._offered[what] = (items, pick)
            combo.blockSignals(True)
            if combo.count() == len(items) + 1:  # rewritten in place: no rows removed and inserted
                for i, (label, data) in enumerate(items, 1):
                    if combo.itemText(i) != label or combo.itemData(i) != data:
                        combo.setItemText(i, label)
                        combo.setItemData(i, data)
            else:
                while combo.count() > 1:
                    combo.removeItem(combo.count() - 1)
                for label, data in items:
                    combo.addItem(label, data)
            default = combo.itemText(0)
            index = next((i for i in range(1, combo.count()) if pick is not None and pick[0] is not None
                          and combo.itemData(i) == pick), -1)
            if index >= 0:
                combo.setCurrentIndex(index)
            else:  # the first row current, as a list filled anew has it, showing the choice's text
                combo.setCurrentIndex(0)
                combo.setCurrentText(default if pick is None else pick[1])
            combo.blockSignals(False)
