"""Activation patching: a corrupted prompt beside the clean one, and where the difference lives.

The clean prompt is the window's (this panel's trace); type a corrupted prompt with the same
number of tokens, the target token (empty: the clean run's top prediction at the last position)
and optionally a distractor. Run fills two grids as the worker computes them
(``core/interventions/patching.py``): the residual stream at every layer boundary and position,
and every head. 1 = patching that activation from the clean run into the corrupted one restores
the whole difference of the target's logit (minus the distractor's), 0 = nothing.

Two modes. "Estimate (attribution)", the default for large grids, fills both grids at once with
attribution patching's linear estimates (one forward and one backward pass:
``core/interventions/attribution.py``); each estimate carries a ring and its tooltip says "estimate".
"Exact grid" runs one patched run per cell; before it starts the estimate's measured forward gives
its time, shown in the status line. "Exact for top-k" patches the k largest estimates exactly.

Click a cell: an estimate is replaced by its exact value; an exact cell is run in the window (the
corrupted prompt with that one patch, an intervention in the strip), so every panel shows the patched
run and "What changed" compares it with the corrupted one.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from PySide6.QtCore import Signal
from PySide6.QtWidgets import (QComboBox, QHBoxLayout, QLabel, QLineEdit, QProgressBar, QPushButton, QSpinBox,
                               QSplitter, QWidget)

from explorer.core.analysis.layer_maps import attention_head, describe_mixer
from explorer.core.cancel import Cancel
from explorer.core.display.labels import token_labels
from explorer.core.display.tokens import quoted, vocab_quoted
from explorer.core.trace import Trace
from explorer.ui.interventions.menu import install_targets
from explorer.ui.interventions.targets import Target, head_cells, resid_cells
from explorer.ui.panels.base import Panel, PanelSnapshot, PanelView
from explorer.ui.panels.interventions.estimate_marks import LEGEND, MarkedHeatmap, duration as _duration
from explorer.ui.panels.interventions.patching_worker import ESTIMATE, EXACT, run_patching
from explorer.ui.session.selection import Selection
from explorer.ui.session import background
from explorer.ui.widgets.ranked_list import RankedList
from explorer.ui.widgets.role_bands import trace_bands

if TYPE_CHECKING:
    from explorer.ui.session.session import Session


MODES = {ESTIMATE: "Estimate (attribution)", EXACT: "Exact grid"}
LARGE_GRID = 400  # cells (both grids): from this size on, the estimate is the default mode
FIELD_MIN_PX = 220  # the corrupted prompt's field at its narrowest
TOKEN_FIELD_MIN_PX = 110  # the target's and the distractor's


MODEL_CHANGED = "A new model: the previous model's patching results were cleared."
STALE_PROMPT = ("The prompt changed: these grids are for the clean prompt {clean} against {corrupt}. "
                "Run patching again for the current prompt.")


@dataclass(frozen=True)
class PatchingView(PanelView):
    """The trace's ids when it is the clean prompt's own run (None for a run with interventions:
    an inspected patch keeps the clean prompt it was run for)."""

    clean_ids: tuple[int, ...] | None = None


class PatchingPanel(Panel):
    run_prompt = Signal(str)  # the session runs this prompt (the corrupted one, to inspect a patch)
    run_ids = Signal(str, object, object)  # ... or these exact ids (a conversation's, with its ChatSpans)

    def __init__(self, selection: Selection, parent: QWidget | None = None) -> None:
        super().__init__(selection, parent)
        self.result: Any = None  # the last result: an estimate (AttributionResult) or exact (PatchingResult)
        self.estimate: Any = None  # the last attribution estimate
        self._worker: Any = None
        self._cancel = Cancel()
        self._clean_ids: list[int] = []
        self._corrupt_text = ""
        self._runs = background.Newest()  # a newer run or another model drops what the worker still sends
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
        self.mode_box = QComboBox()
        for key, text in MODES.items():
            self.mode_box.addItem(text, key)
        self.mode_box.setToolTip("Estimate: every cell from one forward and one backward pass (attribution "
                                 "patching, linear). Exact: one patched run per cell.")
        self._mode_chosen = False  # the user picked a mode: the grid's size no longer picks it
        self.mode_box.activated.connect(lambda _: setattr(self, "_mode_chosen", True))
        self.run_button = QPushButton("Run patching")
        self.run_button.clicked.connect(self.start)
        self.top_k = QSpinBox()
        self.top_k.setRange(1, 999)
        self.top_k.setValue(10)
        self.top_k.setPrefix("k = ")
        self.top_button = QPushButton("Exact for top-k")
        self.top_button.setToolTip("Patch exactly the k cells whose estimates are largest in size")
        self.top_button.setEnabled(False)
        self.top_button.clicked.connect(self.exact_top_k)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setEnabled(False)
        self.cancel_button.clicked.connect(lambda: self._cancel.set())  # the current run's event
        self.progress = QProgressBar()
        self.progress.setMaximumWidth(160)
        # what the user types on a row of its own, the buttons below it: on one row at 1280x800 the three
        # fields were 30-75 px wide and what was typed could not be read (issue 42)
        self.corrupt_edit.setMinimumWidth(FIELD_MIN_PX)
        for edit in (self.target_edit, self.distractor_edit):
            edit.setMinimumWidth(TOKEN_FIELD_MIN_PX)
        for widget, stretch in ((QLabel("corrupted"), 0), (self.corrupt_edit, 4), (QLabel("target"), 0),
                                (self.target_edit, 1), (QLabel("minus"), 0), (self.distractor_edit, 1)):
            row.addWidget(widget, stretch)
        self.body.addLayout(row)
        buttons = QHBoxLayout()
        for widget in (self.mode_box, self.run_button, self.top_k, self.top_button, self.cancel_button, self.progress):
            buttons.addWidget(widget)
        buttons.addStretch(1)
        self.body.addLayout(buttons)
        self.status = QLabel("Type a corrupted prompt, then Run patching.")
        self.status.setWordWrap(True)
        self.body.addWidget(self.status)
        self.legend = QLabel(LEGEND)
        self.legend.setWordWrap(True)
        self.legend.setVisible(False)  # while a grid holds estimates
        self.body.addWidget(self.legend)
        self.resid_map = MarkedHeatmap(colormap="CET-D1", symmetric=True, title="residual stream:<br>share restored")
        self.head_map = MarkedHeatmap(colormap="CET-D1", symmetric=True, title="heads:<br>share restored")
        self.head_map.masked_text = lambda layer, head: (  # a hybrid's recurrent layer, a block without attention
            f"no attention head here ({describe_mixer(self.trace.config, layer)}): patch its residual stream instead")
        self.resid_map.cell_clicked.connect(lambda r, c: self.clicked(("resid", r, c)))
        self.head_map.cell_clicked.connect(lambda r, c: self.clicked(("head", r, c)))
        self.ranked = RankedList("largest shares restored (≈: estimate; click: exact value, or run the patch)", "share")
        self.ranked.chosen.connect(self.clicked)
        splitter = QSplitter()
        for widget, stretch in ((self.resid_map, 3), (self.head_map, 2), (self.ranked, 1)):
            splitter.addWidget(widget)
            splitter.setStretchFactor(splitter.count() - 1, stretch)
        self.body.addWidget(splitter, 1)
        self.add_exportable("activation patching, residual stream", self.resid_map, lambda: self._grid_data("resid"))
        self.add_exportable("activation patching, heads", self.head_map, lambda: self._grid_data("head"))
        install_targets(self)  # right-click: switch that head or cell off (a click runs its patch)

    def intervention_targets(self) -> list[Target]:
        return [resid_cells(self.resid_map), head_cells(self.head_map, is_head=self._is_head)]

    def _is_head(self, layer: int, head: int) -> bool:
        """Whether a cell of the heads grid is an attention head (a hybrid's recurrent layers have none)."""
        return self.trace is not None and attention_head(self.trace.config, layer, head)

    # --- the panel contract ----------------------------------------------------------------------

    def attach(self, session: Session) -> None:
        super().attach(session)
        self.run_prompt.connect(session.set_prompt)
        self.run_ids.connect(session.trace_ids)

    def set_corrupted(self, label: str, ids: list[int], chat: Any = None) -> None:
        """The corrupted run is exactly ``ids`` (a conversation the template wrote, ``chat`` its spans), named
        ``label`` in the field (typing in it makes the field's text the corrupted prompt again)."""
        self._pinned = (label, [int(i) for i in ids], chat)
        self.corrupt_edit.setText(label)
        self._check_lengths()

    def _corrupt_for(self, text: str) -> list[int]:
        pinned = getattr(self, "_pinned", None)
        return list(pinned[1]) if pinned is not None and pinned[0] == text else self.tokenizer.encode(text)

    def prepare(self, trace: Trace, snapshot: PanelSnapshot) -> PatchingView:
        clean = None if trace.interventions else tuple(int(i) for i in trace.token_ids)
        return PatchingView(trace, clean)

    def draw(self, view: PatchingView) -> None:
        if view.clean_ids is not None:  # the clean prompt: the window's own run (an inspected patch keeps it)
            self._clean_ids = list(view.clean_ids)
        if not self._mode_chosen and self._clean_ids:  # large grids start with the estimate
            cfg = view.trace.config
            heads = sum(cfg.layer(layer).n_heads for layer in range(cfg.n_layers) if cfg.layer(layer).is_attention)
            cells = (cfg.n_layers + 1) * len(self._clean_ids) + heads
            self.mode_box.setCurrentIndex(list(MODES).index(ESTIMATE if cells >= LARGE_GRID else EXACT))
        self._check_lengths()
        if self.result is not None:  # the grids stay, but say which prompt they are for
            stale = self._clean_ids != self._run_clean_ids
            self.status.setText(STALE_PROMPT.format(clean=quoted(self._run_clean_text, 40), corrupt=quoted(self._corrupt_text, 40))
                                if stale else self._done_text)

    def tokenizer_changed(self) -> None:
        """Another model: a running patching stops and the grids, computed by the old one, are cleared."""
        had = self.result is not None or self._worker is not None or hasattr(self, "_heads")
        self._cancel.set()
        self._runs.drop()  # the old worker's updates and result are dropped
        self._worker, self.result, self._clean_ids = None, None, []
        self.estimate = None
        for name in ("_resid", "_heads", "_labels", "_estimated", "_no_head"):
            self.__dict__.pop(name, None)
        self.top_button.setEnabled(False)
        self.legend.setVisible(False)
        for grid in (self.resid_map, self.head_map):
            grid.set_data(np.zeros((0, 0), np.float32))
        self.ranked.clear_items()
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
        n = len(self._corrupt_for(text))
        same = n == len(self._clean_ids)
        self.run_button.setEnabled(same and self._worker is None)
        if not same:
            self.status.setText(f"The corrupted prompt has {n} tokens, the clean one {len(self._clean_ids)}: "
                                "patching needs the same number.")
        elif self._worker is None and self.result is None:
            self.status.setText(f"{self._cleared}{n} tokens each. Run patching.")

    def start(self) -> None:
        """Run the grids in the chosen mode (the estimate first either way: it times the exact grid)."""
        if self.trace is None or self._worker is not None or self.trace._model is None:
            return
        if self.trace.interventions:
            self.status.setText("Patching starts from the clean run: switch the interventions off first.")
            return
        if not self._clean_ids or len(self._clean_ids) != self.trace.n_tokens:  # a new model: its run not here yet
            self.status.setText("The clean prompt has not run on this model yet: Run patching once it has.")
            return
        try:
            corrupt = self._corrupt_for(self.corrupt_edit.text())
            if len(corrupt) != len(self._clean_ids):  # an empty box too: no grid of 0 columns
                raise ValueError(f"the corrupted prompt has {len(corrupt)} tokens, the clean one "
                                 f"{len(self._clean_ids)}: patching needs the same number")
            last = len(self._clean_ids) - 1
            target = self._token(self.target_edit.text(), "target") if self.target_edit.text() else None
            distractor = self._token(self.distractor_edit.text(), "distractor") if self.distractor_edit.text() else None
        except ValueError as exc:
            self.status.setText(str(exc))
            return
        if target is None:  # the clean run's own top prediction (this trace is the clean run)
            target = int(np.argmax(self.trace["logits"][last]))
        self._corrupt_text = self.corrupt_edit.text()
        self._target, self._distractor, self._corrupt_ids = target, distractor, corrupt
        L, H, n = self.trace.config.n_layers, self.trace.config.n_heads, len(self._clean_ids)
        self._resid = np.full((L + 1, n), np.nan)
        self._heads = np.full((L, H), np.nan)
        self._estimated = (np.zeros((L + 1, n), bool), np.zeros((L, H), bool))
        # a hybrid's recurrent layers have no heads to patch: their cells hatched, never run nor estimated
        self._no_head = np.array([[not attention_head(self.trace.config, layer, h) for h in range(H)]
                                  for layer in range(L)])
        self.result, self.estimate = None, None
        self._labels = token_labels(self.trace.tokens)
        self._draw()
        self._run_clean_ids = list(self._clean_ids)
        self._run_clean_text = self.tokenizer.decode(self._clean_ids)
        self._launch(self.mode_box.currentData(), None, "Estimating every cell…"
                     if self.mode_box.currentData() == ESTIMATE else "Estimating, then timing the exact grid…")

    def exact_top_k(self) -> None:
        """Patch exactly the k cells whose estimates are largest in size (and not exact yet)."""
        if not self._can_refine():
            return
        pos = self.result.position
        ranked = [(abs(v), ("resid", r, c)) for (r, c), v in np.ndenumerate(self._resid)
                  if c <= pos and self._estimated[0][r, c]]
        ranked += [(abs(v), ("head", r, c)) for (r, c), v in np.ndenumerate(self._heads) if self._estimated[1][r, c]]
        ranked.sort(key=lambda item: -item[0])
        cells = [cell for _, cell in ranked[:self.top_k.value()]]
        if cells:
            self._launch(EXACT, cells, f"Exact patches of the {len(cells)} largest estimates…")

    def clicked(self, cell: tuple[str, int, int]) -> None:
        """An estimated cell: its exact patch replaces the estimate. An exact cell: run it in the window."""
        kind, layer, index = cell
        if kind == "head" and hasattr(self, "_no_head") and self._no_head[layer, index]:
            return  # no head there (a recurrent layer): nothing to patch
        estimated = hasattr(self, "_estimated") and self._estimated[kind == "head"][layer, index]
        if estimated and self._can_refine():
            self._launch(EXACT, [cell], "Exact patch of one cell…")
        elif not estimated:
            self.inspect(cell)

    def _can_refine(self) -> bool:
        """Whether exact patches can be added to the grids shown: they are this clean prompt's, no run is on."""
        return (self._worker is None and self.result is not None and self.trace is not None
                and self.trace._model is not None and self._clean_ids == self._run_clean_ids)

    def _launch(self, mode: str, cells: list | None, status: str) -> None:
        self._cancel = Cancel()
        self._cleared = ""
        self._eta_from: tuple[float, int] | None = None
        run = self._runs.next()
        self._worker = background.run(
            run_patching, self.trace._model, list(self._run_clean_ids), self._corrupt_ids, self._target,
            self._distractor, self._cancel, mode, cells, newest=self._runs, request_id=run, on_yield=self._on_update,
            on_done=self._on_result, on_error=lambda failure: self.status.setText(failure.message),
            on_finished=lambda: self._on_finished() if self._runs.current(run) else None, start=False)
        self.run_button.setEnabled(False)
        self.top_button.setEnabled(False)
        self.cancel_button.setEnabled(True)
        self.progress.setValue(0)
        self.status.setText(status)
        self._worker.start()

    def _on_update(self, update: Any) -> None:
        if hasattr(update, "exact_runs"):  # attribution patching's estimate of every cell
            self._on_estimate(update)
            return
        for (kind, layer, index), value in zip(update.cells, update.values):
            (self._resid if kind == "resid" else self._heads)[layer, index] = value
            self._estimated[kind == "head"][layer, index] = False
        self.progress.setMaximum(update.total)
        self.progress.setValue(update.done)
        self._tell_time_left(update)
        self._draw()

    def _tell_time_left(self, update: Any) -> None:
        """During an exact grid, the time left from the batches run so far (the estimate before it started
        assumed one forward's time per prompt's worth of positions; batching often does better)."""
        now = time.perf_counter()
        if self._eta_from is None:  # the first update: the baselines and the cells left out; timing starts
            self._eta_from = (now, update.done)
            return
        started, first = self._eta_from
        if update.done > first and update.done < update.total:
            left = (now - started) / (update.done - first) * (update.total - update.done)
            self.status.setText(f"Exact patches: {update.done} of {update.total} cells, about {_duration(left)} "
                                f"left. {self._exact_text}")

    def _on_estimate(self, estimate: Any) -> None:
        self.estimate = self.result = estimate
        pos, L = estimate.position, estimate.heads.shape[0]
        resid_known = ~np.isnan(self._resid) & ~self._estimated[0]  # exact values already shown stay
        self._resid = np.where(resid_known, self._resid, estimate.resid)
        self._heads = np.where(~np.isnan(self._heads) & ~self._estimated[1], self._heads, estimate.heads)
        self._estimated[0][:, :pos + 1] = ~resid_known[:, :pos + 1]
        self._estimated[0][L, :pos] = False  # exactly 0: the final stream before pos feeds no logit
        self._estimated[1][:] = ~self._no_head
        seconds = estimate.exact_seconds()
        self.mode_box.setItemText(list(MODES).index(EXACT), f"{MODES[EXACT]} (about {_duration(seconds)})")
        self._exact_text = (f"The exact full grid: {estimate.exact_runs} patched runs, about {_duration(seconds)} "
                            f"(from one measured forward, {estimate.forward_seconds * 1000:.0f} ms; batched runs "
                            "are often faster).")
        self.status.setText(f"Estimated every cell in {estimate.seconds:.2f} s. {self._exact_text}"
                            + (" Running it now…" if self.mode_box.currentData() == EXACT else ""))
        self._draw()

    def _on_result(self, result: Any) -> None:
        self.result = result
        target = vocab_quoted(self.tokenizer, self._target)
        against = f" minus {vocab_quoted(self.tokenizer, self._distractor)}" if self._distractor is not None else ""
        logits = (f"Logit of {target}{against}: clean {result.clean_metric:.3f}, corrupted "
                  f"{result.corrupt_metric:.3f}.")
        left = self._estimates_left()
        if hasattr(result, "exact_runs"):
            self._done_text = (f"Estimates (attribution patching) of every cell in {result.seconds:.2f} s, ringed. "
                               f"{logits} {self._exact_text} Choose {MODES[EXACT]} to run it, Exact for top-k, or "
                               "click a cell for its exact value.")
        else:
            word = "Cancelled after" if result.cancelled else "Done:"
            self._done_text = (
                f"{word} {result.runs} patched runs in {result.batches} batches, {result.skipped} cells left out (the "
                f"patch changes no number: exactly 0), {result.seconds:.2f} s. {logits} "
                + (f"{left} cells are still estimates (ringed). " if left else "") + "Click a cell to run that patch.")
        from explorer.core.interventions.patching import gap_warning

        warning = gap_warning(result.clean_metric, result.corrupt_metric)
        if warning is not None:  # first, where it is read: the grid's colours mislead at this gap
            self._done_text = f"⚠ Careful: {warning}. " + self._done_text
        self.status.setText(self._done_text)

    def _on_finished(self) -> None:
        self._worker = None
        self.cancel_button.setEnabled(False)
        self.top_button.setEnabled(self.result is not None and self._estimates_left() > 0)
        self._check_lengths()

    def _draw(self) -> None:
        L = self._heads.shape[0]
        self.resid_map.set_data(self._resid, [f"L{layer}" for layer in range(L)] + ["final"], self._labels,
                                levels=(-1.0, 1.0), value_name="share restored")
        self.resid_map.set_token_bands(cols=trace_bands(self.trace) if self.trace is not None else ())
        self.head_map.set_data(self._heads, [f"L{layer}" for layer in range(L)],
                               [f"H{h}" for h in range(self._heads.shape[1])], levels=(-1.0, 1.0),
                               masked=self._no_head, value_name="share restored")
        self.resid_map.set_estimated(self._estimated[0])
        self.head_map.set_estimated(self._estimated[1])
        self.legend.setVisible(self._estimates_left() > 0)
        cells = [("resid", r, c) for r, c in np.ndindex(*self._resid.shape)] + \
            [("head", r, c) for r, c in np.ndindex(*self._heads.shape)]
        names = [f"stream {'final' if r == L else f'L{r}'} @ {self._labels[c]}" if k == "resid" else f"head L{r}H{c}"
                 for k, r, c in cells]
        self.ranked.show_items(names, np.concatenate([self._resid.ravel(), self._heads.ravel()]), cells,
                               np.concatenate([self._estimated[0].ravel(), self._estimated[1].ravel()]))

    def _estimates_left(self) -> int:
        """How many cells shown are estimates (0 before any run)."""
        estimated = getattr(self, "_estimated", None)
        return 0 if estimated is None else int(estimated[0].sum() + estimated[1].sum())

    # --- inspecting one patch --------------------------------------------------------------------
    def inspect(self, cell: tuple[str, int, int]) -> None:
        """Run the corrupted prompt with this one cell patched from the clean run (the window's trace)."""
        if self.result is None or self.result.clean is None or self.interventions is None:
            return
        from explorer.core.interventions.patching import patch_for

        kind, layer, index = cell
        if kind == "resid" and index > self.result.position:
            return
        pinned = getattr(self, "_pinned", None)
        if pinned is not None and pinned[0] == self._corrupt_text:
            self.run_ids.emit(self._corrupt_text, pinned[1], pinned[2])
        else:
            self.run_prompt.emit(self._corrupt_text)
        self.interventions.set(patch_for(cell, self.result.clean, self.trace.config.n_layers))

    def _grid_data(self, kind: str) -> tuple[np.ndarray, list[str], list[str]]:
        if not hasattr(self, "_heads"):
            return np.zeros((0, 0)), [], []
        L = self._heads.shape[0]
        if kind == "resid":
            return self._resid, [f"L{layer}" for layer in range(L)] + ["final"], list(self._labels)
        return self._heads, [f"L{layer}" for layer in range(L)], [f"H{h}" for h in range(self._heads.shape[1])]
