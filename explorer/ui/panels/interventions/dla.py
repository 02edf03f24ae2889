"""Direct logit attribution: each head's (and each FFN's) direct share of one token's logit.

The token is the one that actually follows the selected position (the model's own top choice at
the last position), or one the user chose (typed, or picked from the top predictions), optionally
minus a distractor's logit (``dla_choice.py``), read through the final norm with its scale frozen
(``core/analysis/dla.py``). A layers x heads heatmap, one more column for the FFNs; red pushes the
token up, blue down. Heads switched off (the session's interventions) write nothing: their cell is 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from PySide6.QtWidgets import QSplitter, QWidget

from explorer.core.analysis.dla import DLA, DLAError, direct_logit_attribution
from explorer.core.analysis.layer_maps import attention_head
from explorer.core.display.tokens import vocab_quoted
from explorer.core.trace import Trace
from explorer.ui.interventions.menu import install_targets
from explorer.ui.interventions.targets import Target, ffn_column, head_cells
from explorer.ui.panels.base import Panel, PanelSnapshot, PanelView, clamp_token
from explorer.ui.panels.interventions.dla_choice import DLAChoice, DLATargetBar, top_predictions
from explorer.ui.panels.interventions.dla_table import FFN, DLAHeatmap, dla_sentence, dla_table
from explorer.ui.session.selection import Selection
from explorer.ui.widgets.ranked_list import RankedList
from explorer.ui.widgets.steady_label import SteadyLabel

DEFAULT = DLAChoice()
TOP_NOW_VOCAB = 1 << 16  # a vocabulary up to this: a token switch lists the top predictions at once, else on a worker


def dla_target(trace: Trace, position: int) -> int:
    """The token that follows ``position`` in the prompt, or the model's top choice after the last."""
    if position < trace.n_tokens - 1:
        return int(trace.token_ids[position + 1])
    return int(np.argmax(trace["logits"][position]))


def dla_key(trace: Trace, position: int | None, choice: DLAChoice = DEFAULT) -> tuple:
    """The memo key of the attribution at ``position`` for ``choice`` (the default: ("dla", p))."""
    p = clamp_token(position, trace.n_tokens)
    return ("dla", p) if choice == DEFAULT else ("dla", p, choice.target, choice.distractor)


def attribution(trace: Trace, position: int | None, choice: DLAChoice = DEFAULT) -> DLA | str:
    """The attribution at ``position`` (None, or one this trace does not have: the last) of the chosen
    target's logit (minus the distractor's), or the reason there is none (kept in the memo)."""
    p = clamp_token(position, trace.n_tokens)

    def compute() -> DLA | str:
        target = choice.target if choice.target is not None else dla_target(trace, p)
        for what, token in (("target", target), ("distractor", choice.distractor)):
            if token is not None and not 0 <= token < trace.config.vocab_size:
                return f"the {what} token {token} is outside this model's vocabulary of {trace.config.vocab_size}"
        try:
            return direct_logit_attribution(trace, target, p, choice.distractor)
        except DLAError as exc:
            return str(exc)

    return trace.memo(dla_key(trace, p, choice), compute)


def predictions_of(trace: Trace, position: int | None) -> list[tuple[int, float]]:
    """The top predictions (id, probability) at ``position`` (clamped), kept with the trace: a softmax over
    the vocabulary, computed once per position (on a worker for a large vocabulary); none without logits."""
    p = clamp_token(position, trace.n_tokens)

    def compute() -> list[tuple[int, float]]:
        logits = trace.get("logits")  # none in a trace file opened without its model: nothing to offer
        return [] if logits is None else top_predictions(logits[p])

    return trace.memo(("dla.top", p), compute)


@dataclass(frozen=True)
class DLAView(PanelView):
    """The attribution at the snapshot's token (``position``, clamped), or why there is none."""

    position: int = 0
    attribution: DLA | str | None = None


