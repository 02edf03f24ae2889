"""The layer selector strip above the diagram: one cell per block, the selected one filled; a click or
the arrow keys select a block (the shared selection's layer). A model whose blocks differ (a hybrid) colours each
cell by its token mixer (``KIND_HUES``) and names it where the cell has room ("3 attn", "0 DeltaNet")."""

from __future__ import annotations

from PySide6.QtCore import QRect, QSize, Qt, Signal
from PySide6.QtGui import QColor, QKeyEvent, QMouseEvent, QPainter, QPaintEvent
from PySide6.QtWidgets import QSizePolicy, QWidget

CELL_MIN, HEIGHT = 14, 24
# the hue of a block's cell by its token mixer (a hybrid's): attention blue, recurrent layers green / teal
KIND_HUES = {"attn": 0.6, "DeltaNet": 0.4, "Mamba-2": 0.47, "conv": 0.33, "FFN": 0.0}


class LayerStrip(QWidget):
    layer_clicked = Signal(int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.n_layers, self.layer = 1, 0
        self.values: tuple[float, ...] = ()  # the stream's norm per block (shading)
        self.kinds: tuple[str, ...] = ()  # each block's token mixer in a word (a hybrid's; else empty)
        self.setFocusPolicy(Qt.FocusPolicy.ClickFocus)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setToolTip("Blocks: click one to draw it in full (←/→ move)")

    def sizeHint(self) -> QSize:  # noqa: N802
        return QSize(max(200, self.n_layers * CELL_MIN), HEIGHT)

    def set_state(self, n_layers: int, layer: int, values: tuple[float, ...] = (), kinds: tuple[str, ...] = ()) -> None:
        if (max(1, n_layers), layer, values, kinds) == (self.n_layers, self.layer, self.values, self.kinds):
            return
        if max(1, n_layers) != self.n_layers:
            self.updateGeometry()  # its size hint follows the number of blocks
        if kinds != self.kinds:
            legend = ", ".join(dict.fromkeys(kinds))
            self.setToolTip("Blocks: click one to draw it in full (\u2190/\u2192 move)"
                            + (f"; coloured by their token mixer ({legend})" if kinds else ""))
        self.n_layers, self.layer, self.values, self.kinds = max(1, n_layers), layer, values, kinds
        self.update()

    def cell(self, layer: int) -> QRect:
        w = self.width() / self.n_layers
        return QRect(int(layer * w), 0, max(1, int((layer + 1) * w) - int(layer * w)), self.height())

    def paintEvent(self, _event: QPaintEvent) -> None:  # noqa: N802
        p = QPainter(self)
        top = max(self.values[: self.n_layers], default=0.0) or 1.0
        for layer in range(self.n_layers):
            r = self.cell(layer).adjusted(1, 1, -1, -1)
            shade = self.values[layer] / top if layer < len(self.values) else 0.0
            kind = self.kinds[layer] if layer < len(self.kinds) else "attn"
            hue = KIND_HUES.get(kind, 0.6)
            saturation = 0.0 if kind == "FFN" else 0.15 + 0.5 * shade
            colour = QColor("#d9480f") if layer == self.layer else QColor.fromHsvF(hue, saturation, 0.95)
            p.fillRect(r, colour)
            if r.width() >= 14:
                p.setPen(QColor("white") if layer == self.layer else QColor("#1f2937"))
                text = f"{layer} {kind}" if self.kinds else str(layer)
                if p.fontMetrics().horizontalAdvance(text) > r.width() - 4:
                    text = str(layer)  # no room for the word: the colour says it
                p.drawText(r, Qt.AlignmentFlag.AlignCenter, text)
        p.end()

    def mousePressEvent(self, event: QMouseEvent) -> None:  # noqa: N802
        layer = int(event.position().x() * self.n_layers / max(self.width(), 1))
        self.layer_clicked.emit(min(max(layer, 0), self.n_layers - 1))

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802
        step = {Qt.Key.Key_Left: -1, Qt.Key.Key_Right: 1}.get(Qt.Key(event.key()))
        if step is None:
            super().keyPressEvent(event)
            return
        self.layer_clicked.emit(min(max(self.layer + step, 0), self.n_layers - 1))
