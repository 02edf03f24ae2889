"""The panel contract.

A panel is a QWidget that shows one aspect of a ``Trace``. It gets the trace through
``set_trace`` and the shared ``Selection`` at construction; it draws with pyqtgraph and never
runs the model. Each plot it draws is registered with ``add_exportable`` so that right-click
export, "export all plots" and the CLI's ``export --plots`` find it.

Adding a panel: a pure function in ``explorer/core`` with a headless test, a module here with a
``Panel`` subclass, one line in ``explorer/ui/panels/__init__.py``'s ``PANELS``, one pytest-qt test.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from PySide6.QtWidgets import QVBoxLayout, QWidget

from explorer.core.trace import Trace
from explorer.ui.selection import Selection


@dataclass
class Exportable:
    """One plot of a panel: what to render (a pyqtgraph item or widget) and the data behind it.

    ``data`` returns ``(matrix_or_vector, row_labels, column_labels)``; labels may be None.
    """

    name: str
    item: Any
    data: Callable[[], tuple[np.ndarray, list[str] | None, list[str] | None]]


class Panel(QWidget):
    title: ClassVar[str] = ""
    explanation: ClassVar[str] = ""  # stem of resources/explanations/<name>.md

    def __init__(self, selection: Selection, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.selection = selection
        self.trace: Trace | None = None
        self._exportables: list[Exportable] = []
        self.body = QVBoxLayout(self)
        self.body.setContentsMargins(4, 4, 4, 4)
        selection.changed.connect(self._on_selection_changed)

    # --- what subclasses implement ---------------------------------------------------------
    def show_trace(self, trace: Trace) -> None:
        """Draw everything for a new trace (called on the GUI thread)."""
        raise NotImplementedError

    def selection_changed(self, what: str) -> None:
        """Redraw what depends on the selection; ``what`` is "layer", "head" or "token"."""

    def needed_keys(self, trace: Trace) -> list[str]:
        """Trace keys this panel reads that may be derived on demand: the worker computes them
        before the trace reaches the GUI thread, so drawing never waits on the model."""
        return []

    # --- shared machinery --------------------------------------------------------------------
    def set_trace(self, trace: Trace) -> None:
        self.trace = trace
        self.show_trace(trace)

    def _on_selection_changed(self, what: str) -> None:
        if self.trace is not None:
            self.selection_changed(what)

    def add_exportable(self, name: str, item: Any,
                       data: Callable[[], tuple[np.ndarray, list[str] | None, list[str] | None]]) -> Exportable:
        exportable = Exportable(name, item, data)
        self._exportables.append(exportable)
        return exportable

    def exportables(self) -> list[Exportable]:
        return list(self._exportables)
