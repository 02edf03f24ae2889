"""The diagram drawn in a QGraphicsScene: one box per step of the forward pass, arrows between them.

The embedding, the selected block in full, the other blocks collapsed into two strips (before and
after it), the final norm and the un-embedding. A box shows its title, its shape at the current n,
its first detail line (the rest in its tooltip) and the live summary for the selected token with a
sparkline. Clicking a box calls ``on_click(box)``; clicking a strip selects the nearest block.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QBrush, QColor, QFont, QFontMetricsF, QPainterPath, QPen
from PySide6.QtWidgets import (QGraphicsItem, QGraphicsPathItem, QGraphicsRectItem, QGraphicsScene,
                               QGraphicsSceneMouseEvent, QGraphicsSimpleTextItem, QGraphicsView)

from explorer.core.diagram import Box, Diagram, Summary

BOX_W, BOX_H, COL_GAP, ROW_GAP = 300, 80, 40, 16
SPARK_W, SPARK_H = 84, 22
FILL = {"tokens": "#eef2ff", "embed": "#e0f2fe", "type_embed": "#e0f2fe", "positions": "#fef3c7",
        "norm": "#f3e8ff", "qkv": "#dcfce7", "scores": "#dcfce7", "mix": "#dcfce7", "add": "#f1f5f9",
        "ffn_in": "#ffedd5", "ffn_out": "#ffedd5", "mlm_head": "#fee2e2", "unembed": "#fee2e2", "strip": "#f8fafc"}


def _text(parent: QGraphicsItem, text: str, x: float, y: float, size: float = 9.0, bold: bool = False,
          colour: str = "#111827", width: float = BOX_W - 16) -> QGraphicsSimpleTextItem:
    item = QGraphicsSimpleTextItem(parent)
    font = QFont()
    font.setPointSizeF(size)
    font.setBold(bold)
    item.setFont(font)
    item.setText(QFontMetricsF(font).elidedText(text, Qt.TextElideMode.ElideRight, width))
    item.setBrush(QBrush(QColor(colour)))
    item.setPos(x, y)
    return item


def sparkline(values: Sequence[float], mark: int | None, width: float,
              height: float) -> tuple[QPainterPath, QPointF | None]:
    """A path through ``values`` scaled into width × height (top at 0), and the marked point."""
    path = QPainterPath()
    if not values:
        return path, None
    lo, hi = min(values), max(values)
    span = (hi - lo) or 1.0
    step = width / max(len(values) - 1, 1)
    points = [QPointF(i * step, height - (v - lo) / span * height) for i, v in enumerate(values)]
    path.moveTo(points[0])
    for p in points[1:]:
        path.lineTo(p)
    return path, (points[mark] if mark is not None and 0 <= mark < len(points) else None)


def box_tooltip(box: Box) -> str:
    return "\n".join((box.title, box.shape_text, *box.details, f"opens: {box.panel}"))


def strip_title(first: int, last: int) -> tuple[str, int, int]:
    """The title of the strip of collapsed blocks ``first``..``last`` (and the span itself)."""
    return (f"blocks {first}–{last}" if last > first else f"block {first}"), first, last


def layout_of(diagram: Diagram, layer: int) -> tuple:
    """What the scene of block ``layer`` looks like apart from the block's number: scenes of equal
    layouts are one scene moved between blocks (``DiagramScene.move_to``)."""
    block = diagram.block(layer)
    top = min((b.row for b in block), default=0)  # rows count down the whole diagram: relative to the block
    return (layer > 0, layer < diagram.config.n_layers - 1,
            tuple((b.kind, b.title, b.shape_text, b.details[:1], b.row - top, b.column, b.panel, b.id.split(".", 1)[-1])
                  for b in block))


def spark_point(values: Sequence[float], mark: int | None, width: float, height: float) -> QPointF | None:
    """``sparkline``'s marked point alone (its path unchanged)."""
    if not values or mark is None or not 0 <= mark < len(values):
        return None
    lo, hi = min(values), max(values)
    span = (hi - lo) or 1.0
    return QPointF(mark * width / max(len(values) - 1, 1), height - (values[mark] - lo) / span * height)


