"""Toolbar controls: where the model runs (device, precision) and the shared layer/head choice."""

from __future__ import annotations

from PySide6.QtCore import QSignalBlocker, Qt, Signal
from PySide6.QtGui import QStandardItemModel
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QSpinBox, QWidget

from explorer.ui.session.selection import Selection

DEVICES = ("auto", "cpu", "cuda", "mps")
DTYPES = ("float32", "bfloat16", "float16")
WEIGHTS = ("auto", "keep", "dequantize", "bfloat16", "float16")
WEIGHTS_TIPS = {"auto": "the way that fits this machine: a quantised GGUF kept as stored, else all expanded if it fits",
                "keep": "as the file stores them (GGUF blocks, half precision), expanded as each layer runs: the "
                        "same numbers in a fraction of the memory",
                "dequantize": "every weight expanded into the compute precision at load: the fastest, the most memory",
                "bfloat16": "matrices stored in bfloat16 (rounded once), computed in the chosen precision",
                "float16": "matrices stored in float16 (rounded once), computed in the chosen precision"}


def _enable_items(combo: QComboBox, enabled: set[str], tip: str) -> None:
    model = combo.model()
    assert isinstance(model, QStandardItemModel)
    for row in range(combo.count()):
        item = model.item(row)
        on = combo.itemText(row) in enabled
        item.setEnabled(on)
        item.setToolTip("" if on else tip)


class DeviceControls(QWidget):
    """Device, precision and weights combos; only what this machine offers is enabled.

    Signals
    -------
    changed(str, str)
        The user picked another device or precision: (device, dtype).
    """

    changed = Signal(str, str)
    weights_changed = Signal(str)  # the user picked another way to hold the weights (reloads the model)

    def __init__(self, device: str = "auto", dtype: str = "float32", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.device_combo = QComboBox(self)
        self.device_combo.addItems(DEVICES)
        self.device_combo.setToolTip("Where the model runs (reloads the model)")
        self.dtype_combo = QComboBox(self)
        self.dtype_combo.addItems(DTYPES)
        self.dtype_combo.setToolTip("The precision the numbers are computed in (reloads the model); the weights may "
                                    "be stored in less: the status bar says in what")
        self.weights_combo = QComboBox(self)
        self.weights_combo.addItems(WEIGHTS)
        for row, way in enumerate(WEIGHTS):
            self.weights_combo.setItemData(row, WEIGHTS_TIPS[way], Qt.ItemDataRole.ToolTipRole)
        self.weights_combo.setToolTip("How the weights are held in memory (reloads the model); the loading line "
                                      "says what each way takes before anything is read")
        self.set_values(device, dtype)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(4, 0, 4, 0)
        layout.addWidget(QLabel("Device", self))
        layout.addWidget(self.device_combo)
        layout.addSpacing(6)
        layout.addWidget(QLabel("Precision", self))
        layout.addWidget(self.dtype_combo)
        layout.addSpacing(6)
        layout.addWidget(QLabel("Weights", self))
        layout.addWidget(self.weights_combo)
        self.device_combo.activated.connect(self._on_device)
        self.weights_combo.activated.connect(lambda _: self.weights_changed.emit(self.weights))
        self.dtype_combo.activated.connect(lambda _: self.changed.emit(self.device, self.dtype))

    @property
    def device(self) -> str:
        return self.device_combo.currentText()

    @property
    def dtype(self) -> str:
        return self.dtype_combo.currentText()

    @property
    def weights(self) -> str:
        return self.weights_combo.currentText()

    def set_weights(self, weights: str) -> None:
        with QSignalBlocker(self.weights_combo):
            self.weights_combo.setCurrentText(weights if weights in WEIGHTS else "auto")

    def set_values(self, device: str, dtype: str) -> None:
        with QSignalBlocker(self.device_combo), QSignalBlocker(self.dtype_combo):
            self.device_combo.setCurrentText(device)
            self.dtype_combo.setCurrentText(dtype)

    def refresh(self) -> None:
        """Enable only the devices present and the precisions the chosen device supports."""
        from explorer.core.device import available_devices, resolve_device, supported_dtypes

        found = set(available_devices()) | {"auto"}
        _enable_items(self.device_combo, found, "not available on this machine")
        try:
            dtypes = set(supported_dtypes(resolve_device(self.device)))
        except Exception:  # an unavailable device: only the universal precision
            dtypes = {"float32"}
        _enable_items(self.dtype_combo, dtypes, "not offered on this device")

    def _on_device(self, _index: int) -> None:
        self.refresh()
        model = self.dtype_combo.model()
        assert isinstance(model, QStandardItemModel)
        if not model.item(self.dtype_combo.currentIndex()).isEnabled():
            with QSignalBlocker(self.dtype_combo):
                self.dtype_combo.setCurrentText("float32")
        self.changed.emit(self.device, self.dtype)


class LayerHeadControls(QWidget):
    """Layer and head spin boxes bound both ways to the shared ``Selection``."""

    def __init__(self, selection: Selection, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.selection = selection
        self.layer = QSpinBox(self)
        self.layer.setToolTip("Layer shown by the panels (Alt+Up / Alt+Down)")
        self.head = QSpinBox(self)
        self.head.setToolTip("Attention head shown by the panels (Alt+Left / Alt+Right)")
        layout = QHBoxLayout(self)
        layout.setContentsMargins(4, 0, 4, 0)
        layout.addWidget(QLabel("Layer", self))
        layout.addWidget(self.layer)
        layout.addSpacing(6)
        layout.addWidget(QLabel("Head", self))
        layout.addWidget(self.head)
        self.set_ranges(1, 1)
        self.layer.valueChanged.connect(selection.set_layer)
        self.head.valueChanged.connect(selection.set_head)
        selection.changed.connect(self._sync)

    def set_ranges(self, n_layers: int, n_heads: int) -> None:
        """Ranges from the model's config; the selection is clamped into them."""
        with QSignalBlocker(self.layer), QSignalBlocker(self.head):
            self.layer.setRange(0, max(n_layers - 1, 0))
            self.head.setRange(0, max(n_heads - 1, 0))
            self.layer.setSuffix(f"  (0-{n_layers - 1})")  # indices count from 0, like the trace keys
            self.head.setSuffix(f"  (0-{n_heads - 1})")
        self.selection.set_layer(min(self.selection.layer, n_layers - 1))
        self.selection.set_head(min(self.selection.head, n_heads - 1))
        self._sync("")

    def step_layer(self, delta: int) -> None:
        self.layer.setValue(self.layer.value() + delta)  # QSpinBox clamps to its range

    def step_head(self, delta: int) -> None:
        self.head.setValue(self.head.value() + delta)

    def _sync(self, _what: str) -> None:
        with QSignalBlocker(self.layer), QSignalBlocker(self.head):
            self.layer.setValue(self.selection.layer)
            self.head.setValue(self.selection.head)
