"""Conversation roles: how much the answer's tokens attend to each part of a conversation, and where in the
layers the answer's top token first appears.

For a trace of a templated conversation (``trace.meta.chat``), the answer is the last assistant turn's own
text, or, before it is written, the last token (whose prediction is its first token). The keys are grouped
by span (the system prompt, each user turn, earlier answers, the thinking, the template's markup:
``core.chat.summaries.span_groups``), and for every head the share of the answer's attention on each group
is averaged over the answer's tokens (``attention_to_spans``): a bar per group (mean of every head), a
layer x group map (mean of each layer's heads) and the selected layer's heads x groups. A table gives, for
each answer token, the model's top prediction there and the first layer boundary from which the logit lens
keeps it on top (``answer_top_token_layers``). Without a conversation it says how to make one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QSizePolicy, QSplitter, QTableWidget, QWidget

from explorer.core.chat.summaries import REASONING_KINDS, answer_positions, answer_top_token_layers, attention_to_spans
from explorer.core.display.tokens import quoted, vocab_quoted
from explorer.core.trace import Trace
from explorer.ui.panels.base import Panel, PanelSnapshot, PanelView
from explorer.ui.session.selection import Selection
from explorer.ui.widgets.heatmap import Heatmap
from explorer.ui.widgets.plots import fixed_plot
from explorer.ui.widgets.role_bands import KIND_COLOURS, ROLE_COLOURS
from explorer.ui.widgets.table_cells import set_rows

NO_CONVERSATION = ("Not a conversation: press \u201cConversation \u25b8\u201d beside the prompt and write system, "
                   "user and assistant turns; the model's chat template turns them into its prompt, and this panel "
                   "shows how much the answer attends to each of them.")
MAX_TOP_POSITIONS = 16  # the logit lens of this many answer tokens (each reads the un-embedding at every layer)


@dataclass(frozen=True)
class RolesView(PanelView):
    """The summaries of a conversation's trace, or the line saying why there are none."""

    labels: tuple[str, ...] = ()
    values: np.ndarray | None = None  # [L, H, G]: the share of the answer's attention on each group
    answer: tuple[int, ...] = ()
    tops: tuple[Any, ...] = ()  # TopTokenLayer per answer position (first MAX_TOP_POSITIONS)
    message: str = ""


def group_colour(label: str) -> str:
    """A span group's colour: its role's, or its kind's ("thinking", "markup", a channel)."""
    head = label.split(" ")[0]
    return ROLE_COLOURS.get(head) or KIND_COLOURS.get(head) or "#495057"


def roles_view(trace: Trace, snapshot: PanelSnapshot) -> RolesView:
    """The view on the worker (see the module docstring)."""
    spans = trace.meta.chat
    if spans is None:
        return RolesView(trace, message=NO_CONVERSATION)
    spans = spans.cut(trace.n_tokens)
    if spans.n_tokens != trace.n_tokens:
        return RolesView(trace, message="The conversation's spans do not cover this trace's tokens.")
    answer = answer_positions(spans)
    try:
        summary = attention_to_spans(trace, answer)
    except (KeyError, ValueError) as exc:  # a layer without attention patterns (a recurrent mixer, say)
        return RolesView(trace, message=f"The attention to each span cannot be shown for this model: {exc}")
    tops: tuple[Any, ...] = ()
    if trace._model is not None:  # the logit lens needs the model (a trace file has none)
        vocab = getattr(snapshot.tokenizer, "vocab_size", None)
        tops = tuple(answer_top_token_layers(trace, answer[:MAX_TOP_POSITIONS], vocab))
    return RolesView(trace, summary.labels, summary.values, tuple(int(p) for p in answer), tops)


