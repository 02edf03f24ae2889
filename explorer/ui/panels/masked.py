"""Masked tokens: for an encoder with a masked-LM head (BERT), what it puts at each [MASK].

Reads the trace's logits only (the worker derives them before the trace arrives); the ranking and
the probabilities come from ``explorer.core.analysis.masked``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QLabel, QTableWidget, QTableWidgetItem, QWidget

from explorer.core.analysis.masked import masked_predictions
from explorer.core.display.tokens import visible
from explorer.core.trace import Trace
from explorer.ui.panels.base import Panel, PanelSnapshot, PanelView
from explorer.ui.session.selection import Selection

TOP_K = 5
NO_HEAD = ("Masked-token predictions need an encoder with a masked-LM head (such as BertForMaskedLM). "
           "This model {why}.")


@dataclass(frozen=True)
class MaskedView(PanelView):
    """The status line and one row (position, context, guesses) per masked position."""

    status: str = ""
    rows: tuple[tuple[int, str, str], ...] = ()


def masked_view(trace: Trace, tokenizer: object) -> MaskedView:
    """What the panel shows of ``trace`` with ``tokenizer`` (the snapshot's)."""
    if not trace.config.mlm_head:
        why = ("is an encoder without its masked-LM head (its logits are not a trained output)"
               if not trace.config.causal else "continues text instead: see the Generation pane")
        return MaskedView(trace, NO_HEAD.format(why=why))
    mask_id = getattr(tokenizer, "mask_id", None)
    if mask_id is None:
        return MaskedView(trace, "This tokenizer has no mask token, so no position can be masked.")
    preds = masked_predictions(trace["logits"], [int(i) for i in trace.token_ids], mask_id, TOP_K)
    mask_text = tokenizer.display(mask_id)
    if not preds:
        return MaskedView(trace, f"Write {mask_text} in the prompt where a word is missing: the model's guesses "
                                 "for each masked position appear here, most likely first.")
    rows = []
    for pred in preds:
        p = pred.position
        context = " ".join(trace.tokens[max(0, p - 3):p]) + f" ▮{mask_text}▮ " + " ".join(trace.tokens[p + 1:p + 4])
        guesses = "   ".join(f"{visible(tokenizer.display(i))} {prob:.3f}" for i, prob in zip(pred.ids, pred.probs))
        rows.append((p, context, guesses))
    return MaskedView(trace, f"{len(preds)} masked position{'s' if len(preds) != 1 else ''}: what the masked-LM "
                             "head predicts there, reading the whole prompt in both directions.", tuple(rows))


class MaskedTokensPanel(Panel):
    def __init__(self, selection: Selection, parent: QWidget | None = None) -> None:
        super().__init__(selection, parent)
        self.status = QLabel("", self)
        self.status.setObjectName("masked-status")
        self.status.setWordWrap(True)
        self.body.addWidget(self.status)
        self.table = QTableWidget(0, 3, self)
        self.table.setHorizontalHeaderLabels(["position", "context", f"top {TOP_K} predictions (probability)"])
        self.table.verticalHeader().setVisible(False)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.horizontalHeader().setSectionResizeMode(2, QHeaderView.ResizeMode.Stretch)
        self.table.cellClicked.connect(self._on_row_clicked)
        self.body.addWidget(self.table, 1)
        self.positions: list[int] = []

    @classmethod
    def applies_to(cls, config: Any) -> bool:
        return bool(getattr(config, "mlm_head", False))  # a decoder's dock is hidden (the window)

    def needed_keys(self, trace: Trace, snapshot: PanelSnapshot) -> list[str]:
        return ["logits"] if trace.config.mlm_head else []

    def prepare(self, trace: Trace, snapshot: PanelSnapshot) -> MaskedView:
        super().prepare(trace, snapshot)
        return masked_view(trace, snapshot.tokenizer)

    def draw(self, view: MaskedView) -> None:
        self.table.setRowCount(0)
        self.status.setText(view.status)
        self.positions = [p for p, _, _ in view.rows]
        self.table.setRowCount(len(view.rows))
        for row, texts in enumerate(view.rows):
            for col, text in enumerate((str(texts[0]), texts[1], texts[2])):
                self.table.setItem(row, col, QTableWidgetItem(text))
        if view.rows:
            self.table.resizeColumnsToContents()

    def _on_row_clicked(self, row: int, _column: int) -> None:
        if 0 <= row < len(self.positions):
            self.selection.set_token(self.positions[row])
