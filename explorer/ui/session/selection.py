"""What the user has selected, shared by every panel: a layer, a head and one token."""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal


class Selection(QObject):
    """The shared selection. ``changed`` carries which part changed: "layer", "head" or "token".

    Setting a value equal to the current one emits nothing, so panels can echo selections back
    without loops.
    """

    changed = Signal(str)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._layer = 0
        self._head = 0
        self._token: int | None = None

    @property
    def layer(self) -> int:
        return self._layer

    @property
    def head(self) -> int:
        return self._head

    @property
    def token(self) -> int | None:
        return self._token

    def set_layer(self, layer: int) -> None:
        if layer != self._layer:
            self._layer = int(layer)
            self.changed.emit("layer")

    def set_head(self, head: int) -> None:
        if head != self._head:
            self._head = int(head)
            self.changed.emit("head")

    def set_layer_head(self, layer: int, head: int) -> None:
        self.set_layer(layer)
        self.set_head(head)

    def set_token(self, token: int | None) -> None:
        if token != self._token:
            self._token = None if token is None else int(token)
            self.changed.emit("token")

    def clamp(self, n_layers: int, n_heads: int, n_tokens: int) -> None:
        """Keep the selection inside a new trace's ranges (called when a trace arrives)."""
        self.set_layer(min(self._layer, n_layers - 1))
        self.set_head(min(self._head, n_heads - 1))
        if self._token is not None and self._token >= n_tokens:
            self.set_token(n_tokens - 1)
