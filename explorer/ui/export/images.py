"""Plots as image files: PNG through pyqtgraph's ImageExporter, our own SVG for heatmaps.

pyqtgraph's SVGExporter embeds an ImageItem as one raster image, so a heatmap's SVG is written
here instead: one ``<rect>`` per cell while the matrix is small, an embedded PNG otherwise, with the
token labels as real ``<text>``. Every file is written through ``explorer.core.export.atomic_path``:
a failed export never leaves a half-written file or clobbers an existing one.
"""

from __future__ import annotations

import base64
import contextlib
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

import numpy as np
import pyqtgraph as pg
from pyqtgraph.exporters import ImageExporter, SVGExporter
from PySide6.QtCore import QBuffer, QByteArray, QIODevice, Qt
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QAbstractItemView, QTableView, QWidget

from explorer.core.display.levels import abbreviate, label_step
from explorer.core.export import atomic_path, write_text
from explorer.ui.export.raster import table_image
from explorer.ui.widgets.heatmap import Heatmap

SVG_CELL_LIMIT = 100  # rows and columns up to which an SVG heatmap gets one <rect> per cell
_MASK_GREY = (175, 175, 175)


# --- PNG ---------------------------------------------------------------------------------------
def _graphics_item(target: Any) -> Any:
    """The pyqtgraph item to hand ImageExporter for a widget or item (None for a plain widget)."""
    if isinstance(target, pg.GraphicsLayoutWidget):
        return target.ci
    if isinstance(target, pg.PlotWidget):
        return target.getPlotItem()
    if isinstance(target, pg.GraphicsView):
        return target.scene()
    if isinstance(target, (pg.GraphicsItem, pg.GraphicsScene)) or hasattr(target, "sceneBoundingRect"):
        return target
    return None


_HINT = re.compile(r"\s*\((?:hover|click|double-click|drag)[^()]*\)|;\s*(?:hover|click|drag)[^();]*", re.IGNORECASE)


def paper_text(text: str) -> str:
    """A title without the UI's hints ("(hover for the tokens)", "; click a chip"): images are for papers."""
    return _HINT.sub("", text)


def _plot_items(target: Any) -> list[pg.PlotItem]:
    if isinstance(target, Heatmap):
        return [target.plot]
    if isinstance(target, pg.PlotWidget):
        return [target.getPlotItem()]
    if isinstance(target, pg.GraphicsLayoutWidget):
        return [item for item in target.ci.items if isinstance(item, pg.PlotItem)]
    return [target] if isinstance(target, pg.PlotItem) else []


@contextlib.contextmanager
def paper_titles(target: Any) -> Iterator[None]:
    """Titles without UI hints while an image is rendered, restored afterwards."""
    changed = []
    for plot in _plot_items(target):
        label = plot.titleLabel
        full = str(getattr(label, "full_text", None) or getattr(label, "text", "") or "")
        clean = paper_text(full)
        if clean != full:
            changed.append((plot, full))
            plot.setTitle(clean)
    try:
        yield
    finally:
        for plot, full in changed:
            plot.setTitle(full)


def table_rows(view: QAbstractItemView) -> tuple[list[str], list[list[str]]]:
    """A table view's header and every row as text (what its model shows, not what fits on screen)."""
    model = view.model()
    columns = [c for c in range(model.columnCount()) if not (isinstance(view, QTableView) and view.isColumnHidden(c))]
    headers = [str(model.headerData(c, Qt.Orientation.Horizontal) or "") for c in columns]
    rows = [[str(model.index(r, c).data() if model.index(r, c).data() is not None else "") for c in columns]
            for r in range(model.rowCount())]
    return headers, rows


