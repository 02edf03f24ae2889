"""The status bar: model, device, precision, parameters, prompt tokens, forward time, loading.

Nothing in it widens the window: the loading stage, the warning and the notices are cut with "…" at
the width there is (the whole text in their tooltips), and the model's name has a width cap. A long
path in the loading stage made the window wider than a 1280-pixel screen after opening a GGUF file.
"""

from __future__ import annotations

import html
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QFrame,
    QLabel,
    QProgressBar,
    QStatusBar,
    QToolButton,
    QWidget,
)

from explorer.ui.widgets.elided_label import ElidedLabel

NOTICE_MS = 8000
STAGE_MAX_PX = 420  # the loading stage's widest (a path is cut with "…"; the whole of it in the tooltip)
MODEL_MAX_PX = 260  # the model's name
NAME_CAP = 60  # characters of a model's name in the bar (read from a file; longer ones widened the window)


def human_count(n: int) -> str:
    for unit, size in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return str(n)


class StatusBar(QStatusBar):
    """Permanent fields on the right; ``notice`` shows a transient message on the left.

    While a model loads: its stage, a progress bar ("tensor i of N" once reading starts) and a Cancel
    button (``cancel_requested``). ``warning`` is a red line for numerical trouble in the trace shown.
    """

    FIELDS = ("model", "device", "dtype", "params", "tokens", "forward", "memory")
    cancel_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.warning = ElidedLabel("", self)
        self.warning.setObjectName("status-warning")
        self.warning.setStyleSheet("color: #c0392b; font-weight: bold;")
        self.warning.setVisible(False)
        self.stage = ElidedLabel("", self, max_width=STAGE_MAX_PX, min_width=80)
        self._notice = ""  # the whole of the message shown (drawn cut to the bar's width)
        self.progress = QProgressBar(self)
        self.progress.setRange(0, 0)  # indeterminate until the first tensor is read
        self.progress.setMaximumWidth(160)
        self.progress.setMaximumHeight(14)
        self.cancel = QToolButton(self)
        self.cancel.setText("Cancel")
        self.cancel.setToolTip("Stop loading; the model that is open stays open")
        self.cancel.clicked.connect(self.cancel_requested)
        self.addWidget(self.warning, 1)
        self.addPermanentWidget(self.stage)
        self.addPermanentWidget(self.progress)
        self.addPermanentWidget(self.cancel)
        self.fields: dict[str, QLabel] = {}
        for name in self.FIELDS:
            label = QLabel("", self)
            label.setObjectName(f"status-{name}")
            label.setFrameShape(QFrame.Shape.NoFrame)
            label.setContentsMargins(6, 0, 6, 0)
            self.fields[name] = label
            self.addPermanentWidget(label)
        self.fields["model"].setMaximumWidth(MODEL_MAX_PX)  # a long name is cut; the tooltip has the rest
        self.messageChanged.connect(self._message_changed)
        self.set_loading(None)

    def set_loading(self, stage: str | None) -> None:
        self.stage.setText(stage or "")
        self.stage.setVisible(bool(stage))
        self.progress.setVisible(stage is not None)
        self.cancel.setVisible(stage is not None)
        self.cancel.setEnabled(True)
        if stage is None:
            self.progress.setRange(0, 0)
            self.progress.setFormat("")

    def set_progress(self, done: int, total: int) -> None:
        """Tensor ``done`` of ``total`` is being read."""
        self.progress.setRange(0, max(total, 1))
        self.progress.setValue(done)
        self.progress.setFormat(f"tensor {done + 1} of {total}")
        self.progress.setTextVisible(True)

    def set_warning(self, text: str | None) -> None:
        self.warning.setText(f"⚠ {text}" if text else "")
        self.warning.setToolTip(text or "")
        self.warning.setVisible(bool(text))

    def show_model(self, info: dict[str, Any]) -> None:
        name = str(info["name"])  # capped in core (LoadedModel, the trace reader); the label is cut to MODEL_MAX_PX
        self.fields["model"].setText(f"<b>{html.escape(name if len(name) <= NAME_CAP else name[:NAME_CAP] + '…')}</b>")
        self.fields["model"].setToolTip(f"{name}\n{info['description']}\n{info['source']}\nvocabulary {info['vocabulary']}, "
                                        f"context {info['context_length']}"
                                        + (f"\n{info['notes']}" if info.get("notes") else ""))
        layers = str(info.get("layers") or "")  # a placed model: "layers 0–17 cuda:0, 18–31 cpu"
        self.fields["device"].setText(layers if layers.startswith("layers ") else str(info["device"]))
        stored = str(info.get("stored") or info["dtype"])  # what the weights are stored in: Q4_K, BF16, float32
        self.fields["dtype"].setText(str(info["dtype"]) if stored == info["dtype"] else f"{info['dtype']} · {stored}")
        self.fields["dtype"].setToolTip(f"the numbers shown were computed in {info['dtype']}; weights: "
                                        f"{info.get('weights') or info['dtype']}")
        self.fields["params"].setText(f"{human_count(int(info['parameters']))} parameters")
        self.fields["params"].setToolTip(f"{int(info['parameters']):,} parameters")

    def show_trace(self, n_tokens: int, forward_seconds: float, update_seconds: float | None = None) -> None:
        self.fields["tokens"].setText(f"{n_tokens} token{'s' if n_tokens != 1 else ''}")
        self.fields["forward"].setText(f"forward {forward_seconds * 1000:.1f} ms")
        if update_seconds is not None:
            self.fields["forward"].setToolTip(f"last forward pass {forward_seconds * 1000:.1f} ms; from the request "
                                              f"to every panel drawn {update_seconds * 1000:.0f} ms")

    def show_memory(self, line: str) -> None:
        """The memory budget's line: what traces keep of how much (View ▸ Memory budget… sets it)."""
        self.fields["memory"].setText(line)
        self.fields["memory"].setToolTip("Memory for traces and their cached views; cached values beyond it are "
                                         "dropped and recomputed when needed. View ▸ Memory budget… sets it.")

    def notice(self, text: str, ms: int = NOTICE_MS) -> None:
        self.showMessage(text, ms)

    def showMessage(self, text: str, timeout: int = 0) -> None:  # noqa: N802 - Qt's name
        """A transient message, on one line cut with "…" to the bar's free width (the whole of it in the
        bar's tooltip while it shows, and in ``currentMessage()``)."""
        one_line = " ".join(text.split())
        free = max(self.width() - sum(w.width() for w in self._permanent() if w.isVisible()) - 40, 120)
        shown = self.fontMetrics().elidedText(one_line, Qt.TextElideMode.ElideRight, free)
        self._notice = text
        super().showMessage(shown, timeout)
        self.setToolTip(text if shown != one_line else "")

    def currentMessage(self) -> str:  # noqa: N802 - Qt's name
        """The whole message shown now ("" when none); what is drawn may be cut with "…"."""
        return self._notice if super().currentMessage() else ""

    def _message_changed(self, message: str) -> None:
        if not message:  # the notice timed out or was cleared
            self._notice = ""
            self.setToolTip("")

    def _permanent(self) -> list[QWidget]:
        return [self.stage, self.progress, self.cancel, *self.fields.values()]
