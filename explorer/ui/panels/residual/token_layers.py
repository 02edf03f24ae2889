"""A token across layers, beside the logit lens: for the selected position and one token (the model's top
prediction there, the real next token, a token a lens cell shows, or one the user types), its probability
and rank after every layer boundary (``core.analysis.residual.token_across_layers``), in a ``LayerChart``.

Clicking a lens cell selects its position and picks that cell's top prediction, so "where does ' Paris'
become the top prediction?" is one click and a look at the chart. One [B, V] reading per position and token,
kept with the trace; on a worker (the panel's ``later``) unless the model is small.

``TokenLayersView`` is a widget the residual panel lays out beside the lens and feeds with its trace and
selection through callbacks; it reads nothing else of the panel.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QSizePolicy, QVBoxLayout, QWidget

from explorer.core.analysis.residual import TokenPath, token_across_layers
from explorer.core.display.tokens import quoted, vocab_quoted
from explorer.core.trace import Trace
from explorer.ui.panels.interventions.dla_choice import one_token
from explorer.ui.widgets.layer_chart import LayerChart

TOP, NEXT = "top prediction", "real next token"
NOW_MACS = 1 << 26  # a reading cheaper than this is done at once, on the GUI thread; else on a worker


def token_of(trace: Trace, position: int, pick: Any, tokenizer: Any) -> tuple[int | None, str]:
    """The token id ``pick`` names at ``position`` (TOP, NEXT, an id, or a typed text) and a line when it names
    none (a text that is not one token; a trace without logits)."""
    if isinstance(pick, int):
        return pick, ""
    if pick == NEXT and position < trace.n_tokens - 1:
        return int(trace.token_ids[position + 1]), ""
    if pick in (TOP, NEXT):
        logits = trace.get("logits")
        if logits is None:
            return None, "no logits in this trace"
        return int(np.argmax(logits[position])), "" if pick == TOP else "the last position has no next token: its top prediction"
    try:
        return one_token(tokenizer, str(pick), "token"), ""
    except ValueError as exc:
        return None, str(exc)


def path_of(trace: Trace, position: int, token_id: int, vocab_size: int | None) -> TokenPath:
    return trace.memo(("token_layers", position, token_id, vocab_size),
                      lambda: token_across_layers(trace, position, token_id, vocab_size))


class TokenLayersView(QWidget):
    """The picker and the chart (see the module docstring). Callbacks: ``later(key, compute, apply)`` (the
    panel's background views), ``selected_token()``, ``tokenizer()``."""

    def __init__(self, *, later: Callable[..., Any], selected_token: Callable[[], int],
                 tokenizer: Callable[[], Any], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.later, self._selected, self._tokenizer = later, selected_token, tokenizer
        self.trace: Trace | None = None
        self.path: TokenPath | None = None
        self.pick: Any = TOP  # TOP, NEXT, a token id (a lens cell), or a typed text
        self.picker = QComboBox(self)
        self.picker.setObjectName("token-layers-picker")
        self.picker.setEditable(True)
        self.picker.setInsertPolicy(QComboBox.InsertPolicy.NoInsert)
        self.picker.addItem(TOP, TOP)
        self.picker.addItem(NEXT, NEXT)
        self.picker.setMinimumContentsLength(12)
        self.picker.setToolTip("The token whose probability and rank after every layer are drawn: the top prediction "
                               "at the selected position, the real next token, a lens cell's token (click a cell), or "
                               "type one (with its leading space, e.g. \" Paris\") and press Enter")
        self.picker.activated.connect(lambda index: self.choose(self.picker.itemData(index)))
        self.picker.lineEdit().returnPressed.connect(self._typed)
        self.note = QLabel("", self)
        self.note.setWordWrap(True)
        self.note.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.note.setStyleSheet("color: palette(placeholder-text)")
        self.chart = LayerChart(self)
        row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(QLabel("token:", self))
        row.addWidget(self.picker, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addLayout(row)
        layout.addWidget(self.note)
        layout.addWidget(self.chart, 1)

    # --- choosing --------------------------------------------------------------------------------
    def choose(self, pick: Any, draw: bool = True) -> None:
        """Draw ``pick``'s path (TOP, NEXT, a vocabulary id or a text), as the picker does (``draw``: now)."""
        self.pick = pick
        if isinstance(pick, int):
            self.picker.setCurrentText(self._text(pick))
        elif pick in (TOP, NEXT):
            self.picker.setCurrentIndex(self.picker.findData(pick))
        else:
            self.picker.setCurrentText(str(pick))
        if draw:
            self.update_path()

    def _typed(self) -> None:
        text = self.picker.currentText()
        index = self.picker.findText(text)
        self.choose(self.picker.itemData(index) if index >= 0 else text)

    def _text(self, token_id: int) -> str:
        tokenizer = self._tokenizer()
        return tokenizer.display(token_id) if tokenizer is not None else f"#{token_id}"

    # --- drawing ---------------------------------------------------------------------------------
    def show_trace(self, trace: Trace) -> None:
        self.trace = trace
        self.update_path()

    def update_path(self) -> None:
        """Draw the chosen token's path at the selected position (computed in the background when large)."""
        trace = self.trace
        if trace is None:
            return
        if getattr(trace, "_model", None) is None:
            self._say("needs the loaded model (this trace has none)")
            self.path = None
            self.chart.clear_path()
            return
        position = self._selected()
        token, why = token_of(trace, position, self.pick, self._tokenizer())
        if token is None:
            self._say(why)
            self.path = None
            self.chart.clear_path()
            return
        tokenizer = self._tokenizer()
        vocab = int(tokenizer.vocab_size) if tokenizer is not None else None
        if vocab is not None and token >= vocab:
            self._say(f"token {token} is outside the vocabulary of {vocab}")
            self.chart.clear_path()
            return
        cfg = trace.config
        key = ("token_layers", position, token, vocab)
        if trace.memo_get(key) is not None or (cfg.n_layers + 1) * cfg.vocab_size * cfg.d_model <= NOW_MACS:
            self._draw(path_of(trace, position, token, vocab), why)
            return
        self._say(f"computing {vocab_quoted(tokenizer, token)} after {position}\u2026")
        self.chart.clear_path()
        self.later(("token_layers",), lambda _check: path_of(trace, position, token, vocab),
                   lambda path: self._draw(path, why) if self.trace is trace else None)

    def _draw(self, path: TokenPath, why: str = "") -> None:
        self.path = path
        trace, tokenizer = self.trace, self._tokenizer()
        name = vocab_quoted(tokenizer, path.token_id)
        first = path.first_top()
        where = (f"the top prediction from {path.labels[first]} on" if first is not None
                 else f"rank {int(path.ranks[-1]) + 1} at the output")
        self._say(f"{name} after {path.position}:{quoted(trace.tokens[path.position])}: {where}"
                  + (f" ({why})" if why else ""))
        vocab = int(tokenizer.vocab_size) if tokenizer is not None else trace.config.vocab_size
        self.chart.show_path(path.labels, path.probs, path.ranks, f"{name} across layers", vocab)

    def _say(self, text: str) -> None:
        self.note.setText(text)
        self.note.setToolTip(text)
