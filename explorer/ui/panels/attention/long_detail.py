"""The selected head of a long prompt: a pooled overview, and exact tiles where the user zooms in.

Above ``LONG_DETAIL`` tokens the panel does not build a head's [n, n] matrix. This widget shows:

* the head max-pooled to at most ``OVERVIEW_PIXELS`` a side (``core.analysis.attention_tiles.overview``),
  stretched over the head's n x n token coordinates: each pixel is the maximum over its f x f block
  of queries x keys, so one key every query reads stays visible (the key axis says so); colours span
  up to the values' 99.5th percentile (the first queries, which see one key, weigh 1);
* when the visible region is at most ``TILE_MAX`` tokens a side (zoomed in to about screen
  resolution), the exact values of that region and a margin around it (``attention_tiles.block``),
  in a second image on top; hovering there reads exact values.

Both images are created once and reused for every head; a switch only sets their data. Masked cells
are NaN, drawn transparent over the grey view background.
"""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, QRectF, Qt, QTimer, Signal
from PySide6.QtGui import QColor, QCursor
from PySide6.QtWidgets import QToolTip, QWidget

from explorer.core.analysis import attention_tiles as tiles
from explorer.core.analysis import effective_tiles
from explorer.core.display.tokens import quoted
from explorer.core.trace import Trace
from explorer.ui.widgets.axis import readable, thin_axes
from explorer.ui.widgets.heatmap import cached_image, format_value
from explorer.ui.widgets.heatmap_image import MASK_LIGHT

LONG_DETAIL = 512  # longer prompts: overview + tiles (a detail view is rarely wider on screen than this)
EXPORT_WHOLE = 2048  # up to this many tokens an export of the head is its whole exact [n, n] matrix
OVERVIEW_PIXELS = 512  # the overview's side at most (a detail view is rarely wider on screen)
TILE_MAX = 640  # exact tiles once the visible region is at most this many tokens a side
CLIP_PERCENTILE = 99.5  # the colour scale's top: this percentile of the overview's values


