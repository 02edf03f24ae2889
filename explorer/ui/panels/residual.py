"""Residual stream & logit lens: how large the stream is at every layer boundary, how much each
sublayer wrote into it, how far each block turned it, and what it would predict if the model
stopped there.

Boundaries (rows "embed", "after 0", …, see ``explorer.core.analysis.residual``): boundary 0 is what enters
block 0, boundary l + 1 what leaves block l; the last one is the model's real output.

* Norms: ‖x‖ at every boundary and token, a heatmap; beside it the selected token's norm over depth
  as a line (the other tokens faint grey behind it).
* Sublayers: ‖attention output‖ and ‖FFN output‖ of the selected token, grouped bars per block
  (no FFN bars for attention-only models).
* Turning: cosine of the stream entering and leaving each block, per token (1: barely turned).
* Logit lens: every boundary read through the final norm and un-embedding. Each cell's colour is
  the top prediction's probability and, while the grid is small enough to read, its text is the
  top predicted token (spaces shown as "·"); cells whose top prediction is the real next token are
  outlined in orange and written in bold. The tooltip lists the top five and the real next token's
  probability and rank. The lens costs one vocabulary-wide matmul per boundary, so it is computed on
  the worker thread (``prepare``) and kept with the trace (``Trace.memo``).

The selected token (the last one when none is selected) is outlined in every heatmap; clicking a
cell of any heatmap selects its token.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QFont, QFontMetricsF, QPainterPath, QPen
from PySide6.QtWidgets import (QGraphicsPathItem, QHBoxLayout, QLabel, QMenu, QSplitter,
                               QWidget)

from explorer.core.analysis import residual as core
from explorer.core.export import token_labels
from explorer.core.display.levels import abbreviate, thinned_ticks
from explorer.core.trace import Trace
from explorer.ui.panels.base import Panel
from explorer.ui.widgets.plots import fixed_plot, outline
from explorer.ui.selection import Selection
from explorer.ui.widgets.heatmap import Heatmap, format_value

LENS_TOP = 5  # predictions kept per boundary and position (the tooltip lists them)
TEXT_MAX_TOKENS = 40  # the lens writes each cell's top token while there are at most this many tokens…
TEXT_MAX_ROWS = 25  # …and boundaries; beyond that, colours only (the tooltip still names the tokens)
CELL_CHARS = 10  # a cell's text is cut to this many characters (and to the cell's width on screen)
SELECTED = pg.mkPen("#ff2d55", width=1.5, cosmetic=True, style=Qt.PenStyle.DashLine)  # as the attention panel
NEXT_TOKEN = "#ff8c00"  # outline of a lens cell whose top prediction is the real next token
ATTN_BRUSH, FFN_BRUSH = pg.mkBrush("#3b6fb6"), pg.mkBrush("#e08e0b")
SELECTED_LINE = pg.mkPen("#ff2d55", width=2.5)
OTHER_LINES = pg.mkPen((150, 150, 150, 90), width=1)
_DARK_BELOW = 0.55  # viridis is dark below about this fraction of its range: white text there


def visible_text(text: str, max_chars: int = CELL_CHARS) -> str:
    """A token's text for a small cell: spaces as "·", newlines "↵", tabs "→", other control
    characters escaped, cut with an ellipsis; "∅" for an empty string."""
    if not text:
        return "\u2205"
    text = text.replace(" ", "\u00b7").replace("\r", "\\r")
    text = "".join(c if c >= " " or c in "\n\t" else f"\\x{ord(c):02x}" for c in text)
    return abbreviate(text, max_chars)


def quoted(token: str) -> str:
    return "'" + abbreviate(token, 24) + "'"


def percent(p: float) -> str:
    """A probability as a percentage, in exponent form when it would round to 0.00%."""
    p = float(p)
    return f"{100 * p:.2f}%" if p >= 5e-5 else f"{p:.2e}"


class CellTexts(pg.GraphicsObject):
    """Short texts centred on the cells of a grid (cell (r, c) spans [c, c+1] x [r, r+1] in data
    coordinates), all painted in one call at a fixed pixel size. Text wider than its cell is elided;
    ``bold`` cells are written in bold; ``light`` cells (on a dark colour) in white."""

    def __init__(self) -> None:
        super().__init__()
        self.texts: list[list[str]] = []
        self.bold = np.zeros((0, 0), dtype=bool)
        self.light = np.zeros((0, 0), dtype=bool)
        self._rect = QRectF()

    def set_cells(self, texts: list[list[str]], bold: np.ndarray, light: np.ndarray) -> None:
        self.prepareGeometryChange()
        self.texts, self.bold, self.light = texts, np.asarray(bold, bool), np.asarray(light, bool)
        rows = len(texts)
        cols = len(texts[0]) if rows else 0
        self._rect = QRectF(0, 0, cols, rows)
        self.update()

    def boundingRect(self) -> QRectF:  # noqa: N802 (Qt override)
        return self._rect

    def paint(self, painter, *_args) -> None:
        if not self.texts:
            return
        transform = painter.transform()
        origin, corner = transform.map(QPointF(0, 0)), transform.map(QPointF(1, 1))
        w, h = abs(corner.x() - origin.x()), abs(corner.y() - origin.y())
        if w < 10 or h < 7:  # cells too small on screen to hold a letter
            return
        painter.save()
        painter.resetTransform()  # draw in device pixels: text keeps its size when the view zooms
        font = QFont(painter.font())
        font.setPixelSize(int(np.clip(h * 0.5, 7, 13)))
        bold = QFont(font)
        bold.setBold(True)
        fonts = {False: (font, QFontMetricsF(font)), True: (bold, QFontMetricsF(bold))}
        colours = {True: QColor("white"), False: QColor("black")}
        for r, row in enumerate(self.texts):
            for c, text in enumerate(row):
                f, metrics = fonts[bool(self.bold[r, c])]
                centre = transform.map(QPointF(c + 0.5, r + 0.5))
                rect = QRectF(centre.x() - w / 2 + 2, centre.y() - h / 2, w - 4, h)
                painter.setFont(f)
                painter.setPen(colours[bool(self.light[r, c])])
                painter.drawText(rect, Qt.AlignmentFlag.AlignCenter,
                                 metrics.elidedText(text, Qt.TextElideMode.ElideRight, rect.width()))
        painter.restore()


class DescribedHeatmap(Heatmap):
    """A heatmap whose tooltips come from a function of (row, column) when one is set."""

    describe: Callable[[int, int], str] | None = None

    def cell_text(self, row: int, col: int) -> str:
        if self.describe is not None:
            return self.describe(row, col)
        return super().cell_text(row, col)


class ResidualPanel(Panel):
    title = "Residual stream & logit lens"
    explanation = "residual"

    def __init__(self, selection: Selection, parent: QWidget | None = None) -> None:
        super().__init__(selection, parent)
        self.norms = np.zeros((0, 0), dtype=np.float32)
        self.contributions: dict[str, np.ndarray] | None = None
        self.cosine = np.zeros((0, 0), dtype=np.float32)
        self.lens: core.LogitLens | None = None
        self.lens_texts: list[list[str]] = []  # [B][n]: the top prediction's text as written in the cell
        self.next_token_hits = np.zeros((0, 0), dtype=bool)  # [B, n]: top prediction == the real next token
        self._labels: list[str] = []  # boundary labels
        self._texts: dict[int, str] = {}  # vocabulary id -> display text, for the current trace

        row = QHBoxLayout()
        self.info = QLabel()
        self.info.setStyleSheet("color: #555")
        row.addWidget(self.info, 1)
        self.body.addLayout(row)

        self.norm_map = DescribedHeatmap(colormap="viridis", title="\u2016residual\u2016 at every layer boundary")
        self.norm_map.describe = self._norm_text
        self.cosine_map = DescribedHeatmap(colormap="viridis",
                                           title="cosine(stream entering, leaving) each block")
        self.cosine_map.describe = self._cosine_text
        self.norm_plot = fixed_plot(grid="xy")
        self.norm_plot.setLabel("left", "\u2016x\u2016")
        self.other_lines = pg.PlotDataItem(pen=OTHER_LINES, connect="finite")
        self.norm_line = pg.PlotDataItem(pen=SELECTED_LINE, symbol="o", symbolSize=6,
                                         symbolBrush="#ff2d55", symbolPen=None)
        self.norm_plot.addItem(self.other_lines)
        self.norm_plot.addItem(self.norm_line)

        self.bars_plot = fixed_plot()
        self.bars_plot.setLabel("left", "\u2016output\u2016")
        self.bars_plot.setLabel("bottom", "block")
        self.attn_bars = pg.BarGraphItem(x=[], height=[], width=0.4, brush=ATTN_BRUSH, pen=None)
        self.ffn_bars = pg.BarGraphItem(x=[], height=[], width=0.4, brush=FFN_BRUSH, pen=None)
        self.bars_plot.addItem(self.attn_bars)
        self.bars_plot.addItem(self.ffn_bars)
        self.bars_legend = self.bars_plot.addLegend(offset=(-10, 5), colCount=2)

        self.lens_map = DescribedHeatmap(colormap="viridis", title="logit lens")
        self.lens_map.describe = self.lens_cell_text
        self.lens_cells = CellTexts()
        self.lens_cells.setZValue(20)
        self.lens_map.plot.addItem(self.lens_cells)
        self.lens_marks = QGraphicsPathItem()
        marks_pen = QPen(QColor(NEXT_TOKEN), 2)
        marks_pen.setCosmetic(True)
        self.lens_marks.setPen(marks_pen)
        self.lens_marks.setZValue(25)
        self.lens_map.plot.addItem(self.lens_marks)

        self._outlines = {id(m): outline(m.plot, SELECTED, z=30, visible=False) for m in (self.norm_map, self.cosine_map, self.lens_map)}
        for heatmap in (self.norm_map, self.cosine_map, self.lens_map):
            heatmap.cell_clicked.connect(lambda _row, col: self.selection.set_token(col))

        left = QSplitter(Qt.Orientation.Vertical)
        left.addWidget(self.norm_map)
        left.addWidget(self.cosine_map)
        left.setStretchFactor(0, 3)
        left.setStretchFactor(1, 2)
        right = QSplitter(Qt.Orientation.Vertical)
        right.addWidget(self.norm_plot)
        right.addWidget(self.bars_plot)
        top = QSplitter(Qt.Orientation.Horizontal)
        top.addWidget(left)
        top.addWidget(right)
        top.setStretchFactor(0, 3)
        top.setStretchFactor(1, 2)
        outer = QSplitter(Qt.Orientation.Vertical)
        outer.addWidget(top)
        outer.addWidget(self.lens_map)
        outer.setStretchFactor(0, 1)
        outer.setStretchFactor(1, 1)
        self.body.addWidget(outer, 1)
        self._register_exports()

    def _register_exports(self) -> None:
        self.add_exportable("residual norms", self.norm_map, self._norms_data)
        self.add_exportable("residual norm of the selected token", self.norm_plot, self._norm_line_data)
        self.add_exportable("sublayer contributions", self.bars_plot, self._contributions_data)
        self.add_exportable("consecutive cosine", self.cosine_map, self._cosine_data)
        # two exports of one plot: the menu hosts one set of actions per plot, so the token ids
        # (registered first, then displaced) come back as a submenu below the probabilities'
        ids = self.add_exportable("logit lens top token ids", self.lens_map, self._lens_ids_data)
        self.add_exportable("logit lens top-1 probability", self.lens_map, self._lens_probs_data)
        from explorer.ui.export import export_actions  # deferred like Panel.add_exportable's

        menu = self.lens_map.plot.getViewBox().menu
        submenu = QMenu("Top token ids", menu)
        submenu.addActions(export_actions(ids, self))
        shown = getattr(menu, "_explorer_export_actions", [])
        after = menu.actions()[len(shown)] if len(menu.actions()) > len(shown) else None
        menu.insertMenu(after, submenu) if after is not None else menu.addMenu(submenu)
        self.lens_ids_menu = submenu

    # --- the panel contract ----------------------------------------------------------------------
    def prepare(self, trace: Trace) -> None:
        """On the worker thread: norms, sublayer sizes, cosines and the logit lens with its texts."""
        super().prepare(trace)
        self._norms(trace)
        self._contributions(trace)
        self._cosine(trace)
        self._lens_texts(trace, self._lens(trace))

    def _vocab_size(self) -> int | None:
        return int(self.tokenizer.vocab_size) if self.tokenizer is not None else None

    @staticmethod
    def _norms(trace: Trace) -> np.ndarray:
        return trace.memo(("residual.norms",), lambda: core.residual_norms(trace))

    @staticmethod
    def _cosine(trace: Trace) -> np.ndarray:
        return trace.memo(("residual.cosine",), lambda: core.consecutive_cosine(trace))

    @staticmethod
    def _contributions(trace: Trace) -> dict[str, np.ndarray] | None:
        def compute() -> dict[str, np.ndarray] | None:
            try:
                return core.sublayer_contributions(trace)
            except KeyError:  # neither stored nor derivable (a saved trace without its model)
                return None

        return trace.memo(("residual.contributions",), compute)

    def _lens(self, trace: Trace) -> core.LogitLens | None:
        vocab = self._vocab_size()
        return trace.memo(("residual.lens", LENS_TOP, vocab),
                          lambda: core.logit_lens(trace, top=LENS_TOP, vocab_size=vocab))

    def _lens_texts(self, trace: Trace, lens: core.LogitLens | None) -> list[list[str]]:
        if lens is None:
            return []

        def compute() -> list[list[str]]:
            top = lens.ids[..., 0]
            shown = {int(i): visible_text(self._display(int(i))) for i in np.unique(top)}
            return [[shown[int(i)] for i in row] for row in top]

        return trace.memo(("residual.lens_texts", LENS_TOP, self._vocab_size(), id(self.tokenizer)), compute)

    def show_trace(self, trace: Trace) -> None:
        self._labels = core.boundary_labels(trace.config.n_layers)
        self.norms = self._norms(trace)
        self.contributions = self._contributions(trace)
        self.cosine = self._cosine(trace)
        self.lens = self._lens(trace)
        self.lens_texts = self._lens_texts(trace, self.lens)
        self._draw_norms()
        self._draw_cosine()
        self._draw_lens()
        self._draw_token()

    def selection_changed(self, what: str) -> None:
        if what == "token":
            self._draw_token()

    def tokenizer_changed(self) -> None:
        self._texts = {}

    # --- helpers ---------------------------------------------------------------------------------
    @property
    def selected_token(self) -> int:
        """The selected token, or the last one when none (or one beyond this trace) is selected."""
        n = self.trace.n_tokens if self.trace is not None else 1
        token = self.selection.token
        return n - 1 if token is None or not 0 <= token < n else token

    def token_text(self, token_id: int) -> str:
        """A vocabulary id as text: the tokenizer's display string, else "#id" (cached; GUI thread)."""
        text = self._texts.get(token_id)
        if text is None:
            text = self._texts[token_id] = self._display(token_id)
        return text

    def _display(self, token_id: int) -> str:
        """``token_text`` without the cache, safe on the worker thread."""
        if self.tokenizer is not None:
            try:
                return self.tokenizer.display(int(token_id))
            except Exception:  # noqa: BLE001 - an id the tokenizer cannot show (padded vocabulary rows)
                pass
        return f"#{token_id}"

    def _token_axis(self) -> list[str]:
        return list(self.trace.tokens)

    # --- drawing ---------------------------------------------------------------------------------
    def _draw_norms(self) -> None:
        trace = self.trace
        self.norm_map.set_data(self.norms, self._labels, self._token_axis(),
                               levels=(0.0, float(self.norms.max(initial=0.0)) or 1.0), value_name="\u2016x\u2016")
        cfg = trace.config
        self.info.setText(f"{cfg.n_layers} layers \u00b7 {trace.n_tokens} tokens \u00b7 "
                          f"{len(self._labels)} layer boundaries (embed = entering block 0)")
        B, n = self.norms.shape
        x = np.append(np.arange(B, dtype=np.float64), np.nan)
        self.other_lines.setData(np.tile(x, n), np.concatenate(
            [np.append(self.norms[:, i].astype(np.float64), np.nan) for i in range(n)]))
        self.norm_plot.getAxis("bottom").setTicks([[(t - 0.5, s) for t, s in
                                                    thinned_ticks(self._labels, max_labels=10, max_chars=9)]])
        self.norm_plot.setXRange(-0.3, max(B - 1, 1) + 0.3, padding=0)
        self.norm_plot.setYRange(0, float(self.norms.max(initial=0.0)) or 1.0, padding=0.05)

    def _draw_cosine(self) -> None:
        rows = [f"block {layer}" for layer in range(self.cosine.shape[0])]
        low = min(0.0, float(self.cosine.min(initial=0.0)))
        self.cosine_map.set_data(self.cosine, rows, self._token_axis(), levels=(low, 1.0), value_name="cosine")

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
        self.lens_cells.setVisible(legible)
        if legible:
            self.lens_cells.set_cells(self.lens_texts, hits, top1 < _DARK_BELOW)
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

    def _draw_token(self) -> None:
        if self.trace is None or self.norms.size == 0:
            return
        i = self.selected_token
        tokens = self.trace.tokens
        for heatmap in (self.norm_map, self.cosine_map, self.lens_map):
            outline = self._outlines[id(heatmap)]
            rows = heatmap.matrix.shape[0] if heatmap.matrix.ndim == 2 else 0
            outline.setVisible(rows > 0)
            outline.setRect(QRectF(i, 0, 1, rows))
        B = self.norms.shape[0]
        self.norm_line.setData(np.arange(B, dtype=np.float64), self.norms[:, i].astype(np.float64))
        self.norm_plot.setTitle(f"\u2016x\u2016 of {quoted(tokens[i])} ({i}) by depth (grey: other tokens)")
        self._draw_bars(i)

    def _draw_bars(self, i: int) -> None:
        cfg = self.trace.config
        L = cfg.n_layers
        x = np.arange(L, dtype=np.float64)
        self.bars_legend.clear()
        if self.contributions is None:
            self.attn_bars.setOpts(x=[], height=[])
            self.ffn_bars.setOpts(x=[], height=[])
            self.bars_plot.setTitle("sublayer outputs: not captured (and no model)")
            return
        attn = self.contributions["attn"][:, i]
        name = f"{quoted(self.trace.tokens[i])} ({i})"
        if cfg.has_ffn:
            mlp = self.contributions["mlp"][:, i]
            self.attn_bars.setOpts(x=x - 0.2, height=attn, width=0.4)
            self.ffn_bars.setOpts(x=x + 0.2, height=mlp, width=0.4)
            self.ffn_bars.setVisible(True)
            self.bars_legend.addItem(self.attn_bars, "attention")
            self.bars_legend.addItem(self.ffn_bars, "FFN")
            self.bars_plot.setTitle(f"what each sublayer added at {name}")
            top = float(max(attn.max(initial=0.0), mlp.max(initial=0.0)))
        else:
            self.attn_bars.setOpts(x=x, height=attn, width=0.6)
            self.ffn_bars.setOpts(x=[], height=[])
            self.ffn_bars.setVisible(False)
            self.bars_legend.addItem(self.attn_bars, "attention")
            self.bars_plot.setTitle(f"attention output at {name} (no FFN)")
            top = float(attn.max(initial=0.0))
        step = max(1, math.ceil(L / 16))
        self.bars_plot.getAxis("bottom").setTicks([[(layer, str(layer)) for layer in range(0, L, step)]])
        self.bars_plot.setXRange(-0.6, L - 0.4, padding=0)
        self.bars_plot.setYRange(0, (top or 1.0) * 1.3, padding=0)  # headroom for the legend

    # --- tooltips --------------------------------------------------------------------------------
    def _where(self, row_label: str, col: int) -> str:
        return f"{row_label}, {quoted(self.trace.tokens[col])} ({col})"

    def _norm_text(self, row: int, col: int) -> str:
        return f"{self._where(self._labels[row], col)}: \u2016x\u2016 = {format_value(self.norms[row, col])}"

    def _cosine_text(self, row: int, col: int) -> str:
        return (f"block {row}, {quoted(self.trace.tokens[col])} ({col}): cosine of the stream entering and "
                f"leaving = {format_value(self.cosine[row, col])}")

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

    # --- exported data ---------------------------------------------------------------------------
    def _norms_data(self) -> tuple[np.ndarray, list[str], list[str]]:
        """‖x‖ [L+1, n]: boundaries x tokens."""
        return self.norms, list(self._labels), token_labels(self.trace.tokens)

    def _norm_line_data(self) -> tuple[np.ndarray, list[str], list[str]]:
        """The selected token's ‖x‖ over the L+1 boundaries."""
        i = self.selected_token
        return self.norms[:, i], list(self._labels), [f"norm of {token_labels(self.trace.tokens)[i]}"]

    def _contributions_data(self) -> tuple[np.ndarray, list[str], list[str]]:
        """The selected token's ‖attention output‖ and ‖FFN output‖ per block: [L, 2] ([L, 1],
        attention only, for a model without FFN)."""
        cfg, i = self.trace.config, self.selected_token
        rows = [f"block {layer}" for layer in range(cfg.n_layers)]
        if self.contributions is None:
            return np.zeros((cfg.n_layers, 0), np.float32), rows, []
        names = ["attention", "FFN"] if cfg.has_ffn else ["attention"]
        keys = ["attn", "mlp"] if cfg.has_ffn else ["attn"]
        return np.stack([self.contributions[k][:, i] for k in keys], axis=1), rows, names

    def _cosine_data(self) -> tuple[np.ndarray, list[str], list[str]]:
        """Cosine of the stream entering and leaving each block [L, n]."""
        return self.cosine, [f"block {layer}" for layer in range(self.cosine.shape[0])], \
            token_labels(self.trace.tokens)

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
