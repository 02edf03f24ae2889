"""Tokenization: the prompt as the model sees it, one chip per token with its id.

Also the same text in another encoding (display only) and the one-hot vector of the selected
token over the whole vocabulary: the model's real input, before the embedding looks up a row.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox, QFrame, QHBoxLayout, QLabel, QScrollArea, QSplitter, QWidget

from explorer.core.errors import ExplorerError
from explorer.core.tokenize.base import Tokenizer
from explorer.core.tokenize.display import (CHIP_LEGEND, ChipView, display_bytes, display_chips, one_hot,
                                            tokenizer_chips, visible_whitespace)
from explorer.core.trace import Trace
from explorer.ui.panels.base import Panel, PanelSnapshot, PanelView
from explorer.ui.session.selection import Selection
from explorer.ui.widgets.axis import readable, thin_axes
from explorer.ui.widgets.plots import set_x_range
from explorer.ui.widgets.role_bands import legend_html, trace_bands
from explorer.ui.widgets.token_chips import TokenChips

OWN = "own"
GPT2 = "gpt2"


def _is_gpt2(tokenizer: Tokenizer | None) -> bool:
    return tokenizer is not None and tokenizer.describe().get("type") == "gpt2"


@dataclass(frozen=True)
class TokenizationView(PanelView):
    """The model's own chips for the trace and the token count line."""

    chips: tuple[ChipView, ...] = ()
    count: str = ""


def model_chips(trace: Trace, tokenizer: Tokenizer | None) -> list[ChipView]:
    """One chip per token of ``trace``: the tokenizer's display when it is this model's, else the trace's strings."""
    if tokenizer is not None and tokenizer.vocab_size <= trace.config.vocab_size:
        try:
            return tokenizer_chips(tokenizer, trace.token_ids)
        except ExplorerError:  # a tokenizer that is not this trace's: trust the trace
            pass
    return display_chips(trace.token_ids, trace.tokens)


def chip_legend_html() -> str:
    """The legend of the chips' colours (``CHIP_LEGEND``): small swatches and what they mean."""
    def swatch(colour: str) -> str:
        return f"<span style='background:{colour}'>&nbsp;&nbsp;&nbsp;&nbsp;</span>"
    parts = [swatch(a) + (swatch(b) if b else "") + "&nbsp;" + text for a, b, text in CHIP_LEGEND]
    return "<small>" + " &nbsp;·&nbsp; ".join(parts) + "</small>"


