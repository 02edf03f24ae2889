"""Expert-level attribution patching in the Experts panel: a corrupted prompt beside the window's (clean) one,
and one linear estimate per MoE layer x expert of how much of the clean-minus-corrupted logit difference
patching that expert's outputs would restore (``core/interventions/expert_attribution.py``: one forward and
one backward pass, on a worker through ``session.background``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
from PySide6.QtWidgets import QHBoxLayout, QLineEdit, QPushButton, QVBoxLayout, QWidget

from explorer.core.display.tokens import vocab_quoted
from explorer.core.trace import Trace
from explorer.ui.session import background
from explorer.ui.widgets.heatmap import Heatmap
from explorer.ui.widgets.steady_label import SteadyLabel

if TYPE_CHECKING:
    from explorer.core.interventions.expert_attribution import ExpertAttribution
    from explorer.core.model import Transformer

HINT = ("Type a corrupted prompt with as many tokens as the clean one (the window's prompt), then Estimate: "
        "each cell estimates how much of the clean-minus-corrupted difference in the target's logit comes back "
        "when that expert's outputs are patched from the clean run (1 = all of it; a linear estimate).")


def run_estimate(model: Transformer, clean: list[int], corrupt: list[int], target: int) -> ExpertAttribution:
    from explorer.core.interventions.expert_attribution import expert_attribution

    return expert_attribution(model, clean, corrupt, target)


class ExpertPatching(QWidget):
    """``context()`` gives (the clean trace, the model, the tokenizer) or None; ``select_layer(layer)`` is
    called for a clicked cell."""

    def __init__(self, context: Callable[[], tuple[Trace, Transformer, Any] | None],
                 select_layer: Callable[[int], None], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.context = context
        self.result: Any = None
        self._runs = background.Newest()
        self._task: Any = None
        column = QVBoxLayout(self)
        column.setContentsMargins(0, 0, 0, 0)
        row = QHBoxLayout()
        self.corrupt_edit = QLineEdit()
        self.corrupt_edit.setPlaceholderText("corrupted prompt (same number of tokens)")
        self.target_edit = QLineEdit()
        self.target_edit.setPlaceholderText("target (empty: top prediction)")
        self.target_edit.setMaximumWidth(170)
        self.run_button = QPushButton("Estimate")
        self.run_button.setToolTip("One forward and one backward pass over both prompts (attribution patching)")
        self.run_button.clicked.connect(self.start)
        row.addWidget(self.corrupt_edit, 3)
        row.addWidget(self.target_edit, 1)
        row.addWidget(self.run_button)
        column.addLayout(row)
        self.status = SteadyLabel(HINT)
        column.addWidget(self.status)
        self.map = Heatmap(colormap="CET-D1", symmetric=True, title="experts: share restored (estimate)")
        self.map.plot.setLabel("bottom", "expert")
        self.map.cell_clicked.connect(lambda r, _c: self._clicked(r, select_layer))
        column.addWidget(self.map, 1)

    def start(self) -> None:
        got = self.context()
        if got is None:
            self.status.setText("No model to run: open a model with experts first.")
            return
        trace, model, tokenizer = got
        if trace.interventions:
            self.status.setText("Patching starts from the clean run: switch the interventions off first.")
            return
        clean = [int(i) for i in trace.token_ids]
        try:
            corrupt = list(tokenizer.encode(self.corrupt_edit.text()))
            if len(corrupt) != len(clean):
                raise ValueError(f"the corrupted prompt has {len(corrupt)} tokens, the clean one {len(clean)}: "
                                 "patching needs the same number")
            text = self.target_edit.text()
            target = int(np.argmax(trace["logits"][-1])) if not text else self._one(tokenizer, text)
        except ValueError as exc:
            self.status.setText(str(exc)[:1].upper() + str(exc)[1:] + ".")
            return
        self._tokenizer, self._target = tokenizer, target
        self.run_button.setEnabled(False)
        self.status.setText("Estimating every expert of every MoE layer\u2026")
        self._task = background.run(run_estimate, model, clean, corrupt, target, newest=self._runs,
                                    on_done=self._done, on_error=lambda f: self.status.setText(f.message),
                                    on_finished=lambda: self.run_button.setEnabled(True))

    @staticmethod
    def _one(tokenizer: Any, text: str) -> int:
        ids = tokenizer.encode(text)
        if len(ids) != 1:
            raise ValueError(f"the target {text!r} is {len(ids)} tokens, not one")
        return int(ids[0])

    def _done(self, result: Any) -> None:
        self.result = result
        matrix, rows, cols = self.data()
        self.map.set_data(matrix, rows, cols, levels=(-1.0, 1.0), value_name="share restored (estimate)")
        best = np.unravel_index(np.argmax(np.abs(result.estimates)), result.estimates.shape)
        from explorer.core.interventions.patching import gap_warning

        warning = gap_warning(result.clean_metric, result.corrupt_metric)
        self.status.setText(
            (f"\u26a0 Careful: {warning}. " if warning else "") +
            f"Logit of {vocab_quoted(self._tokenizer, self._target)}: clean {result.clean_metric:.3f}, corrupted "
            f"{result.corrupt_metric:.3f}. Largest estimate: expert {result.layers[best[0]]}:{best[1]} "
            f"({result.estimates[best]:+.3f}), in {result.seconds:.2f} s. Estimates are linear: check one with an "
            "exact run before trusting it.")

    def _clicked(self, row: int, select_layer: Callable[[int], None]) -> None:
        if self.result is not None and 0 <= row < len(self.result.layers):
            select_layer(self.result.layers[row])

    def layer_of_row(self, row: int) -> int | None:
        return self.result.layers[row] if self.result is not None and 0 <= row < len(self.result.layers) else None

    def clear(self, why: str = "") -> None:
        self._runs.drop()
        self.result = None
        self.run_button.setEnabled(True)
        self.map.set_data(np.zeros((0, 0), np.float32))
        self.status.setText((why + " " if why else "") + HINT)

    def data(self) -> tuple[np.ndarray, list[str], list[str]]:
        r = self.result
        if r is None:
            return np.zeros((0, 0)), [], []
        return (np.asarray(r.estimates), [f"L{layer}" for layer in r.layers],
                [f"#{e}" for e in range(r.estimates.shape[1])])
