"""Masked tokens: for an encoder with a masked-LM head (BERT), what it puts at each [MASK].

Reads the trace's logits only (the worker derives them before the trace arrives); the ranking and
the probabilities come from ``explorer.core.analysis.masked``.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QLabel, QTableWidget, QTableWidgetItem, QWidget

from explorer.core.analysis.masked import masked_predictions
from explorer.core.display.tokens import visible
from explorer.core.trace import Trace
from explorer.ui.panels.base import Panel, PanelSnapshot
from explorer.ui.session.selection import Selection

TOP_K = 5
NO_HEAD = ("Masked-token predictions need an encoder with a masked-LM head (such as BertForMaskedLM). "
           "This model {why}.")


class MaskedTokensPanel(Panel):
    title = "Masked tokens"
    explanation = "masked"

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

    def show_trace(self, trace: Trace) -> None:
        self.table.setRowCount(0)
        self.positions = []
        if not trace.config.mlm_head:
            why = ("is an encoder without its masked-LM head (its logits are not a trained output)"
                   if not trace.config.causal else "continues text instead: see the Generation pane")
            self.status.setText(NO_HEAD.format(why=why))
            return
        mask_id = getattr(self.tokenizer, "mask_id", None)
        if mask_id is None:
            self.status.setText("This tokenizer has no mask token, so no position can be masked.")
            return
        preds = masked_predictions(trace["logits"], [int(i) for i in trace.token_ids], mask_id, TOP_K)
        mask_text = self.tokenizer.display(mask_id)
        if not preds:
            self.status.setText(f"Write {mask_text} in the prompt where a word is missing: the model's guesses "
                                "for each masked position appear here, most likely first.")
            return
        self.status.setText(f"{len(preds)} masked position{'s' if len(preds) != 1 else ''}: what the masked-LM "
                            "head predicts there, reading the whole prompt in both directions.")
        self.table.setRowCount(len(preds))
        for row, pred in enumerate(preds):
            p = pred.position
            context = " ".join(trace.tokens[max(0, p - 3):p]) + f" ▮{mask_text}▮ " + " ".join(trace.tokens[p + 1:p + 4])
            guesses = "   ".join(f"{visible(self.tokenizer.display(i))} {prob:.3f}"
                                 for i, prob in zip(pred.ids, pred.probs))
            for col, text in enumerate((str(p), context, guesses)):
                self.table.setItem(row, col, QTableWidgetItem(text))
            self.positions.append(p)
        self.table.resizeColumnsToContents()

    def _on_row_clicked(self, row: int, _column: int) -> None:
        if 0 <= row < len(self.positions):
            self.selection.set_token(self.positions[row])
