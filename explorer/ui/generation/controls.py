"""The sampling controls of the generation pane: temperature (with "greedy"), top-k, top-p, min-p,
the repetition penalty, the number of new tokens and the seed.

``changed`` is emitted whenever a control that shapes the distribution moves, so the pane can
re-score the shown step at once (``explorer.core.generation.candidates``), without the model.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QSpinBox,
    QWidget,
)
from superqt import QLabeledDoubleSlider, QLabeledSlider

from explorer.core.generation.sampling import SamplingParams

MAX_SEED = 2**31 - 1


def double_slider(low: float, high: float, value: float, step: float, decimals: int, tip: str,
                  parent: QWidget) -> QLabeledDoubleSlider:
    slider = QLabeledDoubleSlider(Qt.Orientation.Horizontal, parent)
    slider.setRange(low, high)
    slider.setDecimals(decimals)
    slider.setSingleStep(step)
    slider.setValue(value)
    slider.setToolTip(tip)
    return slider


def row(parent: QWidget, *widgets: QWidget, grow: int | None = 0) -> QWidget:
    """Widgets side by side; the one at index ``grow`` takes the spare width (None: none does)."""
    box = QWidget(parent)
    layout = QHBoxLayout(box)
    layout.setContentsMargins(0, 0, 0, 0)
    layout.setSpacing(6)
    for i, widget in enumerate(widgets):
        layout.addWidget(widget, 1 if i == grow else 0)
    if grow is None:
        layout.addStretch(1)
    return box


class SamplingControls(QWidget):
    """The controls as a form. Signals: changed() (a distribution-shaping control moved)."""

    changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._last_temperature = 1.0
        self.greedy = QCheckBox("greedy", self)
        self.greedy.setToolTip("Always take the most likely token (temperature 0)")
        self.temperature = double_slider(0.0, 2.0, 1.0, 0.05, 2, "Divides the logits; 0 = greedy", self)
        self.top_k = QLabeledSlider(Qt.Orientation.Horizontal, self)
        self.top_k.setRange(0, 200)
        self.top_k.setValue(0)
        self.top_k.setToolTip("Keep only the k most likely tokens; 0 = off")
        self.top_p = double_slider(0.01, 1.0, 1.0, 0.01, 2, "Keep the smallest set of tokens whose "
                                   "probabilities add up to p; 1 = off", self)
        self.min_p = double_slider(0.0, 0.5, 0.0, 0.01, 2, "Drop tokens less likely than min-p times "
                                   "the most likely one; 0 = off", self)
        self.repetition = double_slider(0.5, 2.0, 1.0, 0.05, 2, "> 1 discourages tokens already in the "
                                        "text; 1 = off", self)
        self.max_new = QSpinBox(self)
        self.max_new.setRange(1, 4096)
        self.max_new.setValue(64)
        self.max_new.setToolTip("Stop after this many new tokens")
        self.seed = QSpinBox(self)
        self.seed.setRange(0, MAX_SEED)
        self.seed.setValue(0)
        self.seed.setToolTip("The same seed, prompt and controls give the same text")
        self.random_seed = QCheckBox("random", self)
        self.random_seed.setToolTip("Draw a new seed for every generation (shown here, so it can be reused)")
        form = QFormLayout(self)
        form.setContentsMargins(0, 0, 0, 0)
        form.setVerticalSpacing(1)
        form.setHorizontalSpacing(8)
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        form.addRow("Temperature", row(self, self.temperature, self.greedy))
        form.addRow("Top-k", self.top_k)
        form.addRow("Top-p", self.top_p)
        form.addRow("Min-p", self.min_p)
        form.addRow("Repetition penalty", self.repetition)
        form.addRow("Max new tokens", row(self, self.max_new, QLabel("Seed", self), self.seed, self.random_seed,
                                          grow=None))
        self.greedy.toggled.connect(self._on_greedy)
        self.temperature.valueChanged.connect(self._on_temperature)
        for control in (self.top_k, self.top_p, self.min_p, self.repetition):
            control.valueChanged.connect(lambda _=None: self.changed.emit())
        self.random_seed.toggled.connect(lambda on: self.seed.setEnabled(not on))
        self._wanted_new, self._capping = self.max_new.value(), False
        self.max_new.valueChanged.connect(self._on_max_new)

    def _on_max_new(self, value: int) -> None:
        if not self._capping:  # chosen, not cut to a model's smaller context
            self._wanted_new = int(value)

    def set_max_new_cap(self, cap: int) -> None:
        """The most new tokens the model's context allows, shown in the box ("64 (max 256)") and its
        tooltip, so a larger number typed there is not silently cut to something else. The number is
        the one chosen last, cut to the cap: a model with a short context (the worked example's 16)
        does not leave its cap behind for the next model."""
        cap = max(1, int(cap))
        wanted, self._capping = self._wanted_new, True
        try:
            self.max_new.setMaximum(cap)
            self.max_new.setValue(min(wanted, cap))  # a larger cap gives back what was chosen before
        finally:
            self._capping = False
        self.max_new.setSuffix(f"  (max {cap:,})")
        self.max_new.setToolTip(f"Stop after this many new tokens: at most {cap:,}, the model's context length")

    def params(self, seed: int | None = None, stop_at_eos: bool = True) -> SamplingParams:
        """The controls as they are now (``seed``: the one to record; default the seed box's)."""
        return SamplingParams(
            temperature=0.0 if self.greedy.isChecked() else float(self.temperature.value()),
            top_k=int(self.top_k.value()), top_p=float(self.top_p.value()), min_p=float(self.min_p.value()),
            repetition_penalty=float(self.repetition.value()), max_new_tokens=int(self.max_new.value()),
            seed=int(self.seed.value()) if seed is None else int(seed), stop_at_eos=stop_at_eos)

    def _on_greedy(self, on: bool) -> None:
        value = float(self.temperature.value())
        if on and value > 0:
            self._last_temperature = value
            self.temperature.setValue(0.0)  # -> _on_temperature -> changed
        elif not on and value == 0:
            self.temperature.setValue(self._last_temperature or 1.0)
        else:
            self.changed.emit()

    def _on_temperature(self, value: float) -> None:
        if (float(value) == 0.0) != self.greedy.isChecked():
            self.greedy.blockSignals(True)
            self.greedy.setChecked(float(value) == 0.0)
            self.greedy.blockSignals(False)
        self.changed.emit()
