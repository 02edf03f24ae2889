"""Plot text that never overprints: tick labels thinned to every k-th, titles elided to their width.

pyqtgraph draws every explicit tick label it is given, so 12 head labels in 200 px ran together
("H0H1H2…") and 13 layer labels in 50 px were written over each other; it also cannot rotate tick
text. ``ThinAxis`` keeps the labels one stride apart: the smallest k for which every k-th label has
room (the first label always kept), decided at paint time from the sizes the axis really has, so a
resize never leaves stale, overlapping text. What is not written is in each plot's tooltips.

A token axis of a conversation's trace also carries its role bands (``set_bands``: the turns' roles and
kinds as coloured strips along the plot's edge, ``role_bands.py``).

A plot title longer than its plot is elided with "…" (full text in the tooltip) instead of forcing the
plot wider than its widget, which clipped both ends ("…token embeddi").
"""

from __future__ import annotations

import html

import pyqtgraph as pg
from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QFont, QFontMetrics, QTextDocument
from PySide6.QtWidgets import QGraphicsItem

from explorer.ui.widgets.role_bands import Band, paint_axis_bands

LABEL_GAP = 4.0  # pixels between two neighbouring labels
ORIENTATIONS = ("left", "bottom", "top", "right")
TITLE_LINES_KEPT = 64  # a FittedTitle remembers the plain lines of this many titles


def stride_for(rects: list[QRectF], horizontal: bool, gap: float = LABEL_GAP) -> int:
    """The smallest k such that rects[0], rects[k], rects[2k], … do not overlap (with ``gap``)."""
    n = len(rects)
    for k in range(1, max(n, 1) + 1):
        kept = rects[::k]
        if all(_apart(a, b, horizontal, gap) for a, b in zip(kept, kept[1:], strict=False)):
            return k
    return max(n, 1)


def _apart(a: QRectF, b: QRectF, horizontal: bool, gap: float) -> bool:
    if horizontal:
        left, right = (a, b) if a.center().x() <= b.center().x() else (b, a)
        return left.right() + gap <= right.left()
    top, bottom = (a, b) if a.center().y() <= b.center().y() else (b, a)
    return top.bottom() + gap <= bottom.top()


class ThinAxis(pg.AxisItem):
    """An ``AxisItem`` whose tick labels are thinned to every k-th so that no two overlap."""

    def __init__(self, orientation: str, **kwargs) -> None:
        super().__init__(orientation, **kwargs)
        self.stride = 1  # the k used at the last paint (tests and tooltips read it)
        self.bands: tuple[Band, ...] = ()  # a conversation's role bands along the axis (token positions)
        # drawn once into a pixmap and blitted after: an outline, bar or title changed beside or over it
        # (its grid lines span the plot) repaints it from the pixmap, not by replaying every label and line
        self.setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)

    def setTicks(self, ticks):  # noqa: N802 (pyqtgraph's name)
        """As pyqtgraph's, but the same ticks again (a selection switch redrawing a plot over the same
        tokens) keep the axis' drawing instead of laying out and repainting it."""
        try:
            same = ticks == self._tickLevels
        except ValueError:  # arrays inside: compare nothing, set them
            same = False
        if same is True:
            return
        super().setTicks(ticks)

    def setTickSpacing(self, major=None, minor=None, levels=None):  # noqa: N802 (pyqtgraph's name)
        """As pyqtgraph's, but the same spacing again keeps the axis' drawing (no repaint)."""
        wanted = levels if levels is not None else None if major is None else [(major, 0.0), (minor, 0.0)]
        if wanted == getattr(self, "_tickSpacing", object()):
            return
        super().setTickSpacing(major, minor, levels)

    def set_bands(self, bands: tuple[Band, ...]) -> None:
        """Draw ``bands`` (token ranges in the view's coordinates) along the edge by the plot; () for none."""
        bands = tuple(bands)
        if bands != self.bands:
            self.bands = bands
            self.update()

    def paint(self, p, opt, widget):
        if self.bands:  # under the tick marks, which then show where each token is
            paint_axis_bands(p, self, self.bands)
        super().paint(p, opt, widget)

    def generateDrawSpecs(self, p):
        specs = super().generateDrawSpecs(p)
        if specs is None:
            return specs
        axis_spec, tick_specs, text_specs = specs
        if len(text_specs) < 2:
            self.stride = 1
            return specs
        horizontal = self.orientation in ("top", "bottom")
        ordered = sorted(text_specs, key=lambda s: s[0].center().x() if horizontal else s[0].center().y())
        self.stride = stride_for([s[0] for s in ordered], horizontal)
        return axis_spec, tick_specs, ordered[:: self.stride]

    def label_rects(self) -> list[QRectF]:
        """The rectangles of the tick labels as they are drawn now, in scene coordinates."""
        return axis_label_rects(self)