class RolesPanel(Panel):
    def __init__(self, selection: Selection, parent: QWidget | None = None) -> None:
        super().__init__(selection, parent)
        self.view: RolesView | None = None
        self.info = QLabel(NO_CONVERSATION)
        self.info.setWordWrap(True)
        self.info.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.body.addWidget(self.info)
        self.bars = fixed_plot("x")
        self.bars.setTitle("the answer's attention on each span")
        self.bars.setLabel("bottom", "share of attention")
        self.bar_item = pg.BarGraphItem(x0=[], y=[], height=0.7, width=[], pen=None)
        self.bars.addItem(self.bar_item)
        self.bars.invertY(True)
        self.layers = Heatmap(colormap="viridis", title="each layer (its heads' mean)")
        self.layers.cell_clicked.connect(lambda row, _col: self.selection.set_layer(row))
        self.heads = Heatmap(colormap="viridis", title="the selected layer's heads")
        self.heads.cell_clicked.connect(lambda row, _col: self.selection.set_head(row))
        self.tops = QTableWidget(0, 3)
        self.tops.setHorizontalHeaderLabels(["answer token", "top prediction there", "on top from"])
        self.tops.verticalHeader().setVisible(False)
        self.tops.horizontalHeader().setStretchLastSection(True)
        self.tops.setToolTip("For each token of the answer: the model's top prediction at that position and the "
                             "first layer boundary from which the logit lens keeps it on top (0 = the embedding)")
        maps = QSplitter(Qt.Orientation.Vertical)
        for widget in (self.layers, self.heads):
            maps.addWidget(widget)
        self.bars.setMinimumHeight(170)
        self.tops.setMinimumHeight(110)
        self.body.addWidget(self.bars, 2)  # one column: the panel sits beside the generation pane
        self.layers.setMinimumHeight(190)
        self.heads.setMinimumHeight(190)
        self.body.addWidget(maps, 4)
        self.body.addWidget(self.tops, 1)
        self._parts = (self.bars, self.layers, self.heads, self.tops, maps)
        for part in self._parts:
            part.hide()
        self.add_exportable("attention to spans", self.bars.getPlotItem(), self._bar_data)
        self.add_exportable("attention to spans per layer", self.layers, self._layer_data)
        self.add_exportable("attention to spans per head", self.heads, self._head_data)

    def prepare(self, trace: Trace, snapshot: PanelSnapshot) -> RolesView:
        return roles_view(trace, snapshot)

    def draw(self, view: RolesView) -> None:
        self.view = view
        shown = view.values is not None
        for part in self._parts:
            part.setVisible(shown)
        if not shown:
            self.info.setText(view.message)
            return
        trace, spans = view.trace, view.trace.meta.chat
        a, b = view.answer[0], view.answer[-1]
        written = spans.kinds[a] in ("content", "final")
        what = (f"tokens {a}\u2013{b} ({len(view.answer)}: the last assistant turn's text)" if written else
                f"the last token ({a}), whose prediction is the answer's first token (the answer is not written yet)")
        self.info.setText(f"The answer: {what}. Each bar is the share of its attention, averaged over its tokens "
                          "and over every head, that lands on a span; click a map's row to select that layer or head.")
        averaged = view.values.mean(axis=(0, 1))
        G = len(view.labels)
        brushes = [pg.mkBrush(group_colour(label)) for label in view.labels]
        self.bar_item.setOpts(x0=np.zeros(G), y=np.arange(G), width=averaged, height=0.7, brushes=brushes)
        self.bars.getAxis("left").setTicks([[(i, label) for i, label in enumerate(view.labels)]])
        self.bars.setYRange(-0.6, G - 0.4, padding=0)
        self.bars.setXRange(0, max(float(averaged.max(initial=0.0)), 1e-6), padding=0.05)
        per_layer = view.values.mean(axis=1)
        self.layers.set_data(per_layer, [f"L{layer}" for layer in range(per_layer.shape[0])], list(view.labels),
                             levels=(0.0, 1.0), value_name="share of attention")
        rows = [(f"{t.position}:{quoted(trace.tokens[t.position])}",
                 vocab_quoted(self.tokenizer, t.token_id) if self.tokenizer is not None else str(t.token_id),
                 "the embedding" if t.boundary == 0 else f"after block {t.boundary - 1}") for t in view.tops]
        set_rows(self.tops, rows)
        self.tops.resizeColumnsToContents()
        reasoning = [i for i in range(spans.n_tokens) if spans.kinds[i] in REASONING_KINDS]
        if reasoning:
            self.info.setText(self.info.text() + f" The reasoning is {len(reasoning)} tokens.")
        self._draw_heads()

    def selection_changed(self, what: str) -> None:
        if what == "layer":
            self._draw_heads()

    def _draw_heads(self) -> None:
        view = self.view
        if view is None or view.values is None:
            return
        layer = min(self.selection.layer, view.values.shape[0] - 1)
        values = view.values[layer]
        self.heads.set_data(values, [f"L{layer}H{h}" for h in range(values.shape[0])], list(view.labels),
                            levels=(0.0, 1.0), value_name="share of attention")
        self.heads.plot.setTitle(f"layer {layer}'s heads")

    def _bar_data(self) -> tuple[np.ndarray, list[str], list[str]]:
        if self.view is None or self.view.values is None:
            return np.zeros((0, 0)), [], []
        return self.view.values.mean(axis=(0, 1))[:, None], list(self.view.labels), ["share of attention"]

    def _layer_data(self) -> tuple[np.ndarray, list[str], list[str]]:
        if self.view is None or self.view.values is None:
            return np.zeros((0, 0)), [], []
        values = self.view.values.mean(axis=1)
        return values, [f"L{layer}" for layer in range(values.shape[0])], list(self.view.labels)

    def _head_data(self) -> tuple[np.ndarray, list[str], list[str]]:
        if self.view is None or self.view.values is None:
            return np.zeros((0, 0)), [], []
        layer = min(self.selection.layer, self.view.values.shape[0] - 1)
        values = self.view.values[layer]
        return values, [f"L{layer}H{h}" for h in range(values.shape[0])], list(self.view.labels)