class BoxItem(QGraphicsRectItem):
    """One box: title, shape, a detail line, the summary and its sparkline; clicks go to ``on_click``."""

    def __init__(self, box: Box | None, title: str, lines: Sequence[str], on_click: Callable[[], None],
                 kind: str, tooltip: str = "") -> None:
        super().__init__(0, 0, BOX_W, BOX_H)
        self.box, self.on_click = box, on_click
        self.summary: Summary | None = None  # the summary shown
        self.drawn = False  # whether set_summary has drawn one yet
        self.drawn_path = False  # whether the sparkline's path has been drawn
        self.setBrush(QBrush(QColor(FILL.get(kind, "#ffffff"))))
        self.setPen(QPen(QColor("#64748b"), 1))
        self.setCursor(Qt.CursorShape.PointingHandCursor)
        self.setToolTip(tooltip)
        self.title_item = _text(self, title, 8, 4, 10, bold=True)
        self.line_items = [_text(self, line, 8, 22 + 15 * i, 8.5, colour="#374151") for i, line in enumerate(lines[:2])]
        self.summary_item = _text(self, "", 8, 60, 8.5, colour="#1d4ed8", width=BOX_W - SPARK_W - 24)
        self.spark = QGraphicsPathItem(self)
        self.spark.setPen(QPen(QColor("#1d4ed8"), 1.2))
        self.spark.setPos(BOX_W - SPARK_W - 8, BOX_H - SPARK_H - 4)
        self.dot = QGraphicsRectItem(-2.5, -2.5, 5, 5, self.spark)
        self.dot.setBrush(QBrush(QColor("#d9480f")))
        self.dot.setPen(QPen(Qt.PenStyle.NoPen))
        self.dot.hide()

    def set_summary(self, summary: Summary | None) -> None:
        if self.drawn and summary == self.summary:
            return  # unchanged: nothing to redraw
        old = self.summary if self.drawn else None
        self.drawn = True
        self.summary = summary
        text = summary.text if summary is not None else ""
        if self.summary_item.text() != text:
            self.summary_item.setText(text)
        series, mark = (summary.series, summary.mark) if summary is not None else ((), None)
        if self.drawn_path and old is not None and old.series == series:  # a token switch over positions:
            point = spark_point(series, mark, SPARK_W, SPARK_H)     # the same line, only its dot moves
        else:
            path, point = sparkline(series, mark, SPARK_W, SPARK_H)
            self.spark.setPath(path)
            self.drawn_path = True
        self.dot.setVisible(point is not None)
        if point is not None:
            self.dot.setPos(point)

    def mousePressEvent(self, event: QGraphicsSceneMouseEvent) -> None:  # noqa: N802 - Qt's name
        if event.button() == Qt.MouseButton.LeftButton:
            self.on_click()
            event.accept()
        else:
            super().mousePressEvent(event)


