"""Activation patching: a corrupted prompt beside the clean one, and where the difference lives.

The clean prompt is the window's (this panel's trace); type a corrupted prompt with the same
number of tokens, the target token (empty: the clean run's top prediction at the last position)
and optionally a distractor. Run fills two grids as the worker computes them
(``core/interventions/patching.py``): the residual stream at every layer boundary and position,
and every head. 1 = patching that activation from the clean run into the corrupted one restores
the whole difference of the target's logit (minus the distractor's), 0 = nothing.

Click a cell: the window runs the corrupted prompt with that one patch (an intervention in the
strip), so every panel shows the patched run and "What changed" compares it with the corrupted one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from PySide6.QtCore import Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QLineEdit, QProgressBar, QPushButton, QSplitter, QWidget
from superqt.utils import create_worker

from explorer.core.cancel import Cancel
from explorer.core.display.labels import token_labels
from explorer.core.display.tokens import quoted, vocab_quoted
from explorer.core.trace import Trace
from explorer.ui.interventions.menu import install_targets
from explorer.ui.interventions.targets import Target, head_cells, resid_cells
from explorer.ui.panels.base import Panel, PanelSnapshot, PanelView
from explorer.ui.session.selection import Selection
from explorer.ui.widgets.heatmap import Heatmap
from explorer.ui.session.workers import error_message

if TYPE_CHECKING:
    from explorer.core.model import Transformer
    from explorer.ui.session.session import Session


def run_patching(model: Transformer, clean: list[int], corrupt: list[int], target: int, distractor: int | None,
                 cancel: Cancel):
    """The worker's generator: ``patching_steps``'s updates, then its result."""
    from explorer.core.interventions.patching import patching_steps

    return (yield from patching_steps(model, clean, corrupt, target, distractor, batch_size=16, cancel=cancel))


MODEL_CHANGED = "A new model: the previous model's patching results were cleared."
STALE_PROMPT = ("The prompt changed: these grids are for the clean prompt {clean} against {corrupt}. "
                "Run patching again for the current prompt.")


@dataclass(frozen=True)
class PatchingView(PanelView):
    """The trace's ids when it is the clean prompt's own run (None for a run with interventions:
    an inspected patch keeps the clean prompt it was run for)."""

    clean_ids: tuple[int, ...] | None = None


class PatchingPanel(Panel):
    title = "Activation patching"
    explanation = "patching"
    run_prompt = Signal(str)  # the session runs this prompt (the corrupted one, to inspect a patch)

    def __init__(self, selection: Selection, parent: QWidget | None = None) -> None:
        super().__init__(selection, parent)
        self.result: Any = None
        self._worker: Any = None
        self._cancel = Cancel()
        self._clean_ids: list[int] = []
        self._corrupt_text = ""
        self._run = 0  # which run the worker's signals belong to
        self._run_clean_ids: list[int] = []  # the clean prompt the grids were computed for
        self._run_clean_text = ""
        self._done_text = ""
        self._cleared = ""  # why the grids are empty, until the next run
        row = QHBoxLayout()
        self.corrupt_edit = QLineEdit()
        self.corrupt_edit.setPlaceholderText("corrupted prompt (same number of tokens as the clean one)")
        self.corrupt_edit.textChanged.connect(self._check_lengths)
        self.target_edit = QLineEdit()
        self.target_edit.setPlaceholderText("target (empty: top prediction)")
        self.distractor_edit = QLineEdit()
        self.distractor_edit.setPlaceholderText("distractor (optional)")
        self.run_button = QPushButton("Run patching")
        self.run_button.clicked.connect(self.start)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setEnabled(False)
        self.cancel_button.clicked.connect(lambda: self._cancel.set())  # the current run's event
        self.progress = QProgressBar()
        self.progress.setMaximumWidth(160)
        for widget, stretch in ((self.corrupt_edit, 4), (self.target_edit, 1), (self.distractor_edit, 1),
                                (self.run_button, 0), (self.cancel_button, 0), (self.progress, 0)):
            row.addWidget(widget, stretch)
        self.body.addLayout(row)
        self.status = QLabel("Type a corrupted prompt, then Run patching.")
        self.status.setWordWrap(True)
        self.body.addWidget(self.status)
        self.resid_map = Heatmap(colormap="CET-D1", symmetric=True, title="residual stream: share restored")
        self.head_map = Heatmap(colormap="CET-D1", symmetric=True, title="heads: share restored")
        self.resid_map.cell_clicked.connect(lambda r, c: self.inspect(("resid", r, c)))
        self.head_map.cell_clicked.connect(lambda r, c: self.inspect(("head", r, c)))
        splitter = QSplitter()
        splitter.addWidget(self.resid_map)
        splitter.addWidget(self.head_map)
        splitter.setStretchFactor(0, 3)
        self.body.addWidget(splitter, 1)
        self.add_exportable("activation patching, residual stream", self.resid_map, lambda: self._grid_data("resid"))
        self.add_exportable("activation patching, heads", self.head_map, lambda: self._grid_data("head"))
        install_targets(self)  # right-click: switch that head or cell off (a click runs its patch)

    def intervention_targets(self) -> list[Target]:
        return [resid_cells(self.resid_map), head_cells(self.head_map)]

    # --- the panel contract ----------------------------------------------------------------------

    def attach(self, session: Session) -> None:
        super().attach(session)
        self.run_prompt.connect(session.set_prompt)

    def prepare(self, trace: Trace, snapshot: PanelSnapshot) -> PatchingView:
        clean = None if trace.interventions else tuple(int(i) for i in trace.token_ids)
        return PatchingView(trace, clean)

    def draw(self, view: PatchingView) -> None:
        if view.clean_ids is not None:  # the clean prompt: the window's own run (an inspected patch keeps it)
            self._clean_ids = list(view.clean_ids)
        self._check_lengths()
        if self.result is not None:  # the grids stay, but say which prompt they are for
            stale = self._clean_ids != self._run_clean_ids
            self.status.setText(STALE_PROMPT.format(clean=quoted(self._run_clean_text, 40), corrupt=quoted(self._corrupt_text, 40))
                                if stale else self._done_text)

    def tokenizer_changed(self) -> None:
        """Another model: a running patching stops and the grids, computed by the old one, are cleared."""
        had = self.result is not None or self._worker is not None or hasattr(self, "_heads")
        self._cancel.set()
        self._run += 1  # the old worker's updates and result are dropped
        self._worker, self.result, self._clean_ids = None, None, []
        for name in ("_resid", "_heads", "_labels"):
            self.__dict__.pop(name, None)
        for grid in (self.resid_map, self.head_map):
            grid.set_data(np.zeros((0, 0), np.float32))
        self.cancel_button.setEnabled(False)
        self.progress.setValue(0)
        self.run_button.setEnabled(True)  # the next trace checks the lengths again (_check_lengths)
        self._cleared = MODEL_CHANGED + " " if had else ""
        self.status.setText(self._cleared + "Type a corrupted prompt, then Run patching.")

    # --- running ---------------------------------------------------------------------------------
    def _token(self, text: str, what: str) -> int:
        ids = self.tokenizer.encode(text)
        if len(ids) != 1:
            raise ValueError(f"the {what} {text!r} is {len(ids)} tokens, not one")
        return ids[0]

    def _check_lengths(self) -> None:
        text = self.corrupt_edit.text()
        if not text or self.tokenizer is None or not self._clean_ids:
            return
        n = len(self.tokenizer.encode(text))
        same = n == len(self._clean_ids)
        self.run_button.setEnabled(same and self._worker is None)
        if not same:
            self.status.setText(f"The corrupted prompt has {n} tokens, the clean one {len(self._clean_ids)}: "
                                "patching needs the same number.")
        elif self._worker is None and self.result is None:
            self.status.setText(f"{self._cleared}{n} tokens each. Run patching.")

    def start(self) -> None:
        if self.trace is None or self._worker is not None or self.trace._model is None:
            return
        if self.trace.interventions:
            self.status.setText("Patching starts from the clean run: switch the interventions off first.")
            return
        try:
            corrupt = self.tokenizer.encode(self.corrupt_edit.text())
            last = len(self._clean_ids) - 1
            target = self._token(self.target_edit.text(), "target") if self.target_edit.text() else None
            distractor = self._token(self.distractor_edit.text(), "distractor") if self.distractor_edit.text() else None
        except ValueError as exc:
            self.status.setText(str(exc))
            return
        if target is None:  # the clean run's own top prediction (this trace is the clean run)
            target = int(np.argmax(self.trace["logits"][last]))
        self._corrupt_text = self.corrupt_edit.text()
        self._target, self._distractor = target, distractor
        L, H, n = self.trace.config.n_layers, self.trace.config.n_heads, len(self._clean_ids)
        self._resid = np.full((L + 1, n), np.nan)
        self._heads = np.full((L, H), np.nan)
        self.result = None
        self._labels = token_labels(self.trace.tokens)
        self._draw()
        self._cancel = Cancel()
        worker = create_worker(run_patching, self.trace._model, list(self._clean_ids), corrupt, target, distractor,
                               self._cancel, _start_thread=False, _ignore_errors=True)
        self._run, self._cleared = self._run + 1, ""
        run = self._run  # a newer run or another model drops what this one still sends
        self._run_clean_ids = list(self._clean_ids)
        self._run_clean_text = self.tokenizer.decode(self._clean_ids)
        worker.yielded.connect(lambda update: self._on_update(update) if run == self._run else None)
        worker.returned.connect(lambda result: self._on_result(result) if run == self._run else None)
        worker.errored.connect(lambda exc: self.status.setText(error_message(exc)) if run == self._run else None)
        worker.finished.connect(lambda: self._on_finished() if run == self._run else None)
        self._worker = worker
        self.run_button.setEnabled(False)
        self.cancel_button.setEnabled(True)
        self.progress.setValue(0)
        self.status.setText("Patching…")
        worker.start()

    def _on_update(self, update: Any) -> None:
        for (kind, layer, index), value in zip(update.cells, update.values):
            (self._resid if kind == "resid" else self._heads)[layer, index] = value
        self.progress.setMaximum(update.total)
        self.progress.setValue(update.done)
        self._draw()

    def _on_result(self, result: Any) -> None:
        self.result = result
        word = "Cancelled after" if result.cancelled else "Done:"
        target = vocab_quoted(self.tokenizer, self._target)
        against = f" minus {vocab_quoted(self.tokenizer, self._distractor)}" if self._distractor is not None else ""
        self._done_text = (
            f"{word} {result.runs} patched runs in {result.batches} batches, {result.skipped} cells left out (the "
            f"patch changes no number: exactly 0), {result.seconds:.2f} s. Logit of {target}{against}: clean "
            f"{result.clean_metric:.3f}, corrupted {result.corrupt_metric:.3f}. Click a cell to run that patch.")
        from explorer.core.interventions.patching import gap_warning

        warning = gap_warning(result.clean_metric, result.corrupt_metric)
        if warning is not None:  # first, where it is read: the grid's colours mislead at this gap
            self._done_text = f"⚠ Careful: {warning}. " + self._done_text
        self.status.setText(self._done_text)

    def _on_finished(self) -> None:
        self._worker = None
        self.cancel_button.setEnabled(False)
        self._check_lengths()

    def _draw(self) -> None:
        L = self._heads.shape[0]
        self.resid_map.set_data(self._resid, [f"L{layer}" for layer in range(L)] + ["final"], self._labels,
                                levels=(-1.0, 1.0), value_name="share restored")
        self.head_map.set_data(self._heads, [f"L{layer}" for layer in range(L)],
                               [f"H{h}" for h in range(self._heads.shape[1])], levels=(-1.0, 1.0),
                               value_name="share restored")

    # --- inspecting one patch --------------------------------------------------------------------
    def inspect(self, cell: tuple[str, int, int]) -> None:
        """Run the corrupted prompt with this one cell patched from the clean run (the window's trace)."""
        if self.result is None or self.result.clean is None or self.interventions is None:
            return
        from explorer.core.interventions.patching import patch_for

        kind, layer, index = cell
        if kind == "resid" and index > self.result.position:
            return
        self.run_prompt.emit(self._corrupt_text)
        self.interventions.set(patch_for(cell, self.result.clean, self.trace.config.n_layers))

    def _grid_data(self, kind: str) -> tuple[np.ndarray, list[str], list[str]]:
        if not hasattr(self, "_heads"):
            return np.zeros((0, 0)), [], []
        L = self._heads.shape[0]
        if kind == "resid":
            return self._resid, [f"L{layer}" for layer in range(L)] + ["final"], list(self._labels)
        return self._heads, [f"L{layer}" for layer in range(L)], [f"H{h}" for h in range(self._heads.shape[1])]