def axis_label_rects(axis: pg.AxisItem) -> list[QRectF]:
    """The scene rectangles of the tick labels ``axis`` (any ``AxisItem``) draws at its current size."""
    from PySide6.QtGui import QImage, QPainter

    image = QImage(4, 4, QImage.Format.Format_ARGB32)
    painter = QPainter(image)
    try:
        if axis.style.get("tickFont") is not None:
            painter.setFont(axis.style["tickFont"])
        specs = axis.generateDrawSpecs(painter)
    finally:
        painter.end()
    if specs is None:
        return []
    return [axis.mapRectToScene(rect) for rect, _flags, _text in specs[2]]


def thin_axes(*sides: str) -> dict[str, ThinAxis]:
    """``axisItems`` for a new ``PlotItem``/``PlotWidget``: a ``ThinAxis`` on each of ``sides``
    (default left and bottom; pyqtgraph shows every axis it is given)."""
    return {name: ThinAxis(name) for name in (sides or ("left", "bottom"))}


class FittedTitle(pg.LabelItem):
    """A plot title elided to the width it is given ("…" and the full text in the tooltip)."""

    def __init__(self, text: str = "", **kwargs) -> None:
        self.full_text = ""
        self._fit_for: tuple = ()  # (width, text, size) the shown text was fitted for: a resize to the same is a no-op
        self._metrics: tuple = ()  # (font key, QFontMetrics): building the metrics on every switch cost more than using them
        self._lines: dict[str, list[str]] = {}  # a given title -> its plain lines (rich text: read by a QTextDocument once)
        self._document: QTextDocument | None = None  # the one document a new rich title is read with
        self._style: tuple = ((), "")  # (the style options, the span's style) of the last _html
        self._shown_html: str | None = None  # the HTML the text item holds now
        super().__init__(text, **kwargs)

    def setText(self, text, **args):
        if str(text) == self.full_text and all(self.opts.get(k) == v for k, v in args.items()) and self.full_text:
            return  # the same title again (a switch that leaves it): no re-layout, no repaint
        self.full_text = str(text)
        self.opts.update(args)
        self._set_html(self._html(self._fitted()))  # pyqtgraph's LabelItem.setText, less its re-layouts:
        self.resizeEvent(None)  # places the text (and updateMin: the plot is laid out again only for a new height)
        self.text = self.full_text  # what callers read back: the whole title

    def _html(self, shown: str) -> str:
        """``shown`` in the label's colour and size, as pyqtgraph's ``LabelItem.setText`` styles it."""
        opts = self.opts
        key = tuple(repr(opts.get(k)) for k in ("color", "family", "size", "bold", "italic")) \
            + (repr(pg.getConfigOption("foreground")),)
        if self._style[0] != key:  # the style is built again only when an option changes
            color = pg.mkColor(opts["color"] if opts.get("color") is not None else pg.getConfigOption("foreground"))
            style = [f"color: {color.name(color.NameFormat.HexArgb)}"]
            if opts.get("family"):
                style.append(f"font-family: {opts['family']}")
            if opts.get("size"):
                style.append(f"font-size: {opts['size']}")
            if opts.get("bold") in (True, False):
                style.append(f"font-weight: {'bold' if opts['bold'] else 'normal'}")
            if opts.get("italic") in (True, False):
                style.append(f"font-style: {'italic' if opts['italic'] else 'normal'}")
            self._style = (key, "; ".join(style))
        return f"<span style='{self._style[1]}'>{shown}</span>"

    def _set_html(self, text: str) -> None:
        """The text item's HTML, set only when it differs from what it holds (setHtml lays the text out again)."""
        if text != self._shown_html:
            self.item.setHtml(text)
            self._shown_html = text

    def plain_lines(self, given: str) -> list[str]:
        """The lines of ``given`` as plain text (rich text read by a ``QTextDocument``), remembered per title: a
        title that comes back (a switch back and forth) is not parsed again."""
        lines = self._lines.get(given)
        if lines is None:
            if "<" in given:
                if self._document is None:
                    self._document = QTextDocument()
                self._document.setHtml(given)
                lines = self._document.toPlainText().splitlines() or [""]
            else:
                lines = given.splitlines() or [""]
            if len(self._lines) >= TITLE_LINES_KEPT:
                self._lines.pop(next(iter(self._lines)))  # the oldest title first
            self._lines[given] = lines
        return lines

    def _font(self) -> QFont:
        font = QFont(self.item.font())
        size = str(self.opts.get("size", "") or "")
        if size.endswith("pt"):
            font.setPointSizeF(float(size[:-2]))
        return font

    def _fitted(self) -> str:
        """The title as shown: as given when every line fits; else each line elided (rich text then
        loses its colours, never its words: the tooltip has the full title)."""
        width = self.rect().width()
        given = self.full_text
        self._fit_for = (width, given, self.opts.get("size"))
        if width < 40:  # not laid out yet
            self._tip("")
            return given
        rich = "<" in given
        lines = self.plain_lines(given)
        font = self._font()
        if not self._metrics or self._metrics[0] != font.key():
            self._metrics = (font.key(), QFontMetrics(font))
        metrics = self._metrics[1]
        room = int(width) - 8
        if all(metrics.horizontalAdvance(line) <= room for line in lines):
            self._tip("")
            return given if rich else html.escape(given, quote=False)
        self._tip("\n".join(lines))
        return "<br>".join(html.escape(metrics.elidedText(line, Qt.TextElideMode.ElideRight, room), quote=False)
                           for line in lines)

    def _tip(self, text: str) -> None:
        if self.toolTip() != text:  # setting the same tooltip again is not free (a scene help event update)
            self.setToolTip(text)

    def updateMin(self):
        """The title's height as its minimum and preferred height; no width of its own (never force the plot
        wider than its widget: elide instead). The plot is laid out again only when the height changes: a new
        title of the same height (a switch's) is drawn in place."""
        h = self.itemRect().height()
        hint = {Qt.SizeHint.MinimumSize: (0, h), Qt.SizeHint.PreferredSize: (0, h),
                Qt.SizeHint.MaximumSize: (-1, -1), Qt.SizeHint.MinimumDescent: (0, 0)}
        if self.minimumWidth() != 0:
            self.setMinimumWidth(0)
        if self.minimumHeight() != h:
            self.setMinimumHeight(h)
        if getattr(self, "_sizeHint", None) != hint:
            self._sizeHint = hint
            self.updateGeometry()

    def resizeEvent(self, ev):
        if ev is not None and self.full_text and self._fit_for != (self.rect().width(), self.full_text,
                                                                  self.opts.get("size")):
            self._set_html(self._html(self._fitted()))
        super().resizeEvent(ev)

    def is_elided(self) -> bool:
        return bool(self.toolTip())


def fit_title(plot: pg.PlotItem) -> FittedTitle:
    """Replace ``plot``'s title label with a ``FittedTitle`` (keeps the current title)."""
    old = plot.titleLabel
    if isinstance(old, FittedTitle):
        return old
    title = FittedTitle("", size="11pt", parent=plot)
    plot.layout.removeItem(old)
    old.setParentItem(None)
    if old.scene() is not None:
        old.scene().removeItem(old)
    plot.layout.addItem(title, 0, 1)
    plot.titleLabel = title
    title.setVisible(old.isVisible())
    title.setMaximumHeight(old.maximumHeight())
    if old.text and old.text.strip():
        plot.setTitle(getattr(old, "text", ""))
    return title


def readable(plot: pg.PlotItem | pg.PlotWidget) -> pg.PlotItem:
    """A plot whose title is elided to its width (axes: build it with ``axisItems=thin_axes()``)."""
    item = plot.getPlotItem() if isinstance(plot, pg.PlotWidget) else plot
    fit_title(item)
    return item
