"""The residual panel's logit lens: every layer boundary read through the final norm and the
un-embedding, computed once per trace (``lens_of``, ``lens_texts_of``: on the worker thread in
``prepare``, for the tokenizer of the panel's snapshot) and drawn as a heatmap of the top prediction's
probability with its text in each cell; the tooltip lists the top five and the real next token.

``LogitLensView`` is mixed into ``ResidualPanel``: the widgets and state it uses are the panel's.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from PySide6.QtCore import QRectF
from PySide6.QtGui import QPainterPath

from explorer.core.analysis import residual as core
from explorer.core.display.labels import token_labels
from explorer.core.trace import Trace
from explorer.ui.widgets.heatmap import dark_cells
from explorer.ui.panels.residual.cells import percent, quoted, visible_text

LENS_TOP = 5  # predictions kept per boundary and position (the tooltip lists them)
LENS_ROW_PX = 18  # a lens row's height when its cells carry text
TEXT_MAX_TOKENS = 40  # the lens writes each cell's top token while there are at most this many tokens…
TEXT_MAX_ROWS = 25  # …and boundaries; beyond that, colours only (the tooltip still names the tokens)
NEXT_TOKEN = "#ff8c00"  # outline of a lens cell whose top prediction is the real next token


def vocab_size_of(tokenizer: Any) -> int | None:
    return int(tokenizer.vocab_size) if tokenizer is not None else None


def display_text(tokenizer: Any, token_id: int) -> str:
    """A vocabulary id as text: the tokenizer's display string, else "#id" (any thread)."""
    if tokenizer is not None:
        try:
            return tokenizer.display(int(token_id))
        except Exception:  # noqa: BLE001 - an id the tokenizer cannot show (padded vocabulary rows)
            pass
    return f"#{token_id}"


def lens_of(trace: Trace, tokenizer: Any) -> core.LogitLens | None:
    vocab = vocab_size_of(tokenizer)
    return trace.memo(("residual.lens", LENS_TOP, vocab),
                      lambda: core.logit_lens(trace, top=LENS_TOP, vocab_size=vocab))


def lens_texts_of(trace: Trace, lens: core.LogitLens | None, tokenizer: Any) -> list[list[str]]:
    """Each lens cell's top prediction as written in the cell."""
    if lens is None:
        return []

    def compute() -> list[list[str]]:
        top = lens.ids[..., 0]
        shown = {int(i): visible_text(display_text(tokenizer, int(i))) for i in np.unique(top)}
        return [[shown[int(i)] for i in row] for row in top]

    return trace.memo(("residual.lens_texts", LENS_TOP, vocab_size_of(tokenizer), id(tokenizer)), compute)


class LogitLensView:
    """Drawing, tooltips and exported data of the lens heatmap (a mixin of ``ResidualPanel``)."""

    def _draw_lens(self) -> None:
        lens, trace = self.lens, self.trace
        if lens is None:
            self.lens_map.set_data(np.zeros((0, 0), np.float32))
            self.lens_map.plot.setTitle("logit lens: needs the loaded model (this trace has none)")
            self.lens_cells.set_cells([], np.zeros((0, 0), bool), np.zeros((0, 0), bool))
            self.lens_marks.setPath(QPainterPath())
            self.next_token_hits = np.zeros((0, 0), dtype=bool)
            return
        top1 = lens.probs[..., 0]
        self.lens_map.set_data(top1, list(lens.labels), self._token_axis(), levels=(0.0, 1.0),
                               value_name="top-1 probability")
        B, n = top1.shape
        hits = np.zeros((B, n), dtype=bool)
        if n > 1:
            hits[:, :-1] = lens.ids[:, :-1, 0] == np.asarray(trace.token_ids[1:])[None, :]
        self.next_token_hits = hits
        legible = n <= TEXT_MAX_TOKENS and B <= TEXT_MAX_ROWS
        # rows tall enough for readable text (the panel scrolls when that is more than it has)
        self.lens_map.setMinimumHeight(min(B * LENS_ROW_PX + 80, 640) if legible else 150)
        self.lens_cells.setVisible(legible)
        if legible:
            self.lens_cells.set_cells(self.lens_texts, hits, dark_cells(self.lens_map.colormap, top1, (0.0, 1.0)))
        else:
            self.lens_cells.set_cells([], np.zeros((0, 0), bool), np.zeros((0, 0), bool))
        path = QPainterPath()
        inset = 0.06
        for b, i in zip(*np.nonzero(hits)):
            path.addRect(QRectF(i + inset, b + inset, 1 - 2 * inset, 1 - 2 * inset))
        self.lens_marks.setPath(path)
        what = "top prediction (text) and its probability (colour)" if legible else \
            "top prediction's probability (hover for the tokens)"
        self.lens_map.plot.setTitle(f"logit lens: {what}; <span style='color:{NEXT_TOKEN}'>\u25a1</span> "
                                    "= the real next token")


    def lens_cell_text(self, row: int, col: int) -> str:
        """The tooltip of a lens cell: the top five predictions there and how the real next token fares."""
        lens, trace = self.lens, self.trace
        lines = [f"{self._where(lens.labels[row], col)}: predicts the next token"]
        for k in range(lens.ids.shape[2]):
            token_id = int(lens.ids[row, col, k])
            lines.append(f"  {k + 1}. {quoted(self.token_text(token_id))}  {percent(lens.probs[row, col, k])}")
        if col < trace.n_tokens - 1:
            real = int(trace.token_ids[col + 1])
            rank = int(lens.target_ranks[row, col]) + 1
            mark = "  \u2713 the top prediction" if self.next_token_hits[row, col] else ""
            lines.append(f"real next token {quoted(self.token_text(real))}: "
                         f"{percent(lens.target_probs[row, col])}, rank {rank}{mark}")
        else:
            lines.append("real next token: none (the last position)")
        return "\n".join(lines)


    def _lens_probs_data(self) -> tuple[np.ndarray, list[str], list[str]]:
        """The top prediction's probability at every boundary and position [L+1, n]."""
        if self.lens is None:
            return np.zeros((0, 0), np.float32), [], []
        return self.lens.probs[..., 0], list(self.lens.labels), token_labels(self.trace.tokens)

    def _lens_ids_data(self) -> tuple[np.ndarray, list[str], list[str]]:
        """The top prediction's vocabulary id at every boundary and position [L+1, n] (int64)."""
        if self.lens is None:
            return np.zeros((0, 0), np.int64), [], []
        return self.lens.ids[..., 0], list(self.lens.labels), token_labels(self.trace.tokens)