class DiagramScene(QGraphicsScene):
    """The diagram of one model at one n, with block ``layer`` drawn in full."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.items_by_id: dict[str, BoxItem] = {}
        self.strips: list[BoxItem] = []
        self.on_box: Callable[[Box], None] = lambda _box: None
        self.on_layer: Callable[[int], None] = lambda _layer: None
        self.block_top = 0.0  # where the block drawn in full starts (the view scrolls there)
        self.layer: int | None = None  # the block drawn in full
        self.block_items: list[BoxItem] = []  # its boxes, in the diagram's order
        self.block_label: QGraphicsSimpleTextItem | None = None
        self.arrows: list[QGraphicsPathItem] = []

    def build(self, diagram: Diagram, layer: int) -> None:
        self.clear()
        self.items_by_id, self.strips, self.arrows = {}, [], []
        L = diagram.config.n_layers
        y = 0.0
        y = self._place(diagram.head(), y)
        if layer > 0:
            y = self._strip(*strip_title(0, layer - 1), y)
        self.block_items = []
        y = self._place(diagram.block(layer), y, f"block {layer} of {L}", self.block_items)
        if layer < L - 1:
            y = self._strip(*strip_title(layer + 1, L - 1), y)
        self._place(diagram.tail(), y)
        self._arrows(diagram, layer)
        self.setSceneRect(self.itemsBoundingRect().adjusted(-20, -20, 20, 20))
        first = self.block_items[0] if self.block_items else None
        self.block_top = first.y() - 40 if first is not None else 0.0
        self.layer = layer

    def move_to(self, diagram: Diagram, layer: int) -> None:
        """Draw block ``layer`` in full in this scene, which shows a block of the same layout
        (``layout_of``): the boxes, strips and their geometry stay; their layer, labels, tooltips,
        clicks are updated (no box or arrow is rebuilt)."""
        if layer == self.layer:
            return
        L = diagram.config.n_layers
        for item in self.block_items:
            self.items_by_id.pop(item.box.id, None)
        for item, box in zip(self.block_items, diagram.block(layer)):
            item.box = box
            item.on_click = lambda b=box: self.on_box(b)
            item.setToolTip(box_tooltip(box))
            self.items_by_id[box.id] = item
        if self.block_label is not None:
            self.block_label.setText(f"block {layer} of {L}")
        spans = ([(0, layer - 1)] if layer > 0 else []) + ([(layer + 1, L - 1)] if layer < L - 1 else [])
        for strip, (first, last) in zip(self.strips, spans):
            title, first, last = strip_title(first, last)
            strip.title_item.setText(title + " (collapsed)")
            strip.first, strip.last = first, last
            strip.on_click = lambda f=first, la=last: self.on_layer(f if f > 0 else la)
        self.layer = layer  # the arrows stay: a block of the same layout is joined to its strips the same way

    def _place(self, boxes: Sequence[Box], y: float, label: str = "", into: list[BoxItem] | None = None) -> float:
        if label:
            self.block_label = _text(None, label, 0, y, 10, bold=True, colour="#475569")
            self.addItem(self.block_label)
            y += 22
        rows: dict[int, float] = {}
        for box in boxes:
            if box.row not in rows:
                rows[box.row] = y + len(rows) * (BOX_H + ROW_GAP)
            lines = (box.shape_text,) + box.details[:1]
            item = BoxItem(box, box.title, lines, lambda b=box: self.on_box(b), box.kind, box_tooltip(box))
            item.setPos(box.column * (BOX_W + COL_GAP), rows[box.row])
            self.addItem(item)
            self.items_by_id[box.id] = item
            if into is not None:
                into.append(item)
        return y + len(rows) * (BOX_H + ROW_GAP)

    def _strip(self, title: str, first: int, last: int, y: float) -> float:
        item = BoxItem(None, title + " (collapsed)", ("the residual stream's norm at this token, per block",),
                       lambda: self.on_layer(first if first > 0 else last), "strip",
                       "Click to draw the nearest of these blocks in full")
        item.first, item.last = first, last
        item.setPos(0, y)
        self.addItem(item)
        self.strips.append(item)
        return y + BOX_H + ROW_GAP

    def _arrows(self, diagram: Diagram, layer: int) -> None:
        def anchor(box_id: str) -> BoxItem | None:
            if box_id in self.items_by_id:
                return self.items_by_id[box_id]
            box = diagram.by_id.get(box_id)
            if box is None or box.layer is None:
                return None
            return next((s for s in self.strips if s.first <= box.layer <= s.last), None)

        for edge in diagram.edges:
            a, b = anchor(edge.source), anchor(edge.target)
            if a is None or b is None or a is b or (edge.kind == "residual" and b.box is None):
                continue
            start = a.mapToScene(QPointF(BOX_W / 2, BOX_H))
            end = b.mapToScene(QPointF(BOX_W / 2, 0))
            path = QPainterPath(start)
            if a.y() == b.y():  # side by side (positions into the embedding)
                left, right = (a, b) if a.x() < b.x() else (b, a)
                path = QPainterPath(left.mapToScene(QPointF(BOX_W, BOX_H / 2)))
                path.lineTo(right.mapToScene(QPointF(0, BOX_H / 2)))
            elif edge.kind == "residual":  # the stream goes down the left edge, past the sublayer
                x = min(start.x(), end.x()) - BOX_W / 2 - 12
                path.lineTo(x, start.y() + 6)
                path.lineTo(x, end.y() - 6)
                path.lineTo(end)
            elif a.x() != b.x() and b.y() - a.y() > BOX_H + ROW_GAP:  # to another column past a row between
                path = QPainterPath(a.mapToScene(QPointF(BOX_W, BOX_H / 2)))  # (the norm to a shared expert):
                path.lineTo(end.x(), path.currentPosition().y())            # out of its side, past the boxes
                path.lineTo(end)                                              # in the row between, not behind them
            else:
                mid = (start.y() + end.y()) / 2
                path.cubicTo(QPointF(start.x(), mid), QPointF(end.x(), mid), end)
            item = QGraphicsPathItem(path)
            pen = QPen(QColor("#94a3b8" if edge.kind == "residual" else "#475569"), 1.4)
            if edge.kind == "residual":
                pen.setStyle(Qt.PenStyle.DashLine)
            item.setPen(pen)
            item.setZValue(-1)
            self.addItem(item)
            self.arrows.append(item)


class DiagramView(QGraphicsView):
    def __init__(self, scene: DiagramScene, parent=None) -> None:
        super().__init__(scene, parent)
        self.setRenderHints(self.renderHints())
        self.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignHCenter)
        self.setDragMode(QGraphicsView.DragMode.NoDrag)

    def box_rect(self, item: QGraphicsItem) -> QRectF:
        return self.mapFromScene(item.sceneBoundingRect()).boundingRect()
