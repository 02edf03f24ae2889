"""Help ▸ Verify this model: the loaded checkpoint against transformers' eager model from the same files.

Runs ``core.verify.verify_checkpoint`` (or ``verify_gguf`` through it) on a worker, with a progress line
(the step it reached: our model, the reference, its forward pass, ours layer by layer) and Cancel; then
a table, one row per layer: the largest difference of the residual stream (with its lowest cosine over the
positions) and of the attention patterns, with the tolerance each passed (or FAIL), then the logits and the token ids, and the verdict (within
tolerance, or the first layer that failed). Without transformers, or where the reference cannot read
the checkpoint (the app's own format, nanoGPT, a GGUF transformers does not read), one line says so.
It never downloads: transformers reads the same local files (``local_files_only``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QLabel,
    QProgressBar,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from explorer.core.cancel import Cancel
from explorer.ui.session import background

if TYPE_CHECKING:
    from explorer.core.verify import VerifyReport
    from explorer.ui.session.session import Session

STAGES = ("opening our model", "opening transformers' model", "running transformers' model", "running ours")
HEADERS = ["row", "residual max |diff|", "tolerance", "residual cosine (lowest)", "pattern max |diff|", "tolerance",
           "passed"]


class _Relay(QObject):
    """Carries the worker's progress to the GUI thread (a queued signal)."""

    step = Signal(int)


def report_rows(report: VerifyReport) -> list[tuple[str, ...]]:
    """The table: one row per layer (the embeddings first), then the logits and the token ids."""
    from explorer.core.verify import LOGITS_TOL, PATTERN_TOL, format_cosine

    rows = []
    for row in report.layers:
        pattern = "—" if row.pattern is None else f"{row.pattern:.2e}"
        cosine = "—" if row.cosine is None else format_cosine(row.cosine)
        rows.append((row.label, f"{row.resid:.2e}", f"{row.resid_tol:.1e}", cosine, pattern,
                     "" if row.pattern is None else f"{PATTERN_TOL:.0e}", "yes" if row.passed else "FAIL"))
    if report.logits is not None:
        rows.append(("logits", f"{report.logits:.2e}", f"{LOGITS_TOL:.0e}", "", "", "",
                     "yes" if report.logits_ok else "FAIL"))
    ids = {None: "not compared", True: "equal", False: "DIFFER"}[report.prompt_ids_equal]
    rows.append(("token ids", f"prompt ids {ids}", "", "", f"top tokens: {report.next_ids_differ} differ", "",
                 "yes" if report.ids_ok else "FAIL"))
    runtime = report.runtime  # the file run in llama.cpp (quantised activations): shown beside, never a failure
    for i, (same, delta, kl) in enumerate(zip(runtime.top1_same, runtime.max_delta, runtime.kl)) if runtime else ():
        rows.append((f"llama.cpp pos {i}", f"max |Δ logit| {delta:.2e}", "", f"KL {kl:.2e}", "",
                     "top-1 same" if same else "top-1 differs"))
    return rows


class VerifyDialog(QDialog):
    """The check of one checkpoint (see the module docstring). ``finished_check(object)``: the report, or the
    one-line message when it was refused or failed (a str)."""

    finished_check = Signal(object)

    def __init__(self, source: str, prompt: str | None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Verify this model against transformers")
        self.source, self.prompt = source, prompt
        self.cancel = Cancel()
        self.report: VerifyReport | None = None
        self.message = ""
        self.running = False
        layout = QVBoxLayout(self)
        self.status = QLabel(f"Checking {source} against transformers' eager model from the same files…")
        self.status.setWordWrap(True)
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.status)
        self.progress = QProgressBar(self)
        self.progress.setRange(0, len(STAGES))
        layout.addWidget(self.progress)
        self.table = QTableWidget(0, len(HEADERS), self)
        self.table.setHorizontalHeaderLabels(HEADERS)
        self.table.verticalHeader().setVisible(False)
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.table.horizontalHeader().setStretchLastSection(True)
        layout.addWidget(self.table, 1)
        self.verdict = QLabel("")
        self.verdict.setWordWrap(True)
        self.verdict.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.verdict)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel, self)
        self.buttons.rejected.connect(self.reject)
        layout.addWidget(self.buttons)
        self.resize(760, 460)
        self._relay = _Relay(self)
        self._relay.step.connect(self._on_step)

    def start(self) -> None:
        """Run the check on a worker."""
        self.running = True
        calls = [0]
        relay, cancel = self._relay, self.cancel

        def asked() -> bool:  # the check asks between its steps (and ours at every layer): progress
            calls[0] += 1
            try:
                relay.step.emit(calls[0])
            except RuntimeError:  # the dialog was closed: stop
                return True
            return cancel.is_set()

        def work() -> Any:
            from explorer.core.verify import verify_checkpoint

            return verify_checkpoint(self.source, self.prompt, cancel=asked)

        background.run(work, on_done=self._done, on_error=lambda failure: self._failed(failure.message),
                       on_cancelled=lambda: self._failed("Cancelled."))

    def _on_step(self, calls: int) -> None:
        stage = min(calls, len(STAGES) - 1)
        self.progress.setValue(stage)
        if self.running:
            self.status.setText(f"Checking {self.source}: {STAGES[stage]}…")

    def _done(self, report: VerifyReport) -> None:
        from explorer.core.provenance import remember_verify

        self.running = False
        self.report = report
        remember_verify(self.source, report)  # the model's exports from now on name this check
        self.progress.setValue(len(STAGES))
        rows = report_rows(report)
        self.table.setRowCount(len(rows))
        for r, row in enumerate(rows):
            for c, text in enumerate(row):
                item = QTableWidgetItem(text)
                if text == "FAIL":
                    item.setForeground(Qt.GlobalColor.red)
                self.table.setItem(r, c, item)
        self.table.resizeColumnsToContents()
        notes = "".join(f"\nNote: {n}" for n in report.notes)
        self.status.setText(f"{report.checkpoint}: against transformers' {report.reference} "
                            f"on {len(report.ids)} tokens{notes}")
        self.verdict.setText(("Within tolerance." if report.passed else report.verdict()) + "  " + report.last_line())
        self._finish()
        self.finished_check.emit(report)

    def _failed(self, message: str) -> None:
        self.running = False
        self.message = message
        self.status.setText(self.message)
        self.progress.setValue(0)
        self._finish()
        self.finished_check.emit(self.message)

    def _finish(self) -> None:
        self.buttons.setStandardButtons(QDialogButtonBox.StandardButton.Close)

    def reject(self) -> None:
        if self.running:
            self.cancel.set()  # the check stops at its next step
            self.status.setText("Cancelling…")
        super().reject()


def verify_model(session: Session, parent: QWidget) -> VerifyDialog | None:
    """Help ▸ Verify this model: the dialog for the session's checkpoint, started (None: no model, said)."""
    source = session.source
    if session.loaded is None or source is None:
        from PySide6.QtWidgets import QMessageBox

        QMessageBox.information(parent, "Verify this model", "Load a model first: there is nothing to verify.")
        return None
    dialog = VerifyDialog(str(source), session.prompt or None, parent)
    dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    dialog.show()
    dialog.start()
    return dialog
