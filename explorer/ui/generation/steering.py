"""Steering in the window: add alpha * v to the residual stream entering a layer, at every position, and
see the continuation with and without it, side by side, drawn with the same seed.

``v`` is one of: the feature chosen in the Features panel (its decoder direction carried into the
residual stream), a neuron's output weights (``L:N``), a ``.npy`` vector file, or a contrast pair
typed here (the mean over positions of prompt A's residual stream at that layer minus prompt B's).
The prompt and the sampling controls are the generation pane's. Both continuations run in one
worker through the core's ``generate`` with the session's interventions, the steered one with the
steer added (``core/features/steering.py``); the unsteered one is kept while only alpha changes, so
the alpha control is live: each change (after a short pause) runs the steered continuation again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QTimer, Signal
from PySide6.QtWidgets import (QComboBox, QDoubleSpinBox, QFileDialog, QFormLayout, QHBoxLayout, QLabel,
                               QLineEdit, QPlainTextEdit, QPushButton, QSpinBox, QVBoxLayout, QWidget)

from explorer.core.cancel import Cancel
from explorer.core.errors import ExplorerError
from explorer.ui.session import background

if TYPE_CHECKING:
    import numpy as np

    from explorer.core.generation.generate import GenerationResult
    from explorer.core.generation.sampling import SamplingParams
    from explorer.core.loaded import LoadedModel
    from explorer.ui.generation.pane import GenerationPane
    from explorer.ui.session.session import Session

SOURCES = ("the feature chosen in the Features panel", "a neuron's output weights (L:N)", "a vector file (.npy)",
           "a contrast pair (prompt A minus prompt B)")
ALPHA_PAUSE_MS = 300


@dataclass(frozen=True)
class SteeringResult:
    unsteered: GenerationResult
    steered: GenerationResult
    layer: int
    alpha: float
    source: str
    seed: int


def _vector(loaded: LoadedModel, kind: int, layer: int, args: tuple) -> tuple[np.ndarray, str]:
    """The steering vector and its name, on the worker (a contrast pair runs the model twice)."""
    from explorer.core.features.steering import contrast_vector, feature_vector, load_vector, neuron_vector

    model = loaded.model
    if kind == 0:
        sae, feature = args
        return feature_vector(sae, model, feature), f"feature {feature}"
    if kind == 1:
        return neuron_vector(model, *args), f"neuron {args[0]}:{args[1]}"
    if kind == 2:
        return load_vector(args[0], loaded.config.d_model), str(args[0]).rsplit("/", 1)[-1]
    a, b = (loaded.tokenizer.encode(t) for t in args)
    return contrast_vector(model, a, b, layer), "contrast pair"


def steered_pair(loaded: LoadedModel, ids: list[int], params: SamplingParams, base: tuple, kind: int, layer: int,
                 alpha: float, args: tuple, unsteered: GenerationResult | None, cancel: Cancel) -> SteeringResult:
    """Both continuations (the unsteered one reused when given) with the same seed."""
    from explorer.core.features.steering import steer
    from explorer.core.generation.generate import generate

    vector, name = _vector(loaded, kind, layer, args)
    if unsteered is None:
        unsteered = generate(loaded, ids, params, cancel, interventions=base)
    steered = generate(loaded, ids, params, cancel, interventions=(*base, steer(layer, vector, alpha, name)))
    return SteeringResult(unsteered, steered, layer, alpha, name, params.seed)


class SteeringPane(QWidget):
    """The Steering dock's content. Signal ``finished(object)``: a ``SteeringResult`` (None: failed)."""

    finished = Signal(object)

    def __init__(self, session: Session, pane: GenerationPane, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.session, self.pane = session, pane
        self.result: SteeringResult | None = None
        self.error: str | None = None
        self._cancel = Cancel()
        self._running = False
        self._again = False
        self._closed = False  # the window closed: what a worker still sends is dropped
        self._unsteered: tuple[Any, Any] = (None, None)  # (key, GenerationResult)
        self._build()
        self._alpha_timer = QTimer(self)
        self._alpha_timer.setSingleShot(True)
        self._alpha_timer.setInterval(ALPHA_PAUSE_MS)
        self._alpha_timer.timeout.connect(self._alpha_changed)
        session.model_loaded.connect(lambda loaded: self._model(loaded.config))
        session.features.selected_changed.connect(self._feature_selected)

    def _build(self) -> None:
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        intro = QLabel("Steering adds \u03b1 \u00d7 a direction to the residual stream entering a layer, at every "
                       "position. Left: the continuation without it; right: with it, from the same seed.")
        intro.setWordWrap(True)
        layout.addWidget(intro)
        form = QFormLayout()
        self.source = QComboBox()
        self.source.addItems(SOURCES)
        self.source.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.source.setMinimumContentsLength(14)  # the dock stays as narrow as the generation pane
        self.neuron = QLineEdit()
        self.neuron.setPlaceholderText("e.g. 3:1024")
        self.file = QLineEdit()
        self.file.setPlaceholderText("a .npy file of d_model floats")
        browse = QPushButton("Browse\u2026")
        browse.clicked.connect(self._browse)
        file_row = QHBoxLayout()
        file_row.addWidget(self.file, 1)
        file_row.addWidget(browse)
        self.prompt_a, self.prompt_b = QLineEdit(), QLineEdit()
        self.prompt_a.setPlaceholderText("prompt A, e.g. Love")
        self.prompt_b.setPlaceholderText("prompt B, e.g. Hate")
        self.layer = QSpinBox()
        self.alpha = QDoubleSpinBox()
        self.alpha.setRange(-1000.0, 1000.0)
        self.alpha.setSingleStep(1.0)
        self.alpha.setValue(4.0)
        self.alpha.setToolTip("How strongly to steer; a change runs the steered continuation again")
        form.addRow("Direction", self.source)
        form.addRow("Neuron", self.neuron)
        form.addRow("Vector file", file_row)
        form.addRow("Contrast", self.prompt_a)
        form.addRow("", self.prompt_b)
        form.addRow("Layer (entering block)", self.layer)
        form.addRow("\u03b1", self.alpha)
        layout.addLayout(form)
        self.run_button = QPushButton("Generate steered and unsteered")
        self.run_button.clicked.connect(self.run)
        layout.addWidget(self.run_button)
        self.status = QLabel()
        self.status.setWordWrap(True)
        layout.addWidget(self.status)
        texts = QHBoxLayout()
        self.unsteered_text, self.steered_text = QPlainTextEdit(), QPlainTextEdit()
        for title, view in (("unsteered", self.unsteered_text), ("steered", self.steered_text)):
            view.setReadOnly(True)
            column = QVBoxLayout()
            label = QLabel(f"<b>{title}</b>")
            column.addWidget(label)
            column.addWidget(view, 1)
            texts.addLayout(column, 1)
        self.steered_title = label
        layout.addLayout(texts, 1)
        self.alpha.valueChanged.connect(lambda _v: self._alpha_timer.start() if self.result is not None else None)

    def _model(self, config: Any) -> None:
        self.layer.setRange(0, config.n_layers)
        self.result, self._unsteered = None, (None, None)
        self.unsteered_text.clear()
        self.steered_text.clear()

    def _feature_selected(self) -> None:
        chosen = self.session.features.selected
        if chosen is not None and self.source.currentIndex() == 0:
            self.layer.setValue(chosen[0].hook.block)

    def _browse(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Steering vector", "", "NumPy vectors (*.npy)")
        if path:
            self.file.setText(path)
            self.source.setCurrentIndex(2)

    def _args(self) -> tuple:
        kind = self.source.currentIndex()
        if kind == 0:
            chosen = self.session.features.selected
            if chosen is None:
                raise ExplorerError("choose a feature in the Features panel first (File \u25b8 Open SAE\u2026)")
            return chosen
        if kind == 1:
            layer, _, neuron = self.neuron.text().strip().partition(":")
            if not (layer.isdigit() and neuron.isdigit()):
                raise ExplorerError(f"cannot read the neuron {self.neuron.text()!r:.40}: use LAYER:NEURON, e.g. 3:1024")
            return int(layer), int(neuron)
        if kind == 2:
            if not self.file.text().strip():
                raise ExplorerError("choose a .npy vector file")
            return (self.file.text().strip(),)
        if not self.prompt_a.text() or not self.prompt_b.text():
            raise ExplorerError("type both prompts of the contrast pair")
        return self.prompt_a.text(), self.prompt_b.text()

    # --- running ----------------------------------------------------------------------------------
    def _alpha_changed(self) -> None:
        self.run()

    def run(self) -> bool:
        """Generate both continuations with the pane's prompt and controls (one seed). False: not started."""
        loaded = self.session.loaded
        if loaded is None or self._closed:
            return False
        if self._running:  # one at a time: the newest settings run when this one ends
            self._again = True
            self._cancel.set()
            return False
        try:
            args = self._args()
            ids = self.pane._encode_prompt() if self.pane.loaded is loaded else loaded.tokenizer.encode(self.session.prompt)
        except ExplorerError as exc:
            return self._fail(str(exc))
        params = self.pane.current_params(int(self.pane.seed.value()))
        base = self.session.interventions.active()
        key = (tuple(ids), params, tuple(iv.key for iv in base))
        unsteered = self._unsteered[1] if self._unsteered[0] == key else None
        self._cancel = Cancel()
        self._running, self._again, self.error = True, False, None
        kind, layer, alpha = self.source.currentIndex(), self.layer.value(), float(self.alpha.value())
        self.status.setText(f"Generating (seed {params.seed})\u2026")
        background.run(steered_pair, loaded, ids, params, base, kind, layer, alpha, args, unsteered, self._cancel,
                       on_done=lambda result: self._done(key, result),
                       on_error=lambda failure: self._fail(failure.message), on_finished=self._finished)
        return True

    def _done(self, key: Any, result: SteeringResult) -> None:
        if self._again or self._closed:  # stopped for newer settings: the next run shows them
            return
        self.result, self._unsteered = result, (key, result.unsteered)
        self.unsteered_text.setPlainText(result.unsteered.text)
        self.steered_text.setPlainText(result.steered.text)
        self.steered_title.setText(f"<b>steered</b>: {result.alpha:+g} \u00d7 {result.source} entering block "
                                   f"{result.layer}")
        self.status.setText(f"Same prompt, controls and seed ({result.seed}): only the steer differs.")
        self.finished.emit(result)

    def _fail(self, message: str) -> bool:
        if self._closed:
            return False
        self.error = message
        self.status.setText(message)
        if not self._running:
            self.finished.emit(None)
        return False

    def _finished(self) -> None:
        self._running = False
        if self._closed:
            return
        if self.error is not None:
            self.finished.emit(None)
        if self._again:
            self.run()

    def shutdown(self) -> None:
        self._closed = True
        self._alpha_timer.stop()
        self._again = False
        self._cancel.set()