def render_png(target: Any, width: int | None = None) -> QImage:
    """A QImage of a pyqtgraph item or widget: tables drawn from their data (every row, no scroll
    bars, ``raster.table_image``), other plain Qt widgets grabbed; plot titles without UI hints."""
    item = _graphics_item(target)
    if item is None:
        if not isinstance(target, QWidget):
            raise TypeError(f"cannot render {type(target).__name__} to PNG")
        if isinstance(target, QAbstractItemView) and target.model() is not None:
            image = table_image(*table_rows(target))
        else:
            image = target.grab().toImage()
        if width and image.width() != width:
            image = image.scaledToWidth(int(width), Qt.TransformationMode.SmoothTransformation)
        return image
    exporter = ImageExporter(item)
    if width:
        exporter.parameters()["width"] = int(width)  # the height follows the item's aspect ratio
    exporter.parameters()["antialias"] = True
    with paper_titles(target):
        image = exporter.export(toBytes=True)
    if image is None or image.isNull():
        raise RuntimeError("the plot rendered to an empty image (is it laid out with a size?)")
    return image


def export_png(item_or_widget: Any, path: str | os.PathLike[str], width: int | None = None) -> Path:
    """Write ``item_or_widget`` as a PNG, atomically. ``width`` in pixels (default: as on screen)."""
    path = Path(path)
    image = render_png(item_or_widget, width)
    with atomic_path(path) as tmp:
        if not image.save(str(tmp), "PNG"):
            raise OSError(f"could not write a PNG to {path}")
    return path


# --- SVG ---------------------------------------------------------------------------------------
def _colour_indices(matrix: np.ndarray, levels: tuple[float, float]) -> np.ndarray:
    lo, hi = levels
    scale = 255.0 / (hi - lo) if hi > lo else 0.0
    values = np.nan_to_num(np.asarray(matrix, dtype=np.float64), nan=lo, posinf=hi, neginf=lo)
    return np.clip(np.floor((values - lo) * scale), 0, 255).astype(np.intp)


def _png_data_uri(rgb: np.ndarray) -> str:
    rgb = np.ascontiguousarray(rgb, dtype=np.uint8)
    height, width = rgb.shape[:2]
    image = QImage(rgb.data, width, height, 3 * width, QImage.Format.Format_RGB888).copy()
    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    image.save(buffer, "PNG")
    buffer.close()
    return "data:image/png;base64," + base64.b64encode(bytes(data)).decode("ascii")


def _svg_text(s: str) -> str:
    """Label text safe for XML 1.0: control characters shown as escapes."""
    s = "".join(c if c >= " " or c in "\t\n" else f"\\x{ord(c):02x}" for c in s)
    return escape(s)