class TokenizationPanel(Panel):
    def __init__(self, selection: Selection, parent: QWidget | None = None) -> None:
        super().__init__(selection, parent)
        self.count = QLabel("", self)
        self.count.setObjectName("count")
        self.encoding = QComboBox(self)
        self.encoding.setToolTip("Show the same text cut by another tokenizer (display only)")
        self.encoding.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.alt_count = QLabel("", self)
        self.alt_count.setObjectName("alt-count")
        header = QHBoxLayout()
        header.addWidget(self.count)
        header.addStretch(1)
        header.addWidget(QLabel("Encoding:", self))
        header.addWidget(self.encoding)
        header.addWidget(self.alt_count)
        self.body.addLayout(header)
        self.legend = QLabel(chip_legend_html(), self)
        self.legend.setObjectName("chip-legend")
        self.legend.setWordWrap(True)
        self.body.addWidget(self.legend)
        self.role_legend = QLabel("", self)  # a conversation's roles: the bars over the chips
        self.role_legend.setObjectName("role-legend")
        self.role_legend.setWordWrap(True)
        self.role_legend.setVisible(False)
        self.body.addWidget(self.role_legend)

        self.chips = TokenChips()
        self.scroll = QScrollArea(self)
        self.scroll.setWidget(self.chips)
        self.scroll.setWidgetResizable(True)
        self.scroll.setFrameShape(QFrame.Shape.NoFrame)
        self.scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.scroll.setMinimumHeight(48)

        self.plot = pg.PlotWidget(self, axisItems=thin_axes())
        readable(self.plot)
        self.plot.setMinimumSize(260, 110)
        item = self.plot.getPlotItem()
        item.setMouseEnabled(y=False)
        item.hideButtons()
        item.setLabel("bottom", "vocabulary index")
        item.setLabel("left", "value")
        item.setYRange(0, 1.15, padding=0)
        item.getAxis("left").setTicks([[(0, "0"), (1, "1")]])
        self.spike = item.plot([], [], pen=pg.mkPen("#d9480f", width=2))
        self.baseline = item.plot([], [], pen=pg.mkPen("#9ca3af", width=1))
        self.dot = pg.ScatterPlotItem(size=7, brush=pg.mkBrush("#d9480f"), pen=None)
        item.addItem(self.dot)
        self.spike_label = pg.TextItem("", color="#d9480f", anchor=(0, 1))
        item.addItem(self.spike_label)
        self._baseline_for: int | None = None  # the vocabulary size the baseline was drawn for
        # the chips get the height; the one-hot view of the chosen token sits beside them
        self.splitter = QSplitter(Qt.Orientation.Horizontal, self)
        self.splitter.addWidget(self.scroll)
        self.splitter.addWidget(self.plot)
        self.splitter.setStretchFactor(0, 3)
        self.splitter.setStretchFactor(1, 1)
        self.splitter.setChildrenCollapsible(False)
        self.splitter.setSizes([720, 330])  # proportions, kept when the panel gets its real width
        self.body.addWidget(self.splitter, 1)
        self.add_exportable("one-hot", item, self._one_hot_data)

        self.model_chips: list[ChipView] = []
        self.chips.token_clicked.connect(self.selection.set_token)
        self.encoding.currentIndexChanged.connect(lambda _: self._show_encoding())
        self.tokenizer_changed()

    # --- Panel contract ----------------------------------------------------------------------
    def tokenizer_changed(self) -> None:
        self.encoding.blockSignals(True)
        self.encoding.clear()
        own = self.tokenizer.name if self.tokenizer is not None else "model"
        self.encoding.addItem(f"this model's ({own})", OWN)
        if not _is_gpt2(self.tokenizer):
            self.encoding.addItem("GPT-2 BPE", GPT2)
        self.encoding.setEnabled(self.encoding.count() > 1)
        self.encoding.blockSignals(False)

    def prepare(self, trace: Trace, snapshot: PanelSnapshot) -> TokenizationView:
        """On the worker: the chips (with the snapshot's tokenizer) and the count line."""
        n = trace.n_tokens
        cut = f" (of {trace.meta.truncated_from} in the prompt)" if trace.meta.truncated_from else ""
        return TokenizationView(trace, tuple(model_chips(trace, snapshot.tokenizer)),
                                f"<b>{n}</b> token{'s' if n != 1 else ''}{cut}")

    def draw(self, view: TokenizationView) -> None:
        self.model_chips = list(view.chips)
        self.count.setText(view.count)
        key = legend_html(trace_bands(view.trace))
        self.role_legend.setText(f"<small>bar over each chip = its turn's role: {key}</small>" if key else "")
        self.role_legend.setVisible(bool(key))
        self._show_encoding()
        self._show_one_hot()

    def selection_changed(self, what: str) -> None:
        if what == "token":
            self.chips.set_selected(self.selection.token)
            self._show_one_hot()

    # --- the chips ---------------------------------------------------------------------------
    def prompt_text(self) -> str:
        """The text the trace's tokens spell (the analysed part of the prompt)."""
        assert self.trace is not None
        ids = [int(i) for i in self.trace.token_ids]
        if self.tokenizer is not None:
            try:
                return self.tokenizer.decode(ids)
            except Exception:  # noqa: BLE001 - fall back to the trace's own strings
                pass
        return b"".join(display_bytes(t) for t in self.trace.tokens).decode("utf-8", errors="replace")

    def alternate_tokenizer(self, key: str) -> Tokenizer | None:
        if key == GPT2:
            from explorer.core.tokenize.base import gpt2_tokenizer

            return gpt2_tokenizer()
        return None

    def _show_encoding(self) -> None:
        if self.trace is None:
            return
        key = self.encoding.currentData() or OWN
        self.chips.set_bands(trace_bands(self.trace) if key == OWN else ())
        if key == OWN:
            self.chips.set_chips(self.model_chips, interactive=True)
            self.chips.set_selected(self.selection.token)
            self.alt_count.setText("")
            return
        try:
            tokenizer = self.alternate_tokenizer(key)
            assert tokenizer is not None
            ids = tokenizer.encode(self.prompt_text())
        except ExplorerError as exc:
            self.alt_count.setText(f"unavailable: {exc}")
            self.chips.set_chips([], interactive=False)
            return
        self.chips.set_chips(tokenizer_chips(tokenizer, ids), interactive=False)
        self.alt_count.setText(f"<b>{len(ids)}</b> tokens with {self.encoding.currentText()} "
                               f"(this model: {self.trace.n_tokens}); display only")

    # --- the one-hot view --------------------------------------------------------------------
    def _one_hot_position(self) -> int | None:
        if self.trace is None or self.trace.n_tokens == 0:
            return None
        token = self.selection.token
        return token if token is not None and token < self.trace.n_tokens else self.trace.n_tokens - 1

    def _one_hot_data(self) -> tuple[np.ndarray, list[str] | None, list[str] | None]:
        position = self._one_hot_position()
        if position is None or self.trace is None:
            return np.zeros(0, np.float32), None, None
        vector = one_hot(int(self.trace.token_ids[position]), self.trace.config.vocab_size)
        return vector, None, None

    def _show_one_hot(self) -> None:
        position = self._one_hot_position()
        item = self.plot.getPlotItem()
        if position is None or self.trace is None:
            return
        vocab = self.trace.config.vocab_size
        token_id = int(self.trace.token_ids[position])
        if self._baseline_for != vocab:  # the same vocabulary (a token switch): the baseline is kept
            self.baseline.setData([0, vocab - 1], [0, 0])
            self._baseline_for = vocab
        self.spike.setData([token_id, token_id], [0, 1])
        self.dot.setData([token_id], [1])
        self.spike_label.setText(f"id {token_id}")
        self.spike_label.setPos(token_id, 1.0)
        set_x_range(item, 0, vocab - 1, padding=0.02)
        # a small vocabulary gets one tick per id; a large one keeps pyqtgraph's own ticks
        item.getAxis("bottom").setTicks([[(i, str(i)) for i in range(vocab)]] if vocab <= 32 else None)
        chosen = "" if self.selection.token is not None else " (last; click a chip)"
        shown = visible_whitespace(self.trace.tokens[position])
        item.setTitle(f"one-hot input of token {position} '{shown}'{chosen}<br>"
                      f"1 at index {token_id}, 0 at the other {vocab - 1:,}", size="9pt")
