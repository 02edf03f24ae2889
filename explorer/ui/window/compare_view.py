"""The comparison of two models on the same tokens, in its own dock (Models ▸ Compare with another model…).

What ``Session.compare`` computed for the shown trace: the residual streams' cosine and relative norm
difference at every boundary and position, each head's Jensen-Shannon divergence (layers x heads), the
next-token KL(A ‖ B) per position, where the two first diverge; and at the selected position the two
next-token distributions side by side and the logit lens of both (each of A's boundaries beside B's at
the same relative depth). Clicking a cell selects that layer / head / position, in both: the window's
selection is A's, and B's side of the tables follows it (its layer by relative depth). The view reads the
Session only. A click only moves the position marker: both distributions and lenses at the new position
are computed on a worker (kept per (result, position), so going back is immediate) and drawn when ready,
the tables greyed and saying "computing…" until then.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QDockWidget,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSizePolicy,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from explorer.core.analysis.residual import boundary_labels
from explorer.core.display.tokens import vocab_quoted
from explorer.ui.session import background
from explorer.ui.widgets.heatmap import Heatmap

if TYPE_CHECKING:
    from explorer.ui.session.compare import CompareResult
    from explorer.ui.session.session import Session

TOP = 8


def side_by_side(result: CompareResult, position: int, top: int = TOP) -> tuple[list[tuple], list[tuple]]:
    """On a worker: the top next-token candidates of A and B at ``position`` [(token, prob)], and the lens
    of both there [(boundary label, A's top token, its prob, B's boundary, B's top token, its prob)]."""
    from explorer.core.analysis.compare import lens_at, log_softmax

    rows = []
    for trace in (result.a, result.b):
        p = np.exp(log_softmax(np.asarray(trace["logits"][position])))
        order = np.argsort(-p, kind="stable")[:top]
        rows.append([(int(i), float(p[i])) for i in order])
    dists = [(a + b) for a, b in zip(rows[0], rows[1])]
    (ids_a, probs_a), (ids_b, probs_b) = lens_at(result.a, position), lens_at(result.b, position)
    labels_a, labels_b = boundary_labels(result.a.config.n_layers), boundary_labels(result.b.config.n_layers)
    lens = []
    for i, j in enumerate(result.comparison.layer_map):
        j = int(j)
        lens.append((labels_a[i], int(ids_a[i, 0]), float(probs_a[i, 0]), labels_b[j],
                     int(ids_b[j, 0]), float(probs_b[j, 0])))
    return dists, lens


def _table(headers: list[str]) -> QTableWidget:
    table = QTableWidget(0, len(headers))
    table.setHorizontalHeaderLabels(headers)
    table.verticalHeader().setVisible(False)
    table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
    return table


def _fill(table: QTableWidget, rows: list[tuple]) -> None:
    table.setRowCount(len(rows))
    for r, row in enumerate(rows):
        for c, value in enumerate(row):
            table.setItem(r, c, QTableWidgetItem(value if isinstance(value, str) else f"{value:.3f}"))
    table.resizeColumnsToContents()


class CompareView(QWidget):
    """The comparison views (see the module docstring)."""

    def __init__(self, session: Session, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.session = session
        self.result: CompareResult | None = None
        self.position = 0
        self._side_key: tuple | None = None    # the (result, position) asked for
        self._shown_key: tuple | None = None   # the (result, position) the tables show
        self._sides: dict[tuple, tuple] = {}   # (id(result), position) -> side_by_side, for the shown result
        layout = QVBoxLayout(self)
        top = QHBoxLayout()
        self.summary = QLabel("Models ▸ Compare with another model… opens a second model beside this one.")
        self.summary.setWordWrap(True)
        self.summary.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        top.addWidget(self.summary, 1)
        self.stop_button = QPushButton("Stop comparing")
        self.stop_button.clicked.connect(session.compare.close)
        top.addWidget(self.stop_button)
        layout.addLayout(top)
        grid = QGridLayout()
        self.cos = Heatmap(colormap="viridis", title="residual cosine")
        self.rel = Heatmap(colormap="magma", title="relative difference")
        self.js = Heatmap(colormap="magma", title="heads: pattern JS divergence")
        self.kl_plot = pg.PlotWidget(title="next-token KL(A‖B) per position")
        self.kl_plot.setMouseEnabled(x=False, y=False)
        self.kl_plot.hideButtons()
        self.kl_bars = pg.BarGraphItem(x=[], height=[], width=0.8, brush="#d62728")
        self.kl_plot.addItem(self.kl_bars)
        self.marker = pg.InfiniteLine(angle=90, pen=pg.mkPen("#1f77b4", width=2))
        self.kl_plot.addItem(self.marker)
        for i, widget in enumerate((self.cos, self.js, self.rel, self.kl_plot)):
            widget.setMinimumHeight(170)
            grid.addWidget(widget, i // 2, i % 2)
        layout.addLayout(grid, 3)
        self.side_status = QLabel("")
        layout.addWidget(self.side_status)
        tables = QHBoxLayout()
        self.dist = _table(["A's next token", "p", "B's next token", "p"])
        self.lens = _table(["A", "A's lens top", "p", "B", "B's lens top", "p"])
        tables.addWidget(self.dist)
        tables.addWidget(self.lens)
        layout.addLayout(tables, 2)
        self.cos.cell_clicked.connect(self._on_stream_cell)
        self.rel.cell_clicked.connect(self._on_stream_cell)
        self.js.cell_clicked.connect(lambda row, col: self.session.selection.set_layer_head(row, col))
        self.kl_plot.scene().sigMouseClicked.connect(self._on_kl_click)
        session.presenter.add_view("compare", self.show_result)  # drawn by the presenter (a comparison frame)
        session.compare.failed.connect(self._say)
        session.compare.loading.connect(lambda text: self._say(text) if text else None)
        session.compare.closed.connect(self.clear)
        session.selection.changed.connect(self._on_selection)

    # --- what is shown ---------------------------------------------------------------------------------
    @property
    def tables_position(self) -> int | None:
        """The position whose two distributions and lenses the tables show, for the shown result (None:
        none yet, or still computing another result's)."""
        key = self._shown_key
        return key[1] if key is not None and self.result is not None and key[0] == id(self.result) else None

    @property
    def asked_position(self) -> int | None:
        """The position the tables were last asked for (computed on a worker until ``tables_position``)."""
        key = self._side_key
        return key[1] if key is not None and self.result is not None and key[0] == id(self.result) else None

    def _say(self, text: str) -> None:
        self.summary.setText(text)
        self.summary.setToolTip(text)

    def clear(self) -> None:
        self.result = None
        self._sides.clear()
        self._side_key = self._shown_key = None
        self.side_status.setText("")
        self._say("Not comparing: Models ▸ Compare with another model… opens a second model beside this one.")
        for heatmap in (self.cos, self.rel, self.js):
            heatmap.set_data(np.zeros((0, 0)))
        self.kl_bars.setOpts(x=[], height=[])
        _fill(self.dist, [])
        _fill(self.lens, [])

    def show_result(self, result: CompareResult) -> None:
        self.result = c = result
        self._sides.clear()
        cmp, trace = c.comparison, c.a
        n = trace.n_tokens
        positions = [f"{p}:{trace.tokens[p]}" for p in range(n)]
        L = trace.config.n_layers
        boundaries = boundary_labels(L)
        finite_cos, finite_rel = cmp.resid_cos[np.isfinite(cmp.resid_cos)], cmp.resid_rel[np.isfinite(cmp.resid_rel)]
        low = min(0.0, float(finite_cos.min())) if finite_cos.size else 0.0  # NaN: different widths, no cosine
        self.cos.set_data(cmp.resid_cos, boundaries, positions, levels=(low, 1.0), value_name="cosine")
        self.rel.set_data(cmp.resid_rel, boundaries, positions,
                          levels=(0.0, max(1e-6, float(finite_rel.max())) if finite_rel.size else 1.0),
                          value_name="relative difference")
        heads = [f"H{h}" for h in range(cmp.head_js.shape[1])] if cmp.head_js.shape[1] > 1 else ["mean"]
        self.js.set_data(cmp.head_js, [f"L{i}" for i in range(L)], heads,
                         levels=(0.0, max(1e-6, float(cmp.head_js.max(initial=0.0)))), value_name="JS divergence")
        self.kl_bars.setOpts(x=np.arange(n), height=cmp.logit_kl, width=0.8)
        notes = " ".join(f"Note: {note}." for note in cmp.notes)
        self._say(f"{c.name_a} (A) against {c.name_b} (B) on {n} tokens: {cmp.summary()}. {notes} "
                  "Click a cell to select its layer, head or position in both.")
        self._on_selection("token")

    def _on_selection(self, what: str) -> None:
        c = self.result
        if c is None:
            return
        selection = self.session.selection
        n = c.a.n_tokens
        self.position = n - 1 if selection.token is None or not 0 <= selection.token < n else selection.token
        self.marker.setValue(self.position)
        key = (id(c), self.position)
        if key == self._side_key:
            return
        self._side_key = key
        position = self.position
        got = self._sides.get(key)
        if got is not None:
            self._show_side(c, position, got)
            return
        self.side_status.setText(f"position {position}: computing…")
        for table in (self.dist, self.lens):  # the last position's rows, greyed until the new ones come
            table.setEnabled(False)
        background.run(side_by_side, c, position, on_done=lambda got: self._show_side(c, position, got))

    def _show_side(self, c: CompareResult, position: int, got: tuple) -> None:
        if c is not self.result:
            return
        self._sides[(id(c), position)] = got
        if position != self.position:
            return
        self._shown_key = (id(c), position)
        for table in (self.dist, self.lens):
            table.setEnabled(True)
        self.side_status.setText(f"at position {position} ({c.a.tokens[position]!r}): each model's next token, "
                                 "and its lens at every layer")
        dists, lens = got
        tok = self.session.loaded.tokenizer if self.session.loaded is not None else None

        def name(i: int) -> str:
            return vocab_quoted(tok, i)

        _fill(self.dist, [(name(a), pa, name(b), pb) for a, pa, b, pb in dists])
        _fill(self.lens, [(la, name(a), pa, lb, name(b), pb) for la, a, pa, lb, b, pb in lens])
        kl = float(c.comparison.logit_kl[position])
        self.dist.setToolTip(f"at position {position}: KL(A‖B) = {kl:.4g}")

    # --- clicks ------------------------------------------------------------------------------------------
    def _on_stream_cell(self, row: int, col: int) -> None:
        c = self.result
        if c is None:
            return
        selection = self.session.selection
        selection.set_layer(min(row, max(c.a.config.n_layers - 1, 0)))
        selection.set_token(col)

    def _on_kl_click(self, event) -> None:
        c = self.result
        if c is None:
            return
        point = self.kl_plot.plotItem.vb.mapSceneToView(event.scenePos())
        p = int(round(point.x()))
        if 0 <= p < c.a.n_tokens:
            self.session.selection.set_token(p)


def add_compare_dock(window, session: Session) -> QDockWidget:
    """The comparison's dock (hidden until a comparison starts, shown again by the next)."""
    dock = QDockWidget("Compare two models", window)
    dock.setObjectName("dock-compare")
    view = CompareView(session, dock)
    dock.setWidget(view)
    window.addDockWidget(Qt.DockWidgetArea.BottomDockWidgetArea, dock)
    dock.hide()
    session.compare.loading.connect(lambda text: dock.show() if text else None)
    session.compare.ready.connect(lambda _r: dock.show())  # the view has drawn it (the presenter's comparison frame)
    dock.view = view
    return dock


def ask_and_compare(parent: QWidget, session: Session, directory: str) -> None:
    """Models ▸ Compare with another model…: pick its checkpoint, then compare."""
    from PySide6.QtWidgets import QFileDialog

    path, _ = QFileDialog.getOpenFileName(parent, "Compare with another model", directory,
                                          "Checkpoint files (config.json *.safetensors *.bin *.pt *.ckpt *.gguf)")
    if path:
        session.compare.open(path)
