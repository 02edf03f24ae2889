"""The residual panel's logit lens: every layer boundary read through the final norm and the
un-embedding, kept with the trace (``lens_of``) and drawn as a heatmap of the top prediction's
probability with its text in each cell; the tooltip lists the top five and the real next token.

A small lens (``LENS_NOW_MACS``) is computed whole on the worker thread in ``prepare`` and shown whole. A large one
(GPT-2 small at 256 tokens is 13 x 256 x 50,257 x 768 multiply-adds, several times the forward pass)
is filled progressively (``explorer.ui.session.progressive``) and only where it is looked at: a prompt longer
than the grid can show legibly (``lens_window``: as many positions as fit at ``LENS_CELL_PX`` each,
8 to 24) shows the lens at a window of positions around the selected token (with each cell's text),
computed in one background job; the window moves when the selection
leaves it, computing only the positions not seen yet. "Whole prompt" shows every position instead:
the selected one first, then blocks of positions nearest to it, each drawn as it arrives. Until a
position is computed its cells are blank and the title says "computing…"; a newer trace or a hidden
panel stops the work.

``LogitLensView`` is an object ``ResidualPanel`` owns: it is handed the lens widgets the panel lays
out and callbacks (background work, the selected token, token texts, cell descriptions), keeps the
lens's own state (the lens, its cell texts, the window shown) and reads nothing else of the panel.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QPainterPath
from PySide6.QtWidgets import QAbstractButton, QCheckBox, QGraphicsPathItem, QHBoxLayout, QLabel, QSizePolicy

from explorer.core.analysis import residual as core
from explorer.core.display.labels import token_labels
from explorer.core.display.tokens import quoted, vocab_text
from explorer.core.trace import Trace
from explorer.ui.panels.residual.cells import CellTexts, DescribedHeatmap, percent, visible_text
from explorer.ui.widgets.heatmap import dark_cells
from explorer.ui.widgets.role_bands import trace_bands

LENS_TOP = 5  # predictions kept per boundary and position (the tooltip lists them)
LENS_ROW_PX = 18  # a lens row's height when its cells carry text (the panel scrolls when that is taller than it)
LENS_ROWS_MAX_PX = 1200  # …up to this; more boundaries share it (cells under 10 px tall show colours only)
TEXT_MAX_TOKENS = 40  # the lens writes each cell's top token while there are at most this many tokens (cells
                      # too small on screen for a letter show none: CellTexts; the tooltip names the tokens)
LENS_NOW_MACS = 2**28  # a lens cheaper than this is computed with the trace, on the worker…
LENS_BLOCK_MACS = 2**36  # …a larger one progressively, in blocks of positions of about this much work…
LENS_BLOCK_MIN = 64  # …and at least this many positions: fewer rows per matmul re-read the un-embedding for little work
LENS_WINDOW = 24  # at most this many positions around the selected token when the prompt is longer…
LENS_WINDOW_MIN = 8  # …at least this many…
LENS_CELL_PX = 40  # …and as many as fit the grid at about this width each (wide enough for a token's text)
LENS_AXES_PX = 110  # the grid's row labels and colour bar take about this much of its width
NEXT_TOKEN = "#ff8c00"  # outline of a lens cell whose top prediction is the real next token
LENS_KEY = (f"text: the top prediction \u00b7 colour: its probability \u00b7 <span style='color:{NEXT_TOKEN}'>"
            "\u25a1</span> the real next token")  # the line above the grid


HEADER_GAP_PX = 10  # between "Enlarge lens", the key and "whole prompt" on the line above the grid


def lens_header(enlarge: QAbstractButton, key: QLabel, whole: QCheckBox) -> QHBoxLayout:
    """The line above the lens: the "Enlarge lens" button, the key (``LENS_KEY``) and the "whole prompt" box, apart
    and centred on one line (the box's spacing is set: inherited from the lens's layout, 0, the button touched the
    key's text), with a little air above the grid."""
    key.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)  # never widens the panel
    header = QHBoxLayout()
    header.setContentsMargins(0, 2, 0, 4)
    header.setSpacing(HEADER_GAP_PX)
    for widget, stretch in ((enlarge, 0), (key, 1), (whole, 0)):
        header.addWidget(widget, stretch, Qt.AlignmentFlag.AlignVCenter)
    return header