class LongHeadView(pg.GraphicsLayoutWidget):
    """One head over a long prompt. ``cell_clicked(query, key)`` on a left click."""

    cell_clicked = Signal(int, int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setMinimumSize(220, 150)
        self.plot: pg.PlotItem = readable(self.addPlot(row=0, col=0, axisItems=thin_axes()))
        self.plot.invertY(True)
        self.plot.hideButtons()
        self.plot.setLabel("left", "query (position)")
        self.plot.setLabel("bottom", "key (position)")
        self._key_label = "key (position)"
        self.plot.vb.setBackgroundColor(QColor(*MASK_LIGHT))  # masked cells are NaN: the grey shows through
        self.plot.vb.setLimits(minXRange=4, minYRange=4)
        self.overview = cached_image(axisOrder="row-major")
        self.tile = cached_image(axisOrder="row-major")
        self.tile.setZValue(5)
        self.tile_mask = cached_image(axisOrder="row-major")  # the tile's masked cells in grey (RGBA)
        self.tile_mask.setZValue(6)
        self.plot.addItem(self.overview)
        self.plot.addItem(self.tile)
        self.plot.addItem(self.tile_mask)
        self.colorbar = pg.ColorBarItem(colorMap="viridis", width=14, interactive=False, colorMapMenu=False)
        self.colorbar.setImageItem([self.overview, self.tile])
        self._colormap_name: str | None = None  # the colour map set (set_head sets it once per kind)
        self.addItem(self.colorbar, row=0, col=1)
        self.trace: Trace | None = None
        self.layer = self.head = 0
        self.kind = "pattern"
        self.value_name = "weight"
        self.factor = 1
        self.image = np.zeros((0, 0), np.float32)
        self.tile_rect: tuple[int, int, int, int] | None = None  # (r0, r1, c0, c1) of the exact tile
        self.tile_values = np.zeros((0, 0), np.float32)
        self.levels = (0.0, 1.0)
        self._tile_timer = QTimer(self)  # a zoom or pan: fetch the tile once the view settles
        self._tile_timer.setSingleShot(True)
        self._tile_timer.setInterval(30)
        self._tile_timer.timeout.connect(self.refresh_tile)
        self.plot.vb.sigRangeChanged.connect(lambda *_: self._tile_timer.start())
        self._hover = pg.SignalProxy(self.scene().sigMouseMoved, rateLimit=30, slot=self._on_hover)
        self.scene().sigMouseClicked.connect(self._on_clicked)

    @property
    def n(self) -> int:
        return 0 if self.trace is None else self.trace.n_tokens

    def set_head(self, trace: Trace, layer: int, head: int, kind: str, value_name: str,
                 pooled: tuple[np.ndarray, int], colormap: pg.ColorMap, symmetric: bool, title: str) -> None:
        """Show a head: ``pooled`` = (max-pooled image, tokens per pixel) from ``attention_tiles.overview``."""
        new_trace = trace is not self.trace
        self.trace, self.layer, self.head, self.kind, self.value_name = trace, layer, head, kind, value_name
        self.image, self.factor = pooled
        # the colours span 0 .. the 99.5th percentile: the first queries' weight of 1 (they see one key)
        # would leave every later row at the dark end; hovering reads the value itself
        finite = np.abs(self.image[np.isfinite(self.image)])
        top = float(np.percentile(finite, CLIP_PERCENTILE)) if finite.size else 1.0
        top = top if top > 0 else 1.0
        self.levels = (-top, top) if symmetric else (0.0, top)
        if colormap.name != self._colormap_name:  # a new kind only: the bar's image and the LUTs drawn again
            self._colormap_name = colormap.name
            self.overview.setLookupTable(colormap.getLookupTable(nPts=256))
            self.tile.setLookupTable(colormap.getLookupTable(nPts=256))
            self.colorbar.setColorMap(colormap)
        self.overview.setImage(self.image, levels=self.levels, autoLevels=False)
        self.overview.setRect(QRectF(0, 0, trace.n_tokens, trace.n_tokens))
        self.colorbar.setLevels(self.levels)
        self.plot.setTitle(title)
        self.tile_rect = None
        self._label_keys()
        self.tile.clear()
        self.tile_mask.clear()
        if new_trace:
            self.plot.setRange(xRange=(0, trace.n_tokens), yRange=(0, trace.n_tokens), padding=0)
        self.refresh_tile()

    def _label_keys(self) -> None:
        """The key axis says what the picture is: exact cells (a tile) or the maximum over f x f blocks."""
        most = "largest |weight|" if self.kind == "effective" else "max"  # signed weights: the largest in size
        pooled = f" \u00b7 {most} over {self.factor}\u00d7{self.factor}-token blocks" if self.factor > 1 else ""
        label = "key (position)" + (" \u00b7 exact cells" if self.tile_rect else pooled)
        if label != self._key_label:  # a pan inside the tile changes nothing: no relayout
            self._key_label = label
            self.plot.setLabel("bottom", label)

    def visible_rect(self) -> tuple[int, int, int, int]:
        """(r0, r1, c0, c1): the query and key positions in view, clipped to the prompt."""
        (x0, x1), (y0, y1) = self.plot.vb.viewRange()
        n = self.n
        clip = lambda v: int(min(max(v, 0), n))  # noqa: E731
        return clip(math.floor(y0)), clip(math.ceil(y1)), clip(math.floor(x0)), clip(math.ceil(x1))

    def refresh_tile(self) -> None:
        """The exact values of the visible region (and a margin) once it is small enough."""
        self._tile_timer.stop()
        if self.trace is None:
            return
        r0, r1, c0, c1 = self.visible_rect()
        if self.factor == 1 or r1 <= r0 or c1 <= c0 or max(r1 - r0, c1 - c0) > TILE_MAX:
            if self.tile_rect is not None:
                self.tile_rect = None
                self.tile.clear()
                self.tile_mask.clear()
                self._label_keys()
            return
        have = self.tile_rect
        if have is not None and have[0] <= r0 and r1 <= have[1] and have[2] <= c0 and c1 <= have[3]:
            return  # the tile already covers the view
        n = self.n
        pad_r, pad_c = (TILE_MAX - (r1 - r0)) // 2, (TILE_MAX - (c1 - c0)) // 2
        r0, r1 = max(0, r0 - pad_r // 2), min(n, r1 + pad_r // 2)
        c0, c1 = max(0, c0 - pad_c // 2), min(n, c1 + pad_c // 2)
        values = tile_block(self.trace, self.layer, self.head, self.kind, (r0, r1), (c0, c1))
        self.tile_rect, self.tile_values = (r0, r1, c0, c1), values
        shown = np.where(np.isfinite(values), values, np.nan).astype(np.float32)
        self.tile.setImage(shown, levels=self.levels, autoLevels=False)
        self.tile.setRect(QRectF(c0, r0, c1 - c0, r1 - r0))
        mask = np.zeros(values.shape + (4,), np.uint8)
        mask[~np.isfinite(values)] = MASK_LIGHT  # masked cells: grey, not the pooled overview underneath
        self.tile_mask.setImage(mask, levels=(0, 255), autoLevels=False)
        self.tile_mask.setRect(QRectF(c0, r0, c1 - c0, r1 - r0))
        self._label_keys()

    # --- hover and click -----------------------------------------------------------------------
    def cell_at(self, scene_pos: QPointF) -> tuple[int, int] | None:
        if self.trace is None or not self.plot.vb.sceneBoundingRect().contains(scene_pos):
            return None
        p = self.plot.vb.mapSceneToView(scene_pos)
        row, col = math.floor(p.y()), math.floor(p.x())
        return (row, col) if 0 <= row < self.n and 0 <= col < self.n else None

    def cell_text(self, row: int, col: int) -> str:
        tokens = self.trace.tokens
        have = self.tile_rect
        if have is not None and have[0] <= row < have[1] and have[2] <= col < have[3]:
            value = self.tile_values[row - have[0], col - have[2]]
            where = f"query {quoted(tokens[row])} ({row}) \u2192 key {quoted(tokens[col])} ({col})"
            return f"{where}: masked" if not np.isfinite(value) else f"{where}: {self.value_name} {format_value(value)}"
        f = self.factor
        r, c = row // f, col // f
        value = self.image[r, c]
        rows = f"{r * f}\u2013{min(self.n, (r + 1) * f) - 1}"
        cols = f"{c * f}\u2013{min(self.n, (c + 1) * f) - 1}"
        most = "largest" if self.kind == "effective" else "max"
        shown = "all masked" if not np.isfinite(value) else f"{most} {self.value_name} {format_value(value)}"
        return f"queries {rows} \u2192 keys {cols}: {shown}"

    def _on_hover(self, args: tuple) -> None:
        cell = self.cell_at(args[0])
        if cell is None:
            QToolTip.hideText()
            return
        QToolTip.showText(QCursor.pos(), self.cell_text(*cell), self)

    def _on_clicked(self, event) -> None:
        if event.button() != Qt.MouseButton.LeftButton:
            return
        cell = self.cell_at(event.scenePos())
        if cell is not None:
            self.cell_clicked.emit(*cell)


def is_long(trace: Trace | None) -> bool:
    """Whether this trace's heads are shown as overview + tiles (never as whole [n, n] matrices)."""
    return trace is not None and trace.n_tokens > LONG_DETAIL


def pooled_head(trace: Trace, layer: int, head: int, kind: str, check=None) -> tuple[np.ndarray, int]:
    """The max-pooled overview of one head (kept with the trace; computed on a worker); ``kind`` "effective": a
    recurrent layer's, each pixel its block's weight of largest size, signed (``effective_tiles``)."""
    if kind == "effective":
        return effective_tiles.weights_overview(trace, layer, head, OVERVIEW_PIXELS, "signed", check)
    return tiles.overview(trace, layer, head, kind, OVERVIEW_PIXELS, "max", check)


def pooled_ready(trace: Trace, layer: int, head: int, kind: str) -> bool:
    if kind == "effective":
        return trace.memo_get(("effective_tiles.overview", layer, head, OVERVIEW_PIXELS, "signed")) is not None
    return trace.memo_get(("attention_tiles.overview", layer, head, kind, OVERVIEW_PIXELS, "max")) is not None


def tile_block(trace: Trace, layer: int, head: int, kind: str, rows: tuple[int, int],
               cols: tuple[int, int]) -> np.ndarray:
    """The exact values of a rectangle of queries x keys, NaN where masked (a recurrent layer: later keys)."""
    if kind != "effective":
        return tiles.block(trace, layer, head, kind, rows, cols, masked=np.nan)
    values = effective_tiles.weights_block(trace, layer, head, rows, cols)
    later = np.arange(cols[0], cols[0] + values.shape[1])[None, :] > np.arange(rows[0], rows[0] + values.shape[0])[:, None]
    return np.where(later & trace.config.causal, np.float32(np.nan), values)


def row_bars(values: np.ndarray, masked: np.ndarray, bars: int) -> tuple[np.ndarray, np.ndarray, int]:
    """A long query row as at most ``bars`` bars: (x centres, heights, keys per bar); each bar is the
    value of largest magnitude among its keys (masked keys count as 0)."""
    n = values.shape[0]
    f = max(1, math.ceil(n / bars))
    heights = np.where(masked, 0.0, values).astype(np.float32)
    padded = np.zeros(math.ceil(n / f) * f, np.float32)
    padded[:n] = heights
    blocks = padded.reshape(-1, f)
    pick = blocks[np.arange(blocks.shape[0]), np.abs(blocks).argmax(axis=1)]
    x = np.arange(blocks.shape[0]) * f + f / 2.0
    return x, pick, f


def long_detail_data(view: LongHeadView) -> tuple[np.ndarray, list[str], list[str]]:
    """A long head for an export: its whole exact matrix up to ``EXPORT_WHOLE`` tokens; beyond, what
    the view shows: the exact tile (token labels) when there is one, else the pooled overview (rows and
    columns named by their token ranges)."""
    from explorer.core.display.labels import token_labels

    labels = token_labels(view.trace.tokens)
    if view.n <= EXPORT_WHOLE:
        return tile_block(view.trace, view.layer, view.head, view.kind, (0, view.n), (0, view.n)), labels, labels
    if view.tile_rect is not None:
        r0, r1, c0, c1 = view.tile_rect
        return view.tile_values, labels[r0:r1], labels[c0:c1]
    f, n = view.factor, view.n
    ranges = [f"max over {i}\u2013{min(n, i + f) - 1}" for i in range(0, n, f)]
    return view.image, ranges, ranges


def show_long_head(view: LongHeadView, trace: Trace, layer: int, head: int, kind: str, later, redraw) -> bool:
    """Draw a long prompt's head in ``view`` if its pooled overview is ready (True), else ask
    ``later`` (the panel's) to compute it on a worker and ``redraw`` then (False)."""
    from explorer.core.display.labels import scores_formula
    from explorer.ui.panels.attention import effective
    from explorer.ui.panels.attention.views import KINDS

    if not pooled_ready(trace, layer, head, kind):
        view.plot.setTitle(f"L{layer} H{head}: computing\u2026")
        later(("detail",), lambda check: pooled_head(trace, layer, head, kind, check), lambda _: redraw(), priority=0)
        return False
    name, colormap, symmetric = effective.EFFECTIVE if kind == "effective" else KINDS[kind]  # signed weights
    what = "attention pattern" if kind == "pattern" else scores_formula(trace.config, layer)
    title = effective.detail_title(trace, layer, head, what)  # names the kind of layer where the layers differ
    view.set_head(trace, layer, head, kind, name, pooled_head(trace, layer, head, kind),
                  pg.colormap.get(colormap), symmetric, title)
    return True
