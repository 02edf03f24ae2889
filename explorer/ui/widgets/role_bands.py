"""Role bands: which turn of a conversation each token belongs to, as coloured bands along a token axis.

A trace of a templated conversation (``trace.meta.chat``, a ``ChatSpans``) knows each token's turn, role
and kind. ``token_bands`` turns its ``segments()`` into ``Band``s (token ranges with a colour and a label);
one colour per role (system, user, assistant, developer) for a message's own text, and one per kind
for the rest (the thinking, Harmony's channels, the template's markup). The same bands are drawn by
every token axis: a heatmap's axes (``ThinAxis``, a strip along the plot's edge, under the tick marks),
the token chips (a bar over each chip), the timeline's slider; ``legend_html`` is their key.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import QPointF, QRectF
from PySide6.QtGui import QColor, QPainter

ROLE_COLOURS = {"system": "#9c36b5", "developer": "#5f3dc4", "user": "#1971c2", "assistant": "#2f9e44"}
KIND_COLOURS = {"thinking": "#f08c00", "analysis": "#e8590c", "commentary": "#c2255c", "final": "#66a80f",
                "markup": "#868e96"}
KIND_LABELS = {"markup": "template markup", "analysis": "analysis channel", "commentary": "commentary channel",
               "final": "final channel"}
THICKNESS = 7  # pixels of a band along an axis


@dataclass(frozen=True)
class Band:
    """Tokens [start, stop) (positions on the axis) of one turn and kind."""

    start: int
    stop: int
    colour: str
    label: str  # what the legend says: "user", "thinking", "template markup"
    turn: int = -1

    def describe(self) -> str:
        return f"{self.label} (turn {self.turn + 1})" if self.turn >= 0 and self.label in ROLE_COLOURS else self.label


def label_and_colour(role: str, kind: str) -> tuple[str, str]:
    """What a token of ``role`` and ``kind`` is called in a legend, and its colour."""
    if kind == "content":
        return role or "text", ROLE_COLOURS.get(role, "#495057")
    return KIND_LABELS.get(kind, kind), KIND_COLOURS.get(kind, "#868e96")


def token_bands(spans: Any, start: int = 0, stop: int | None = None) -> tuple[Band, ...]:
    """The bands of tokens ``start..stop`` of ``spans`` (a ``ChatSpans``, or None: no bands), shifted so the
    axis' first token is 0 (a window of a long prompt)."""
    if spans is None:
        return ()
    stop = spans.n_tokens if stop is None else min(stop, spans.n_tokens)
    out = []
    for segment in spans.segments():
        a, b = max(segment.start, start), min(segment.stop, stop)
        if a < b:
            label, colour = label_and_colour(segment.role, segment.kind)
            out.append(Band(a - start, b - start, colour, label, segment.turn))
    return tuple(out)


def trace_bands(trace: Any, start: int = 0, stop: int | None = None) -> tuple[Band, ...]:
    """``token_bands`` of a trace's conversation (none for a raw prompt), cut to the trace's tokens."""
    if trace is None:
        return ()
    spans = getattr(getattr(trace, "meta", None), "chat", None)
    n = trace.n_tokens
    return token_bands(spans, start, n if stop is None else min(stop, n))


def band_at(bands: Sequence[Band], position: int) -> Band | None:
    """The band holding ``position`` (None outside every band)."""
    return next((b for b in bands if b.start <= position < b.stop), None)


def legend_entries(bands: Sequence[Band]) -> list[tuple[str, str]]:
    """(label, colour) of each kind of band, in order of first appearance."""
    seen: dict[str, str] = {}
    for band in bands:
        seen.setdefault(band.label, band.colour)
    return list(seen.items())


def legend_html(bands: Sequence[Band], size: str = "") -> str:
    """The bands' key: a coloured square and the label of each kind ("" when there are none)."""
    entries = legend_entries(bands)
    if not entries:
        return ""
    style = f" style='font-size:{size}'" if size else ""
    items = [f"<span style='color:{colour}'>\u25a0</span>&nbsp;{label}" for label, colour in entries]
    return f"<span{style}>" + " &nbsp; ".join(items) + "</span>"


def colours_per_token(bands: Sequence[Band], n: int) -> list[str | None]:
    """Each of ``n`` positions' band colour (None where no band is)."""
    out: list[str | None] = [None] * n
    for band in bands:
        for i in range(max(band.start, 0), min(band.stop, n)):
            out[i] = band.colour
    return out


def paint_axis_bands(painter: QPainter, axis: Any, bands: Sequence[Band], thickness: int = THICKNESS) -> None:
    """Paint ``bands`` on a pyqtgraph ``AxisItem`` along its edge by the plot, in its view's coordinates (a
    token at position p spans p..p+1 on the axis, as a heatmap's cells do)."""
    view = axis.linkedView()
    if view is None or not bands:
        return
    rect = QRectF(0, 0, axis.size().width(), axis.size().height())
    side = axis.orientation
    vertical = side in ("left", "right")
    painter.save()
    painter.setPen(QColor(0, 0, 0, 0))
    for band in bands:
        a = axis.mapFromScene(view.mapViewToScene(QPointF(band.start, band.start)))
        b = axis.mapFromScene(view.mapViewToScene(QPointF(band.stop, band.stop)))
        lo, hi = (min(a.y(), b.y()), max(a.y(), b.y())) if vertical else (min(a.x(), b.x()), max(a.x(), b.x()))
        if side == "left":
            box = QRectF(rect.right() - thickness, lo, thickness, hi - lo)
        elif side == "right":
            box = QRectF(rect.left(), lo, thickness, hi - lo)
        elif side == "bottom":
            box = QRectF(lo, rect.top(), hi - lo, thickness)
        else:
            box = QRectF(lo, rect.bottom() - thickness, hi - lo, thickness)
        box = box.intersected(rect)
        if box.isEmpty():
            continue
        painter.fillRect(box, QColor(band.colour))
    painter.restore()


def set_plot_bands(plot: Any, left: Sequence[Band] | None = None, bottom: Sequence[Band] | None = None) -> None:
    """Set the role bands of a plot's token axes (a ``PlotItem`` or ``PlotWidget`` built with ``ThinAxis``es);
    an axis given None is left as it is."""
    for side, bands in (("left", left), ("bottom", bottom)):
        axis = plot.getAxis(side)
        if bands is not None and hasattr(axis, "set_bands"):
            axis.set_bands(tuple(bands))
