"""A labelled heatmap: one ImageItem, a colour bar, a masked-cell overlay, tooltips and clicks.

Follows pyqtgraph's fast path: float32 C-contiguous row-major data, levels passed in the same
``setImage`` call (computed from the finite data, never auto-levels), a 256-entry LUT. Masked
cells (``masked=True`` or non-finite values such as the -inf of causal scores) are not a colour of
the map: a grey hatched overlay image sits on top of them, so they cannot be mistaken for values.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, QPointF, Qt, Signal
from PySide6.QtGui import QCursor, QFontMetrics
from PySide6.QtWidgets import QGraphicsItem, QToolTip, QWidget

from explorer.core.display.levels import grouped_ticks, thinned_ticks
from explorer.ui.widgets.axis import readable, thin_axes
from explorer.ui.widgets.heatmap_image import HeatmapImage, heatmap_image, mask_overlay
from explorer.ui.widgets.role_bands import Band, band_at, legend_html

MIN_WIDTH, MIN_HEIGHT = 220, 150  # room for labels, a title, an axis and the colour bar
_OVERLAY_KEPT_PIXELS = 1 << 18  # an overlay up to this size is kept while a matrix without hidden cells is shown


def format_value(value: float) -> str:
    """A value with six significant decimals, in exponent form when fixed point would hide it."""
    value = float(value)
    if not math.isfinite(value):
        return str(value)
    if value == 0 or 1e-3 <= abs(value) < 1e6:
        return f"{value:.6f}"
    return f"{value:.6e}"


def dark_cells(colormap: pg.ColorMap, values: np.ndarray, levels: tuple[float, float]) -> np.ndarray:
    """Which cells of ``values`` (coloured by ``colormap`` over ``levels``) are dark enough that their
    text must be white: the relative luminance (WCAG, linearised sRGB) of each cell's own colour is
    below 0.18, the point where white and black text have about the same contrast. Chosen per cell,
    so it holds for every colour map (viridis' yellow top takes black text, its purple bottom white)."""
    values = np.asarray(values, dtype=np.float64)
    lo, hi = float(levels[0]), float(levels[1])
    span = hi - lo if hi > lo else 1.0
    fraction = np.clip(np.nan_to_num((values - lo) / span, nan=0.0), 0.0, 1.0)
    rgb = colormap.map(fraction.ravel(), mode="float")[:, :3].astype(np.float64)
    linear = np.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
    luminance = linear @ np.array([0.2126, 0.7152, 0.0722])
    return (luminance < 0.18).reshape(values.shape)


def cached_image(**kwargs) -> pg.ImageItem:
    """An ``ImageItem`` drawn once into a pixmap at screen resolution and blitted from it after: a selection
    outline or cursor line moved over it repaints the pixels under it from the pixmap, not by scaling the
    whole image again (``DeviceCoordinateCache``; a new image, zoom or pan draws it again)."""
    item = pg.ImageItem(**kwargs)
    item.setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
    return item


class Heatmap(pg.GraphicsLayoutWidget):
    """A matrix drawn cell by cell with token labels on both axes; row 0 at the top.

    Signals
    -------
    cell_clicked(int, int)
        Left click on a cell: (row, column).
    cell_hovered(int, int)
        The mouse moved onto a cell (rate-limited): (row, column).
    """

    cell_clicked = Signal(int, int)
    cell_hovered = Signal(int, int)

    HOVER_RATE = 30  # tooltip updates per second at most

    def __init__(self, parent: QWidget | None = None, colormap: str = "viridis", symmetric: bool = False,
                 title: str = "") -> None:
        super().__init__(parent)
        self.symmetric = symmetric
        self.setMinimumSize(MIN_WIDTH, MIN_HEIGHT)  # smaller, the panel scrolls (see docks.PanelDock)
        self.colormap = pg.colormap.get(colormap)
        self.title = title
        # row 0: a conversation's role key (empty and flat otherwise); row 1: the plot and its colour bar
        self.legend = pg.LabelItem("", justify="left")
        self.addItem(self.legend, row=0, col=0, colspan=2)
        self.legend.setMaximumHeight(0)
        self.legend.setVisible(False)
        self.ci.layout.setRowSpacing(0, 0)
        self.plot: pg.PlotItem = readable(self.addPlot(row=1, col=0, title=title or None, axisItems=thin_axes()))
        self.plot.invertY(True)
        self.plot.hideButtons()
        self.plot.showGrid(x=False, y=False)
        # the first and last column labels are centred on cells at the very edges of the axis:
        # let them stick out a little instead of being hidden
        self.plot.getAxis("bottom").setStyle(hideOverlappingLabels=40)
        self.image = cached_image(axisOrder="row-major")
        self.plot.addItem(self.image)
        self._overlay = cached_image(axisOrder="row-major")
        self._overlay.setZValue(10)
        self._overlay.setVisible(False)
        self.plot.addItem(self._overlay)
        self.colorbar = pg.ColorBarItem(colorMap=self.colormap, width=14, interactive=False, colorMapMenu=False)
        self.colorbar.setImageItem(self.image)
        self.addItem(self.colorbar, row=1, col=1)

        self._matrix = np.zeros((0, 0), dtype=np.float32)
        self._masked = np.zeros((0, 0), dtype=bool)
        self._hidden = np.zeros((0, 0), dtype=bool)
        self._overlay_scale = 1
        self._overlay_of: np.ndarray | None = None  # the mask the overlay image was drawn for
        self._row_labels: list[str] | None = None
        self._col_labels: list[str] | None = None
        self._tick_memo: dict[str, tuple] = {}  # per axis: the ticks of the labels given last (_update_ticks)
        self.value_name = "weight"
        self.levels: tuple[float, float] = (0.0, 1.0)
        self.row_bands: tuple[Band, ...] = ()  # a conversation's roles along the rows / columns (set_token_bands)
        self.col_bands: tuple[Band, ...] = ()
        self.row_groups: tuple[int, int] | None = None  # (groups, rows per group): rows labelled by group (L0, L5…)

        self._hover_proxy = pg.SignalProxy(self.scene().sigMouseMoved, rateLimit=self.HOVER_RATE,
                                           slot=self._on_mouse_moved)
        self.scene().sigMouseClicked.connect(self._on_mouse_clicked)

    # --- data ----------------------------------------------------------------------------------
    def set_data(self, matrix: np.ndarray | HeatmapImage, row_labels: Sequence[str] | None = None,
                 col_labels: Sequence[str] | None = None, levels: tuple[float, float] | None = None,
                 masked: np.ndarray | None = None, value_name: str = "weight") -> None:
        """Show ``matrix`` [rows, cols]. ``masked`` (bool, same shape) cells are hatched grey. ``matrix`` may
        be a ``HeatmapImage`` a worker prepared (``heatmap_image``; then ``levels`` and ``masked`` are its own)."""
        prepared = matrix if isinstance(matrix, HeatmapImage) else heatmap_image(matrix, self.symmetric, masked, levels)
        matrix = prepared.matrix
        rows, cols = matrix.shape
        for name, labels, n in (("row", row_labels, rows), ("column", col_labels, cols)):
            if labels is not None and len(labels) != n:
                raise ValueError(f"{len(labels)} {name} labels for {n} {name}s")
        self._matrix, self._masked, self._hidden = matrix, prepared.masked, prepared.hidden
        self._row_labels = None if row_labels is None else [str(s) for s in row_labels]
        self._col_labels = None if col_labels is None else [str(s) for s in col_labels]
        self.value_name = value_name

        if matrix.size == 0:
            self.image.clear()
            self._overlay.clear()
            self._overlay.setVisible(False)
            self._overlay_of = None
            return
        self.levels = prepared.levels
        self.image.setImage(prepared.shown, levels=self.levels, autoLevels=False)
        if tuple(self.colorbar.levels()) != self.levels:  # (the same levels: the bar's axis is not drawn again)
            self.colorbar.setLevels(self.levels)

        if not prepared.any_hidden:
            self._overlay.setVisible(False)
            if self._overlay.image is not None and self._overlay.image.shape[0] * self._overlay.image.shape[1] \
                    > _OVERLAY_KEPT_PIXELS:
                self._overlay.clear()  # a small overlay is kept hidden: the same mask again (a panel's blank
                self._overlay_scale = 1  # matrix while it computes, on every switch) only shows it again
                self._overlay_of = None
        elif self._overlay_of is not None and (self._overlay_of is self._hidden
                                               or np.array_equal(self._overlay_of, self._hidden)):
            self._overlay.setVisible(True)  # the same mask (a causal triangle while heads switch): it costs tens of ms
        else:
            rgba, s = prepared.overlay or mask_overlay(self._hidden)
            self._overlay.setImage(rgba, autoLevels=False, levels=(0, 255))
            self._overlay.setRect(0, 0, cols, rows)
            self._overlay_scale = s
            self._overlay.setVisible(True)
            self._overlay_of = self._hidden  # (read-only: the mask drawn is kept as it is)

        target = [[0.0, float(max(cols, 1))], [0.0, float(max(rows, 1))]]
        if self.plot.vb.viewRange() != target:  # the same shape again (a head or token switch): no relayout
            self.plot.setRange(xRange=target[0], yRange=target[1], padding=0)
        self._update_ticks()

    @property
    def matrix(self) -> np.ndarray:
        """The matrix as given (read-only; non-finite entries kept)."""
        return self._matrix

    @property
    def masked(self) -> np.ndarray:
        """The mask as given (all False when none was), read-only."""
        return self._masked

    @property
    def row_labels(self) -> list[str]:
        return self._row_labels or [str(i) for i in range(self._matrix.shape[0])]

    @property
    def col_labels(self) -> list[str]:
        return self._col_labels or [str(j) for j in range(self._matrix.shape[1])]

    def overlay_mask(self) -> np.ndarray:
        """Which cells the grey overlay covers, read back from the overlay image itself."""
        if not self._overlay.isVisible() or self._overlay.image is None:
            return np.zeros(self._matrix.shape, dtype=bool)
        s = self._overlay_scale
        return self._overlay.image[::s, ::s, 3] > 0

    # --- labels --------------------------------------------------------------------------------
    def _update_ticks(self) -> None:
        if getattr(self, "_matrix", None) is None or self._matrix.size == 0:
            return
        height = max(self.plot.vb.height(), 100.0)
        width = max(self.plot.vb.width(), 100.0)
        for axis_name, labels, chars in (("left", self._row_labels, 14), ("bottom", self._col_labels, 8)):
            axis = self.plot.getAxis(axis_name)
            if labels is None:
                if axis._tickLevels is not None:  # (pyqtgraph's own attribute) each setTicks repaints the axis
                    axis.setTicks(None)
                continue
            # the labels given last time (a switch over the same tokens or rows): their thinned ticks and the
            # row axis' width are kept (``_tick_memo``: labels, longest, max_labels, ticks, font key, width)
            memo = self._tick_memo.get(axis_name)
            same = memo is not None and memo[0] == labels
            if axis_name == "left":
                room = height / 14.0  # one line of text per label
                longest = 0
            else:  # labels side by side: as wide as the longest (abbreviated) one, plus a gap
                longest = memo[1] if same else min(chars, max(len(label) for label in labels))
                room = width / (7.0 * longest + 10.0)
            max_labels = max(2, int(room))
            grouped = axis_name == "left" and self.row_groups is not None and \
                self.row_groups[0] * self.row_groups[1] == len(labels)
            if same and memo[2] == max_labels and not grouped:
                ticks = memo[3]
            elif grouped:  # (layer, head) rows: labelled at the first row of a layer, every k-th layer
                ticks = grouped_ticks(*self.row_groups, max_labels=max(2, int(height / 18.0)))
                memo = self._tick_memo[axis_name] = (labels, longest, max_labels, ticks, None, 0)
            else:
                ticks = thinned_ticks(labels, max_labels=max_labels, max_chars=chars)
                memo = self._tick_memo[axis_name] = (labels, longest, max_labels, ticks, None, 0)
            if axis._tickLevels != [ticks]:  # the same labels (a switch on the same tokens): the axis is kept
                axis.setTicks([ticks])
            if axis_name == "left":  # pyqtgraph drops labels wider than the axis until a later repaint
                font = axis.style.get("tickFont") or self.font()
                if memo[4] != font.key():
                    metrics = QFontMetrics(font)
                    memo = self._tick_memo[axis_name] = memo[:4] + (
                        font.key(), max(metrics.horizontalAdvance(text) for _, text in ticks) + 14)
                if axis.fixedWidth != memo[5]:  # (not ``width``: the bottom axis' labels are counted from that)
                    axis.setWidth(memo[5])

    def shown_ticks(self, axis_name: str = "left") -> list[tuple[float, str]]:
        """The tick labels the axis ``axis_name`` writes now ((position, text), thinned to its room)."""
        memo = self._tick_memo.get(axis_name)
        return list(memo[3]) if memo is not None else []

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt override)
        super().resizeEvent(event)
        if not getattr(self, "closed", False):  # GraphicsView.close() deletes the items, then resizes
            self._update_ticks()

    def set_token_bands(self, rows: tuple[Band, ...] = (), cols: tuple[Band, ...] = ()) -> None:
        """A conversation's role bands along the token rows and/or columns (``role_bands.trace_bands``), with
        their key over the plot; () for an axis that is not tokens or a trace that is not a conversation."""
        self.row_bands, self.col_bands = tuple(rows), tuple(cols)
        for side, bands in (("left", self.row_bands), ("bottom", self.col_bands)):
            axis = self.plot.getAxis(side)
            if hasattr(axis, "set_bands"):
                axis.set_bands(bands)
        key = legend_html(self.row_bands + self.col_bands, "9pt")
        if key != self.legend.text or self.legend.isVisible() != bool(key):  # (the same key again: no re-layout)
            self.legend.setText(key)
            self.legend.setVisible(bool(key))
            self.legend.setMaximumHeight(10_000 if key else 0)
            self.ci.layout.setRowSpacing(0, 2 if key else 0)

    def band_text(self, row: int, col: int) -> str:
        """The roles of a cell's row and column tokens ("" without bands)."""
        parts = [band.describe() for band in (band_at(self.row_bands, row), band_at(self.col_bands, col))
                 if band is not None]
        return " [" + " \u2192 ".join(parts) + "]" if parts else ""

    # --- hover and click -----------------------------------------------------------------------
    def cell_at(self, scene_pos: QPointF) -> tuple[int, int] | None:
        """The (row, col) under a scene position, or None outside the matrix."""
        if self._matrix.size == 0 or not self.plot.vb.sceneBoundingRect().contains(scene_pos):
            return None
        p = self.plot.vb.mapSceneToView(scene_pos)
        row, col = math.floor(p.y()), math.floor(p.x())
        if 0 <= row < self._matrix.shape[0] and 0 <= col < self._matrix.shape[1]:
            return row, col
        return None

    masked_text: Callable[[int, int], str] | None = None  # why a masked cell is masked ("masked" without it)

    def cell_text(self, row: int, col: int) -> str:
        """The tooltip for one cell: "row_label → col_label: value_name = 0.123456" (or "masked", or why)."""
        where = f"{self.row_labels[row]} \u2192 {self.col_labels[col]}"
        if self._masked[row, col]:
            return f"{where}: {self.masked_text(row, col) if self.masked_text is not None else 'masked'}"
        return f"{where}: {self.value_name} = {format_value(self._matrix[row, col])}"

    def tooltip(self, row: int, col: int) -> str:
        """What hovering a cell shows: its ``cell_text`` and, in a conversation, the roles of its tokens."""
        return self.cell_text(row, col) + (self.band_text(row, col) if self.row_bands or self.col_bands else "")

    def viewportEvent(self, event: QEvent) -> bool:  # noqa: N802 (Qt override)
        """The pointer resting on the view makes Qt send a tooltip event, which the graphics scene answers by
        hiding any tooltip when no item has one of its own: the cell's text vanished about a second after it
        appeared. The cell's text is shown again instead, so it stays while the pointer is on the cell."""
        if event.type() == QEvent.Type.ToolTip:
            cell = self.cell_at(self.mapToScene(event.pos()))
            if cell is not None:
                QToolTip.showText(event.globalPos(), self.tooltip(*cell), self)
                event.accept()  # answered: the tip stays (the scene would say "nothing here" and hide it)
                return True
        return super().viewportEvent(event)

    def _on_mouse_moved(self, args: tuple) -> None:
        cell = self.cell_at(args[0])
        if cell is None:
            QToolTip.hideText()
            return
        QToolTip.showText(QCursor.pos(), self.tooltip(*cell), self)
        self.cell_hovered.emit(*cell)

    def _on_mouse_clicked(self, event) -> None:
        if event.button() != Qt.MouseButton.LeftButton:
            return
        cell = self.cell_at(event.scenePos())
        if cell is not None:
            self.cell_clicked.emit(*cell)