def heatmap_svg(matrix: np.ndarray, lut: np.ndarray, levels: tuple[float, float], hidden: np.ndarray,
                row_labels: list[str], col_labels: list[str], title: str = "", value_name: str = "") -> str:
    """An SVG document of a heatmap: cells, hatched masked cells, labels, title and a colour bar."""
    rows, cols = matrix.shape
    cell = float(np.clip(640.0 / max(cols, 1), 3.0, 36.0))
    cell = min(cell, float(np.clip(640.0 / max(rows, 1), 3.0, 36.0))) if rows > cols else cell
    font = 11
    row_chars = max((len(abbreviate(s, 16)) for s in row_labels), default=1)
    col_chars = max((len(abbreviate(s, 16)) for s in col_labels), default=1)
    cell = float(int(cell)) if cell >= 4 else cell  # whole pixels: no seams between neighbouring cells
    left = float(int(10 + row_chars * font * 0.62))
    top = 34.0 if title else 24.0
    plot_w, plot_h = cols * cell, rows * cell
    bottom = 16 + col_chars * font * 0.62 * 0.71  # labels at -45 degrees
    bar_x = left + plot_w + 16
    width, height = bar_x + 70, top + plot_h + bottom + 10
    colours = [f"#{r:02x}{g:02x}{b:02x}" for r, g, b in np.asarray(lut)[:, :3]]
    index = _colour_indices(matrix, levels)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
           f'viewBox="0 0 {width:.2f} {height:.2f}" font-family="sans-serif" font-size="{font}">',
           '<defs><pattern id="masked" width="8" height="8" patternUnits="userSpaceOnUse" '
           'patternTransform="rotate(45)"><rect width="8" height="8" fill="#cdcdcd"/>'
           '<rect width="2" height="8" fill="#969696"/></pattern>',
           '<linearGradient id="bar" x1="0" y1="1" x2="0" y2="0">']
    for k in range(0, 256, 15):
        out.append(f'<stop offset="{k / 255:.4f}" stop-color="{colours[k]}"/>')
    out.append(f'<stop offset="1" stop-color="{colours[255]}"/></linearGradient></defs>')
    out.append(f'<rect width="{width:.2f}" height="{height:.2f}" fill="white"/>')
    if title:
        out.append(f'<text x="{left + plot_w / 2:.2f}" y="20" text-anchor="middle" font-size="13">'
                   f'{_svg_text(title)}</text>')

    if rows <= SVG_CELL_LIMIT and cols <= SVG_CELL_LIMIT:
        out.append('<g shape-rendering="crispEdges">')
        size = f"{cell + 0.5:.2f}"  # a hair wider: anti-aliasing renderers show no seams between cells
        for i in range(rows):
            y = top + i * cell
            for j in range(cols):
                fill = "url(#masked)" if hidden[i, j] else colours[index[i, j]]
                out.append(f'<rect class="cell" x="{left + j * cell:.2f}" y="{y:.2f}" width="{size}" '
                           f'height="{size}" fill="{fill}"/>')
        out.append("</g>")
    else:
        rgb = np.asarray(lut)[:, :3][index]
        rgb[hidden] = _MASK_GREY
        out.append(f'<image x="{left:.2f}" y="{top:.2f}" width="{plot_w:.2f}" height="{plot_h:.2f}" '
                   f'preserveAspectRatio="none" style="image-rendering:pixelated" href="{_png_data_uri(rgb)}"/>')
    out.append(f'<rect x="{left:.2f}" y="{top:.2f}" width="{plot_w:.2f}" height="{plot_h:.2f}" '
               'fill="none" stroke="black" stroke-width="0.8"/>')

    step = label_step(rows, max(2, int(plot_h / (font + 2))))
    for i in range(0, rows, step):
        out.append(f'<text x="{left - 4:.2f}" y="{top + (i + 0.5) * cell + font * 0.35:.2f}" '
                   f'text-anchor="end">{_svg_text(abbreviate(row_labels[i], 16))}</text>')
    step = label_step(cols, max(2, int(plot_w / (font + 2))))
    for j in range(0, cols, step):
        x, y = left + (j + 0.5) * cell, top + plot_h + 10
        out.append(f'<text x="{x:.2f}" y="{y:.2f}" text-anchor="end" transform="rotate(-45 {x:.2f} {y:.2f})">'
                   f'{_svg_text(abbreviate(col_labels[j], 16))}</text>')

    out.append(f'<rect x="{bar_x:.2f}" y="{top:.2f}" width="14" height="{plot_h:.2f}" fill="url(#bar)" '
               'stroke="black" stroke-width="0.5"/>')
    lo, hi = levels
    for frac in (0.0, 0.5, 1.0):
        y = top + plot_h * (1 - frac)
        out.append(f'<text x="{bar_x + 18:.2f}" y="{y + font * 0.35:.2f}">{lo + frac * (hi - lo):.4g}</text>')
    if value_name:
        out.append(f'<text x="{bar_x:.2f}" y="{top - 8:.2f}">{_svg_text(value_name)}</text>')
    out.append("</svg>\n")
    return "\n".join(out)


def export_svg(item: Any, path: str | os.PathLike[str]) -> Path:
    """Write an SVG: our own for a Heatmap, pyqtgraph's SVGExporter for anything else."""
    path = Path(path)
    if isinstance(item, Heatmap):
        hidden = item.masked | ~np.isfinite(item.matrix)
        title = item.plot.titleLabel.text if item.plot.titleLabel.isVisible() else ""
        svg = heatmap_svg(item.matrix, item.colormap.getLookupTable(nPts=256, alpha=False), item.levels, hidden,
                          item.row_labels, item.col_labels, title=title, value_name=item.value_name)
        write_text(path, svg)
        return path
    target = _graphics_item(item)
    if target is None or isinstance(target, pg.GraphicsScene):
        target = item.scene() if isinstance(item, pg.GraphicsView) else target
    if target is None:
        raise TypeError(f"cannot export {type(item).__name__} as SVG")
    svg = SVGExporter(target).export(toBytes=True)
    data = svg if isinstance(svg, (bytes, bytearray)) else bytes(svg)
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return path