def vocab_size_of(tokenizer: Any) -> int | None:
    return int(tokenizer.vocab_size) if tokenizer is not None else None


def lens_cost(trace: Trace) -> int:
    """Multiply-adds of the whole lens: boundaries x positions x vocabulary x d_model."""
    cfg = trace.config
    return (cfg.n_layers + 1) * trace.n_tokens * cfg.vocab_size * cfg.d_model


def block_positions(trace: Trace) -> int:
    """Positions per progressive lens job: about ``LENS_BLOCK_MACS`` of work, at least ``LENS_BLOCK_MIN``
    (each boundary's matmul reads the whole un-embedding: a few rows at a time would make it memory-bound).
    A job stops at its next boundary when it is stale."""
    cfg = trace.config
    return max(LENS_BLOCK_MIN, LENS_BLOCK_MACS // ((cfg.n_layers + 1) * cfg.vocab_size * cfg.d_model))


def lens_of(trace: Trace, tokenizer: Any) -> core.LogitLens | None:
    """The trace's lens: computed whole when it is cheap (``LENS_NOW_MACS``), else an empty one that
    the panel fills progressively (``ResidualPanel._schedule_lens``) and keeps with the trace."""
    vocab = vocab_size_of(tokenizer)
    if lens_cost(trace) <= LENS_NOW_MACS:
        return trace.memo(("residual.lens", LENS_TOP, vocab),
                          lambda: core.logit_lens(trace, top=LENS_TOP, vocab_size=vocab))
    return trace.memo(("residual.lens", LENS_TOP, vocab), lambda: core.empty_lens(trace, LENS_TOP, vocab))


def lens_texts(lens: core.LogitLens | None, tokenizer: Any) -> list[list[str]]:
    """Each lens cell's top prediction as written in the cell (a complete lens; [] otherwise)."""
    if lens is None or not lens.complete:
        return []
    top = lens.ids[..., 0]
    shown = {int(i): visible_text(vocab_text(tokenizer, int(i))) for i in np.unique(top)}
    return [[shown[int(i)] for i in row] for row in top]


class LogitLensView:
    """Drawing, tooltips and exported data of the lens heatmap, for ``ResidualPanel``.

    Widgets: the heatmap, its cell texts, its next-token outlines and the "whole prompt" box.
    Callbacks: ``later(key, compute, apply, priority)`` (the panel's background views),
    ``pending_keys()`` (the keys of its views still waiting), ``selected_token()``, ``token_text(id)``
    (a vocabulary id as text), ``tokenizer()`` and ``where(row_label, col)`` (a cell's place in words)."""

    def __init__(self, lens_map: DescribedHeatmap, cells: CellTexts, marks: QGraphicsPathItem, whole: QCheckBox, *,
                 later: Callable[..., Any], pending_keys: Callable[[], list], selected_token: Callable[[], int],
                 token_text: Callable[[int], str], tokenizer: Callable[[], Any],
                 where: Callable[[str, int], str]) -> None:
        self.lens_map, self.lens_cells, self.lens_marks, self.lens_whole = lens_map, cells, marks, whole
        self.later, self._pending_keys, self._selected = later, pending_keys, selected_token
        self.token_text, self._tokenizer, self._where = token_text, tokenizer, where
        self.trace: Trace | None = None
        self.lens: core.LogitLens | None = None
        self.lens_texts: list[list[str]] = []  # [B][n]: the top prediction's text as written in the cell
        self.next_token_hits = np.zeros((0, 0), dtype=bool)  # [B, n]: top prediction == the real next token
        self._prepared_texts: tuple[core.LogitLens | None, list[list[str]]] = (None, [])  # from the view
        self._lens_start: int | None = None  # first position of the lens window (lens_span)
        self._lens_shown = (0, 0)  # the positions the lens grid shows now, start .. stop - 1
        self._lens_window_job: tuple | None = None  # (lens, start, stop) of the last window job asked for
        self.tall = False  # "Enlarge lens": rows tall enough for text whatever the number of boundaries
        self.drawn: Callable[[], None] = lambda: None  # after a redraw of its own (a job applied): the panel's marks
        self.failed = ""  # why the last lens job failed ("" while none did)

    def show(self, trace: Trace, lens: core.LogitLens | None, texts: list[list[str]]) -> None:
        """A new trace's lens (``texts``: every cell's text when it is complete, prepared with it)."""
        self.trace, self.lens = trace, lens
        self.lens_texts = texts
        self._prepared_texts = (lens, texts)
        self.failed = ""
        self._lens_start = None  # a new prompt: the window centres on the selected token again
        self._draw_lens()

    @property
    def shown(self) -> tuple[int, int]:
        """The positions the grid shows now, start .. stop - 1."""
        return self._lens_shown

    def moved(self) -> bool:
        """Whether the positions to show differ from those shown (the selection or the width changed)."""
        return self.trace is not None and self.lens is not None and self.lens_span() != self._lens_shown

    def _complete_texts(self) -> list[list[str]]:
        lens, texts = self._prepared_texts
        if lens is self.lens and texts:
            return texts
        return lens_texts(self.lens, self._tokenizer())

    def lens_window(self) -> int:
        """How many positions the lens shows around the selected token: as many as fit its grid at
        ``LENS_CELL_PX`` each, from ``LENS_WINDOW_MIN`` to ``LENS_WINDOW``."""
        fit = (self.lens_map.width() - LENS_AXES_PX) // LENS_CELL_PX
        return int(min(LENS_WINDOW, max(LENS_WINDOW_MIN, fit)))

    def lens_span(self) -> tuple[int, int]:
        """The positions the lens shows, ``start .. stop - 1``: all of them for a short prompt or with
        "whole prompt" on, else ``lens_window()`` around the selected token. The window stays where it
        is while the selected token is inside it, so clicking a cell does not move the grid under the
        mouse; it re-centres when the selection leaves it (or its width changes)."""
        trace = self.trace
        n = trace.n_tokens if trace is not None else 0
        width = self.lens_window()
        if self.lens_whole.isChecked() or n <= width or lens_cost(trace) <= LENS_NOW_MACS:
            return 0, n  # (a cheap lens is computed whole with the trace: all of it is shown)
        selected = self._selected()
        start = self._lens_start
        if start is None or not start <= selected < start + width or start + width > n \
                or self._lens_shown[1] - self._lens_shown[0] != width:
            start = min(max(0, selected - width // 2), n - width)
        self._lens_start = start
        return start, start + width

    def draw(self) -> None:
        """Draw the lens at the positions to show now."""
        self._draw_lens()

    def _draw_lens(self) -> None:
        lens, trace = self.lens, self.trace
        self.lens_whole.setVisible(trace is not None and lens_cost(trace) > LENS_NOW_MACS
                                   and trace.n_tokens > LENS_WINDOW_MIN)
        if lens is None:
            self.lens_map.set_data(np.zeros((0, 0), np.float32))
            self.lens_map.plot.setTitle("logit lens: needs the loaded model (this trace has none)")
            self.lens_cells.set_cells([], np.zeros((0, 0), bool), np.zeros((0, 0), bool))
            self.lens_marks.setPath(QPainterPath())
            self.next_token_hits = np.zeros((0, 0), dtype=bool)
            self._lens_shown = (0, 0)
            return
        a, b = self._lens_shown = self.lens_span()
        filled = lens.filled[a:b]
        top1 = lens.probs[:, a:b, 0]
        if not filled.all():  # positions still being computed: no colour (NaN) and no text yet
            top1 = np.where(filled[None, :], top1, np.nan).astype(np.float32)
        self.lens_map.set_data(top1, list(lens.labels), list(trace.tokens[a:b]), levels=(0.0, 1.0),
                               value_name="top-1 probability")
        self.lens_map.set_token_bands(cols=trace_bands(trace, a, b))  # a conversation's roles, the shown window
        B, n = top1.shape
        hits = np.zeros((B, n), dtype=bool)
        following = np.asarray(trace.token_ids[a + 1:b + 1])  # the real next tokens (none after the last)
        m = len(following)
        hits[:, :m] = (lens.ids[:, a:a + m, 0] == following[None, :]) & filled[None, :m]
        self.next_token_hits = hits
        legible = n <= TEXT_MAX_TOKENS
        # rows tall enough for readable text (the panel scrolls when that is more than it has); enlarged, always
        rows_px = B * LENS_ROW_PX + 80
        self.lens_map.setMinimumHeight(rows_px if self.tall else min(rows_px, LENS_ROWS_MAX_PX) if legible else 150)
        self.lens_cells.setVisible(legible)
        if legible:
            if (a, b) != (0, trace.n_tokens) or not lens.complete:
                shown = filled.tolist()  # (plain lists: no numpy scalar per cell)
                self.lens_texts = [[visible_text(self.token_text(t)) if shown[i] else "" for i, t in enumerate(row)]
                                   for row in lens.ids[:, a:b, 0].tolist()]
            else:  # the whole lens, complete (perhaps just now, by its last block): every cell's text
                self.lens_texts = self._complete_texts()
            self.lens_cells.set_cells(self.lens_texts, hits, dark_cells(self.lens_map.colormap, top1, (0.0, 1.0)))
        else:
            self.lens_cells.set_cells([], np.zeros((0, 0), bool), np.zeros((0, 0), bool))
        path = QPainterPath()
        inset = 0.06
        for r, i in zip(*np.nonzero(hits)):
            path.addRect(QRectF(i + inset, r + inset, 1 - 2 * inset, 1 - 2 * inset))
        self.lens_marks.setPath(path)
        # a short title (the key to the colours and marks is the line above the grid: ``LENS_KEY``), so that
        # neither the panel nor an exported picture cuts it
        parts = [] if legible else ["hover for the tokens"]
        if (a, b) != (0, trace.n_tokens):
            parts.insert(0, f"positions {a}\u2013{b - 1} of {trace.n_tokens}")
        if self.failed and not filled.all():
            parts.insert(0, f"could not compute {n - int(filled.sum())} of {n} positions ({self.failed})")
        elif not filled.all():
            parts.insert(0, f"computing\u2026 {int(filled.sum())} of {n} positions")
        self.lens_map.plot.setTitle("logit lens" + (": " + "; ".join(parts) if parts else ""))

    def lens_position(self, col: int) -> int:
        """The token position of a column of the lens grid."""
        return self._lens_shown[0] + col

    def schedule(self) -> None:
        """Ask for the positions of a progressive lens that are shown and not computed yet: a window's
        missing positions in one job; the whole prompt's, the selected one first, then blocks of
        positions nearest to it first (each drawn when it arrives)."""
        lens, trace = self.lens, self.trace
        if lens is None or trace is None or lens.complete:
            return
        vocab = vocab_size_of(self._tokenizer())
        a, b = self._lens_shown  # what the grid shows now is what is asked for (drawn just before)
        if (a, b) != (0, trace.n_tokens):
            missing = np.flatnonzero(~lens.filled[a:b])
            if missing.size:
                lo, hi = a + int(missing[0]), a + int(missing[-1]) + 1
                running = self._lens_window_job
                if running is not None and running[0] is lens and running[1] <= lo and hi <= running[2] \
                        and ("lens", "window") in self._pending_keys():
                    return  # the job under way covers these positions already: let it finish
                self._lens_window_job = (lens, lo, hi)
                self._lens_job(("lens", "window"), lo, hi, vocab, priority=0)
            return
        n, step, selected = trace.n_tokens, block_positions(trace), self._selected()
        if not lens.filled[selected]:
            self._lens_job(("lens", "selected"), selected, selected + 1, vocab, priority=0)
        for start in range(0, n, step):
            stop = min(n, start + step)
            if not lens.filled[start:stop].all():
                distance = 0 if start <= selected < stop else min(abs(start - selected), abs(stop - 1 - selected))
                self._lens_job(("lens", start), start, stop, vocab, priority=1 + distance)

    def _lens_job(self, key, start: int, stop: int, vocab: int | None, priority: int) -> None:
        trace, lens = self.trace, self.lens

        def compute(check) -> core.LensBlock:
            return core.lens_columns(trace, start, stop, LENS_TOP, vocab, check=check)

        def apply(block: core.LensBlock) -> None:
            if self.lens is lens:
                lens.fill(block)
                self._draw_lens()  # (the window may have moved meanwhile: a narrower grid, another selection)
                self.drawn()
                if self._lens_shown != (0, self.trace.n_tokens):  # (the whole prompt's blocks are all asked for)
                    self.schedule()  # a window that moved meanwhile: what it shows and lacks is asked for

        def failed(message: str) -> None:
            if self.lens is lens:
                self.failed = message
                self._draw_lens()

        self.later(key, compute, apply, priority, failed=failed)


    def lens_cell_text(self, row: int, col: int) -> str:
        """The tooltip of a lens cell: the top five predictions there and how the real next token fares."""
        lens, trace = self.lens, self.trace
        col = self.lens_position(col)
        if not lens.filled[col]:
            return f"{self._where(lens.labels[row], col)}: computing\u2026"
        lines = [f"{self._where(lens.labels[row], col)}: predicts the next token"]
        for k in range(lens.ids.shape[2]):
            token_id = int(lens.ids[row, col, k])
            lines.append(f"  {k + 1}. {quoted(self.token_text(token_id))}  {percent(lens.probs[row, col, k])}")
        if col < trace.n_tokens - 1:
            real = int(trace.token_ids[col + 1])
            rank = int(lens.target_ranks[row, col]) + 1
            mark = "  \u2713 the top prediction" if self.next_token_hits[row, col - self._lens_shown[0]] else ""
            lines.append(f"real next token {quoted(self.token_text(real))}: "
                         f"{percent(lens.target_probs[row, col])}, rank {rank}{mark}")
        else:
            lines.append("real next token: none (the last position)")
        return "\n".join(lines)


    def probs_data(self) -> tuple[np.ndarray, list[str], list[str]]:
        """The top prediction's probability at every boundary and shown position [L+1, shown] (NaN where
        not computed yet)."""
        if self.lens is None:
            return np.zeros((0, 0), np.float32), [], []
        a, b = self._lens_shown
        probs = np.where(self.lens.filled[None, a:b], self.lens.probs[:, a:b, 0], np.nan).astype(np.float32)
        return probs, list(self.lens.labels), token_labels(self.trace.tokens)[a:b]

    def ids_data(self) -> tuple[np.ndarray, list[str], list[str]]:
        """The top prediction's vocabulary id at every boundary and shown position [L+1, shown] (int64; -1
        where not computed yet)."""
        if self.lens is None:
            return np.zeros((0, 0), np.int64), [], []
        a, b = self._lens_shown
        ids = np.where(self.lens.filled[None, a:b], self.lens.ids[:, a:b, 0], -1).astype(np.int64)
        return ids, list(self.lens.labels), token_labels(self.trace.tokens)[a:b]
