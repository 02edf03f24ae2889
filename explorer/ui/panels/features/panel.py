"""Features: what an SAE (a sparse autoencoder trained on one layer's activations) reads in the trace.

Shown only while an SAE is open (File ▸ Open SAE…; ``session/features.py``). For the chosen SAE: the
selected token's strongest features (one row encoded at once), a tokens x features view of the
features strongest anywhere in the prompt (the rows on screen first, then every row, on the
progressive lane), the chosen feature along the prompt, what it writes (its decoder direction
through the final norm and the un-embedding), and the reconstruction error at each token. A right
click on a feature switches it off, scales or clamps it (``interventions/features.py``). Beside the prompt's
views, a tab shows the chosen feature over the open corpus run, when the run kept this SAE's features: its
top examples and its histogram, the selected token's value marked (``panels/evidence.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPoint, Qt
from PySide6.QtWidgets import (QComboBox, QHBoxLayout, QInputDialog, QLabel, QMenu, QSplitter, QTabWidget,
                               QVBoxLayout, QWidget)

from explorer.core.display.labels import token_labels
from explorer.core.display.tokens import quoted, vocab_quoted
from explorer.core.trace import Trace
from explorer.ui.interventions.features import FeatureComponent
from explorer.ui.interventions.menu import install_targets
from explorer.ui.interventions.targets import Point, Target
from explorer.ui.panels.base import Panel, clamp_token
from explorer.ui.panels.evidence import CorpusEvidence
from explorer.ui.panels.features.views import (
    FeaturesSnapshot,
    FeaturesView,
    Whole,
    along,
    first_row,
    visible_rows,
    whole,
    window_of,
    writes,
    writes_is_cheap,
)
from explorer.ui.panels.neurons.widgets import BAR_NEGATIVE, BAR_POSITIVE, cell, table
from explorer.ui.session.selection import Selection
from explorer.ui.widgets.heatmap import Heatmap
from explorer.ui.widgets.plots import fixed_plot
from explorer.ui.widgets.role_bands import trace_bands

if TYPE_CHECKING:
    from explorer.ui.session.session import Session

INTRO = ("An SAE rewrites one layer's activation as a sum of a few learned <i>features</i>, each a direction "
         "that fires on some pattern in the text. Below: which features fire on the selected token, where the "
         "strongest ones fire along the prompt, and what a feature pushes the next token towards. Right-click "
         "a feature to switch it off.")
ERROR_NOTE = ("<b>A poor SAE is not the model.</b> Each bar is how much of the activation at that token the "
              "features do not explain (|x \u2212 reconstruction| / |x|); where it is large, read the features "
              "with care.")
COMPUTING = "computing\u2026"


class FeaturesPanel(Panel):
    def __init__(self, selection: Selection, parent: QWidget | None = None) -> None:
        super().__init__(selection, parent)
        self.state: Any = None                       # the session's FeatureState
        self.feature: int | None = None              # the chosen feature of the shown SAE
        self._view: FeaturesView | None = None
        self._whole: Whole | None = None
        self._writes: Any = None
        self.clamp_value: Any = None                 # tests replace the clamp dialog
        top = QHBoxLayout()
        top.addWidget(QLabel("SAE:"))
        self.sae_combo = QComboBox()
        self.sae_combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        top.addWidget(self.sae_combo)
        self.sae_info = QLabel()
        self.sae_info.setWordWrap(True)
        top.addWidget(self.sae_info, 1)
        self.body.addLayout(top)
        intro = QLabel(INTRO)
        intro.setWordWrap(True)
        self.body.addWidget(intro)

        self.top_title = QLabel()
        self.top_table = table(["feature", "activation"], (0,))
        self.top_table.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.writes_title = QLabel()
        self.writes_title.setWordWrap(True)
        self.writes_table = table(["promotes", "logit", "suppresses", "logit"], (0, 2))
        left = QWidget()
        column = QVBoxLayout(left)
        column.setContentsMargins(0, 0, 0, 0)
        for w, stretch in ((self.top_title, 0), (self.top_table, 3), (self.writes_title, 0), (self.writes_table, 2)):
            column.addWidget(w, stretch)

        self.map = Heatmap(colormap="viridis", title="strongest features")
        self.along_plot = fixed_plot()
        self.along_bars = pg.BarGraphItem(x=[], height=[], width=0.8, brush=BAR_POSITIVE, pen=None)
        self.along_plot.addItem(self.along_bars)
        self.along_plot.setLabel("bottom", "position")
        self.error_plot = fixed_plot()
        self.error_bars = pg.BarGraphItem(x=[], height=[], width=0.8, brush=BAR_NEGATIVE, pen=None)
        self.error_plot.addItem(self.error_bars)
        self.error_plot.setLabel("bottom", "position")
        self.error_note = QLabel(ERROR_NOTE)
        self.error_note.setWordWrap(True)
        right = QWidget()
        side = QVBoxLayout(right)
        side.setContentsMargins(0, 0, 0, 0)
        side.addWidget(self.map, 3)
        plots = QHBoxLayout()
        plots.addWidget(self.along_plot, 1)
        plots.addWidget(self.error_plot, 1)
        side.addLayout(plots, 2)
        side.addWidget(self.error_note)
        self.evidence = CorpusEvidence("features", "feature")  # the chosen feature over the open corpus run
        self.tabs = QTabWidget()
        self.tabs.setDocumentMode(True)
        self.tabs.addTab(right, "This prompt")
        self.tabs.addTab(self.evidence, "Over the corpus")
        splitter = QSplitter(Qt.Orientation.Horizontal)
        splitter.addWidget(left)
        splitter.addWidget(self.tabs)
        splitter.setStretchFactor(0, 1)
        splitter.setStretchFactor(1, 3)
        splitter.setSizes([300, 900])
        self.body.addWidget(splitter, 1)

        self.add_exportable("features_top", self.top_table, self._top_data)
        self.add_exportable("features_map", self.map,
                            lambda: (self.map.matrix, self.map.row_labels, self.map.col_labels))
        self.add_exportable("feature_along", self.along_plot, self._along_data)
        self.add_exportable("feature_writes", self.writes_table, self._writes_data)
        self.add_exportable("reconstruction_error", self.error_plot, self._error_data)
        self.evidence.register_exports(self)
        self.sae_combo.currentIndexChanged.connect(lambda _i: self._sae_chosen())
        self.top_table.cellClicked.connect(lambda row, _c: self.choose_feature(int(self._view.ids[row])))
        self.top_table.customContextMenuRequested.connect(self._top_menu)
        self.map.cell_clicked.connect(self._map_clicked)
        install_targets(self)

    # --- the session's SAEs --------------------------------------------------------------------------
    def attach(self, session: Session) -> None:
        super().attach(session)
        self.state = session.features
        self.state.changed.connect(self._saes_changed)
        self.evidence.attach(session)
        session.corpus.changed.connect(self._draw_corpus)
        self._saes_changed()

    @classmethod
    def applies_to(cls, config: Any) -> bool:
        return True

    def available(self) -> bool:
        """Whether there is anything to show: an SAE is open (the window hides the dock otherwise)."""
        return self.state is not None and bool(self.state.saes)

    @property
    def sae(self) -> Any:
        saes = self.state.saes if self.state is not None else []
        i = self.sae_combo.currentIndex()
        return saes[i] if 0 <= i < len(saes) else None

    def _saes_changed(self) -> None:
        saes = self.state.saes
        current = self.sae
        self.sae_combo.blockSignals(True)
        self.sae_combo.clear()
        self.sae_combo.addItems([f"{s.hook.hook_name} ({s.d_sae:,} features)" for s in saes])
        self.sae_combo.setCurrentIndex(saes.index(current) if current in saes else len(saes) - 1)
        self.sae_combo.blockSignals(False)
        self._sae_chosen()

    def _sae_chosen(self) -> None:
        sae = self.sae
        self.feature = None
        if sae is not None:
            kind = "transcoder" if sae.is_transcoder else "SAE"
            text = f"{sae.architecture} {kind} from {sae.path.name}, reads {sae.hook.key}"
            self.sae_info.setText(text + "".join(f" \u2014 \u26a0 {w}" for w in sae.warnings))
        else:
            self.sae_info.setText("Open an SAE: File \u25b8 Open SAE\u2026")
        if self.trace is not None:
            self.show_trace(self.trace)

    # --- drawing ----------------------------------------------------------------------------------
    def snapshot(self) -> FeaturesSnapshot:
        return self._snapshot(FeaturesSnapshot, sae=self.sae)

    def prepare(self, trace: Trace, snapshot: Any) -> FeaturesView:
        super().prepare(trace, snapshot)
        from explorer.ui.panels.features.views import prepare_view

        return prepare_view(trace, snapshot, clamp_token(snapshot.token, trace.n_tokens))

    def draw(self, view: FeaturesView) -> None:
        if view.sae is not self.sae:                 # prepared for another SAE (the list changed meanwhile)
            view = self.prepare(view.trace, self.snapshot())
        self._view, self._whole, self._writes = view, None, None
        trace, sae = view.trace, view.sae
        self._draw_top()
        if sae is None:
            self.map.set_data(np.zeros((0, 0), np.float32))
            return
        if self.feature is None or self.feature >= sae.d_sae:
            self.feature = int(view.ids[0]) if len(view.ids) else 0
        self.state.select(sae, self.feature)
        self._draw_corpus()
        self.map.plot.setTitle(f"strongest features: {COMPUTING}")
        self.along_plot.setTitle(f"feature {self.feature} along the prompt: {COMPUTING}")
        self.error_plot.setTitle(f"reconstruction error per token: {COMPUTING}")
        rows = window_of(view.token, trace.n_tokens)
        self.later(("visible",), lambda check: visible_rows(trace, sae, rows, check), self._show_whole)
        self.later(("whole",), lambda check: whole(trace, sae, check), self._show_whole, priority=1)
        self._draw_writes()

    def selection_changed(self, what: str) -> None:
        if what != "token" or self._view is None or self._view.sae is None:
            return
        view, token = self._view, self.selected_token
        ids, acts = first_row(view.trace, view.sae, token)
        self._view = FeaturesView(view.trace, view.sae, token, ids, acts)
        self._draw_top()
        self.refresh_marks()
        if self.evidence.unit is not None:
            self.evidence.mark(self._value_now())

    def _draw_top(self) -> None:
        view = self._view
        self.top_table.setRowCount(0)
        if view is None or view.sae is None:
            self.top_title.setText("")
            return
        label = token_labels(view.trace.tokens)[view.token]
        self.top_title.setText(f"<b>Features firing on {quoted(label)}</b> (position {view.token}): "
                               f"{len(view.ids)} of {view.sae.d_sae:,} shown")
        self.top_table.setRowCount(len(view.ids))
        for r, (f, a) in enumerate(zip(view.ids, view.acts)):
            self.top_table.setItem(r, 0, cell(f"feature {int(f)}"))
            self.top_table.setItem(r, 1, cell(f"{float(a):.4g}", True))

    def _show_whole(self, result: Whole) -> None:
        if self._whole is not None and self._whole.acts is not None and result.acts is None:
            return                                   # every row is already shown
        self._whole = result
        labels = token_labels(self._view.trace.tokens)
        rows = [labels[i] for i in result.rows]
        cols = [str(int(f)) for f in result.ids]
        self.map.set_data(result.columns if result.ids.size else np.zeros((len(rows), 0), np.float32),
                          rows, cols, value_name="activation")
        self.map.set_token_bands(rows=trace_bands(self._view.trace, result.rows.start, result.rows.stop))
        part = f" (tokens {result.rows.start}\u2013{result.rows.stop - 1}; the rest: {COMPUTING})" if result.acts is None \
            else " over the prompt (tokens \u00d7 features)"
        self.map.plot.setTitle(f"strongest features{part}")
        self._draw_along()
        self._draw_error()
        self.refresh_marks()
        if self.evidence.unit is not None:
            self.evidence.mark(self._value_now())

    def _draw_along(self) -> None:
        values = along(self._whole.acts if self._whole is not None else None, self.feature or 0)
        if values is None:
            return
        self.along_bars.setOpts(x=np.arange(len(values)), height=values)
        self.along_plot.setTitle(f"feature {self.feature} along the prompt (peak {values.max():.3g})")

    def _draw_error(self) -> None:
        error = self._whole.error if self._whole is not None else None
        if error is None:
            return
        self.error_bars.setOpts(x=np.arange(len(error.relative)), height=error.relative)
        self.error_plot.setTitle(f"what the SAE misses, per token ({error.unexplained:.1%} of the variance)")

    def _draw_writes(self) -> None:
        view, f = self._view, self.feature
        if view is None or view.sae is None or f is None:
            return
        vocab = self.tokenizer.vocab_size if self.tokenizer is not None else None
        self.writes_title.setText(f"<b>What feature {f} writes</b>: {COMPUTING}")
        self.writes_table.setRowCount(0)
        trace, sae = view.trace, view.sae
        self.now_or_later(("writes",), writes_is_cheap(trace), lambda check: writes(trace, sae, f, vocab),
                          lambda result: self._show_writes(f, result) if self.feature == f else None)

    def _show_writes(self, feature: int, result: Any) -> None:
        self._writes = result
        if result is None:
            self.writes_title.setText("What a feature writes needs the loaded model's weights.")
            return
        self.writes_title.setText(f"<b>What feature {feature} writes</b>: its decoder direction through the "
                                  "final norm's scale and the un-embedding (direct path only: a hint, not a proof)")
        up, up_v, down, down_v = result
        self.writes_table.setRowCount(len(up))
        for r in range(len(up)):
            for c, text in enumerate((vocab_quoted(self.tokenizer, int(up[r])), f"{up_v[r]:+.3g}",
                                      vocab_quoted(self.tokenizer, int(down[r])), f"{down_v[r]:+.3g}")):
                self.writes_table.setItem(r, c, cell(text, c % 2 == 1))

    # --- choosing and editing features --------------------------------------------------------------
    def choose_feature(self, feature: int) -> None:
        if self.sae is None or feature == self.feature:
            return
        self.feature = int(feature)
        self.state.select(self.sae, self.feature)
        self._draw_along()
        self._draw_writes()
        self._draw_corpus()

    # --- the open corpus run (explorer/ui/session/corpus.py) -----------------------------------------
    def _value_now(self) -> float | None:
        """The chosen feature's value at the selected token (None until every row is computed)."""
        acts = self._whole.acts if self._whole is not None else None
        token = self.selected_token
        return None if acts is None or self.feature is None or token >= acts.shape[0] else float(acts[token, self.feature])

    def _draw_corpus(self) -> None:
        sae, corpus = self.sae, self.session.corpus if self.session is not None else None
        if sae is None or self.feature is None or corpus is None or corpus.run is None:
            self.evidence.clear()
            return
        matches = corpus.sae_matches(sae)
        if matches is None:
            self.evidence.clear(f"Checking that the open corpus run kept this SAE's features {COMPUTING}")
            return
        self.evidence.show_unit(sae.hook.block, self.feature, self._value_now(), kept=matches)

    def _map_clicked(self, row: int, col: int) -> None:
        if self._whole is None or col >= len(self._whole.ids):
            return
        self.choose_feature(int(self._whole.ids[col]))
        self.selection.set_token(self._whole.rows[row])

    def component(self, feature: int) -> FeatureComponent:
        return FeatureComponent(self.sae, int(feature), self._ask_clamp, self.sae_info.setText)

    def _ask_clamp(self) -> float | None:
        if self.clamp_value is not None:
            return self.clamp_value()
        peak = float(self._view.acts[0]) if self._view is not None and len(self._view.acts) else 1.0
        value, ok = QInputDialog.getDouble(self, "Clamp feature", "Set the feature's activation, at every "
                                           "position, to:", peak, -1e6, 1e6, 3)
        return value if ok else None

    def _top_menu(self, point: QPoint) -> None:
        row = self.top_table.rowAt(point.y())
        if self._view is None or row < 0 or self.interventions is None:
            return
        menu = QMenu(self)
        menu.addActions(self.component(int(self._view.ids[row])).actions(self.interventions, menu))
        menu.popup(self.top_table.viewport().mapToGlobal(point))
        self._menu = menu

    def intervention_targets(self) -> list[Target]:
        def at(scene_pos: Any) -> FeatureComponent | None:
            found = self.map.cell_at(scene_pos)
            if found is None or self._whole is None or found[1] >= len(self._whole.ids) or self.sae is None:
                return None
            return self.component(int(self._whole.ids[found[1]]))

        def marks(iv: Any) -> list[Point]:
            whole = self._whole
            if iv.target != "feature" or whole is None or iv.value is not self.sae:
                return []
            row = min(max(self.selected_token - whole.rows.start, 0), len(whole.rows) - 1)
            return [(c + 0.5, row + 0.5) for c in np.flatnonzero(whole.ids == iv.index)]

        return [Target(self.map.plot, at, marks)]

    # --- exported data ----------------------------------------------------------------------------
    def _top_data(self) -> tuple[np.ndarray, list[str], list[str]]:
        view = self._view
        if view is None:
            return np.zeros((0, 1), np.float32), [], ["activation"]
        return view.acts[:, None], [f"feature {int(f)}" for f in view.ids], ["activation"]

    def _along_data(self) -> tuple[np.ndarray, list[str], list[str]]:
        values = along(self._whole.acts if self._whole is not None else None, self.feature or 0)
        labels = token_labels(self.trace.tokens) if self.trace is not None else []
        return (np.zeros((0, 1), np.float32), [], []) if values is None else (values[:, None], labels,
                                                                                [f"feature {self.feature}"])

    def _writes_data(self) -> tuple[np.ndarray, list[str], list[str]]:
        if self._writes is None:
            return np.zeros((0, 1), np.float32), [], []
        up, up_v, down, down_v = self._writes
        return (np.concatenate([up_v, down_v])[:, None],
                [vocab_quoted(self.tokenizer, int(i)) for i in [*up, *down]], ["logit per unit"])

    def _error_data(self) -> tuple[np.ndarray, list[str], list[str]]:
        error = self._whole.error if self._whole is not None else None
        if error is None or self.trace is None:
            return np.zeros((0, 2), np.float32), [], []
        return (np.stack([error.error_norm, error.relative], 1), token_labels(self.trace.tokens),
                ["|x - x_hat|", "relative"])