class DLAPanel(Panel):
    def __init__(self, selection: Selection, parent: QWidget | None = None) -> None:
        super().__init__(selection, parent)
        self.result: DLA | None = None
        self._columns: list[str] = []  # the heatmap's column labels as drawn (heads, then the layers' other terms)
        self.note = ""  # why the chosen target was cleared or cannot be used (one line, before the numbers)
        self.choose = DLATargetBar(self)  # the target (and distractor) chosen: dla_choice.py
        self.choose.changed.connect(self._on_choice)
        self.body.addWidget(self.choose)
        # wrapped at the panel's width, never wider (its height kept while the text changes): the whole line is
        # read at 1280x800, not cut after "(final n…" (issue 42, item 9)
        self.info = SteadyLabel("")
        self.body.addWidget(self.info)
        self.heatmap = DLAHeatmap(colormap="CET-D1", symmetric=True, title="direct contribution to the logit")
        self.heatmap.cell_clicked.connect(self._on_cell_clicked)
        self.ranked = RankedList("largest contributions (click: select)", "logit")  # beside the grid
        self.ranked.chosen.connect(self._on_ranked)
        beside = QSplitter()
        beside.addWidget(self.heatmap)
        beside.addWidget(self.ranked)
        beside.setStretchFactor(0, 3)
        beside.setStretchFactor(1, 1)
        beside.setChildrenCollapsible(False)
        self.body.addWidget(beside, 1)
        self.add_exportable("direct logit attribution", self.heatmap, self._data)
        self.add_exportable("direct logit attribution, largest", self.ranked, self.ranked.data)
        install_targets(self)  # right-click a head's cell or an FFN's: switch it off

    def intervention_targets(self) -> list[Target]:
        """A head's cell (an attention layer's), and a layer's FFN cell (its column, where the model has FFNs)."""
        def heads() -> int:
            return self.trace.config.n_heads if self.trace is not None else 0

        def ffn() -> int | None:
            return self._columns.index(FFN) if FFN in self._columns else None

        def is_head(layer: int, head: int) -> bool:
            return self.trace is not None and attention_head(self.trace.config, layer, head)

        return [head_cells(self.heatmap, heads, is_head), ffn_column(self.heatmap, ffn)]

    def prepare(self, trace: Trace, snapshot: PanelSnapshot) -> DLAView:
        """On the worker: the attribution at the snapshot's token (memoised with the trace)."""
        predictions_of(trace, snapshot.token)  # the target list's, kept with the trace for the GUI thread
        return DLAView(trace, clamp_token(snapshot.token, trace.n_tokens), attribution(trace, snapshot.token))

    def draw(self, view: DLAView) -> None:
        self._draw(view)

    def tokenizer_changed(self) -> None:
        """Another model: the chosen tokens are read again with its tokenizer (cleared, with a line, where
        they are no longer one token)."""
        self.note = self.choose.follow_model(self.tokenizer)

    def _on_choice(self) -> None:
        self.note = ""
        if self.trace is not None:
            self._draw()

    def _choice(self) -> DLAChoice:
        choice, refused = self.choose.choice(self.tokenizer)
        if refused:
            self.note = refused
        return choice

    def selection_changed(self, what: str) -> None:
        if what == "token":
            self._draw()

    def _draw(self, view: DLAView | None = None) -> None:
        trace = self.trace
        position = self.selected_token
        here = clamp_token(position, trace.n_tokens)
        self._offer(trace, here)
        choice = self._choice()
        key = dla_key(trace, position, choice)
        ready = (view.attribution if view is not None and view.trace is trace and view.position == here
                 and choice == DEFAULT else None)  # the worker prepared the default target's
        if ready is None and trace.memo_get(key) is None:  # not computed yet: in the background (a 1B model's
            self._say(f"computing the attribution at token {position}\u2026")  # W_O products take a while)
            self.result = None
            self.ranked.clear_items()
            matrix = self.heatmap.matrix  # never another token's numbers under this one's name: blank cells,
            if matrix.size:               # the same rows and columns (so the axes need not be laid out again)
                self.heatmap.set_data(np.full(matrix.shape, np.nan, np.float32), self.heatmap.row_labels,
                                      self.heatmap.col_labels, value_name="logit contribution")
            self.later(("dla",), lambda check: attribution(trace, position, choice), lambda _got: self._draw())
            return
        got = ready if ready is not None else attribution(trace, position, choice)
        if isinstance(got, str):
            self.result = None
            self._say((f"{self.note} " if self.note else "") + got)
            self.heatmap.set_data(np.zeros((0, 0)))
            self.ranked.clear_items()
            return
        self.result = d = got
        matrix, rows, cols = self._data()
        self._columns, self.heatmap.config = cols, trace.config
        self.heatmap.set_data(matrix, rows, cols, masked=dla_table(d, trace.config)[1], value_name="logit contribution")
        self.ranked.show_items([f"{r} {c}" if c == "FFN" else f"{r}{c}" for r in rows for c in cols], matrix,
                               [(layer, col) for layer in range(len(rows)) for col in range(len(cols))])
        target = vocab_quoted(self.tokenizer, d.target)
        if d.distractor is not None:
            target += f" minus the logit of {vocab_quoted(self.tokenizer, d.distractor)}"
        self._say((f"{self.note} " if self.note else "") + dla_sentence(d, trace, target))

    def _offer(self, trace: Trace, here: int) -> None:
        """The top predictions at ``here`` under the target boxes: kept with the trace, else computed at once
        for a small vocabulary, else on a worker (the lists hold no predictions until then, never another
        position's)."""
        predictions = trace.memo_get(("dla.top", here))
        if predictions is None and trace.config.vocab_size <= TOP_NOW_VOCAB:
            predictions = predictions_of(trace, here)
        if predictions is not None:
            self.choose.offer(self.tokenizer, predictions)
            return
        self.choose.offer(self.tokenizer, [])

        def apply(got: list[tuple[int, float]]) -> None:
            if clamp_token(self.selected_token, trace.n_tokens) == here:
                self.choose.offer(self.tokenizer, got)

        self.later(("dla.top",), lambda _check: predictions_of(trace, here), apply)

    def _say(self, text: str) -> None:
        self.info.setText(text)
        self.info.setToolTip(text)

    def _on_ranked(self, key: tuple[int, int]) -> None:
        """A row of the list: its head selected (an FFN: its layer)."""
        layer, col = key
        if self.result is not None and col < self.result.heads.shape[1]:
            self.selection.set_layer_head(layer, col)
        else:
            self.selection.set_layer(layer)

    def _on_cell_clicked(self, row: int, col: int) -> None:
        if self.result is not None and col < self.result.heads.shape[1] and not self.heatmap.masked[row, col]:
            self.selection.set_layer_head(row, col)

    def _data(self) -> tuple[np.ndarray, list[str], list[str]]:
        d = self.result
        if d is None or self.trace is None:
            return np.zeros((0, 0)), [], []
        matrix, masked, cols = dla_table(d, self.trace.config)
        return np.where(masked, np.nan, matrix), [f"L{layer}" for layer in range(matrix.shape[0])], cols
