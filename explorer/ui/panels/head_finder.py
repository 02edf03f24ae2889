"""The Head finder: every attention head ranked by a score over the open corpus run, beside its chance level.

Shown while a corpus run that kept head statistics is open (``session/corpus.py``). The table has one row per
head, ordered by the chosen score (``CorpusRun.head_ranking``: the one ranking rule, ``corpus.read.rank_heads``;
a click on a score's header sorts by it, a second click turns the order round), and every score in its own
column, each header with the score's chance level over the same windows (what a head spreading its attention
evenly would score). Selecting a row selects that head in the whole window (the shared selection), and the
selected head's top query/key pairs over the corpus are listed below: a click on one makes that context the
prompt, its query token selected.
"""

from __future__ import annotations

import html
import math
import sqlite3
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from PySide6.QtCore import QAbstractTableModel, QModelIndex, QPersistentModelIndex, Qt, QUrl
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import (QAbstractItemView, QCheckBox, QComboBox, QHBoxLayout, QHeaderView, QLabel, QSplitter,
                               QTableView, QTextBrowser, QVBoxLayout, QWidget)

from explorer.core.analysis.attention import STATISTIC_LABELS
from explorer.core.corpus.reading import CorpusError
from explorer.core.display.evidence import pair_line
from explorer.core.trace import Trace
from explorer.ui.panels.base import Panel, PanelSnapshot, PanelView
from explorer.ui.panels.evidence import FOCUS_BACKGROUND, context_as_prompt
from explorer.ui.session.selection import Selection

if TYPE_CHECKING:
    from explorer.core.corpus.read import HeadRank, PairExample
    from explorer.ui.session.session import Session

Index = QModelIndex | QPersistentModelIndex
STATS = ("induction", "previous_token", "duplicate_token", "first_token", "entropy")  # the columns, in order
SHORT = {"induction": "induction", "previous_token": "previous\ntoken", "duplicate_token": "duplicate\ntoken",
         "first_token": "first\ntoken", "entropy": "entropy\n(nats)"}  # narrow columns: the side dock's width
FIXED = ("head",)
CHANCE_NOTE = ("Under each score: its chance level (a head spreading its attention evenly, on the same windows). "
               "Click a header to rank by it.")
KEY_BACKGROUND = "#9ad0f5"
NO_RUN = ("Open a corpus run that kept head statistics (File \u25b8 Open corpus run\u2026, or File \u25b8 Run over a "
          "corpus\u2026) to rank every head by its scores over many texts.")


@dataclass(frozen=True)
class HeadFinderView(PanelView):
    """The Head finder's view of a trace: nothing of the prompt (its table and pairs are the corpus run's, drawn when
    the run or the selected head changes)."""


class HeadScoresModel(QAbstractTableModel):
    """Every head's corpus scores, one row per head in ``order`` (HeadRank list), one column per statistic."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.order: list[HeadRank] = []
        self.scores: dict[str, np.ndarray] = {}
        self.chance: dict[str, float] = {}
        self.windows: dict[str, np.ndarray] = {}
        self.sorted_by = "induction"
        self.sorted_background = QColor(255, 200, 87, 70)

    def set_table(self, table: dict[str, Any], order: list[HeadRank], sorted_by: str) -> None:
        self.beginResetModel()
        self.scores, self.chance, self.windows = table["scores"], table["chance"], table["windows"]
        self.order, self.sorted_by = order, sorted_by
        self.endResetModel()

    def head_of(self, row: int) -> tuple[int, int]:
        rank = self.order[row]
        return rank.layer, rank.head

    def row_of(self, layer: int, head: int) -> int | None:
        return next((r for r, rank in enumerate(self.order) if (rank.layer, rank.head) == (layer, head)), None)

    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: N802 - Qt's name
        return 0 if parent.isValid() else len(self.order)

    def columnCount(self, parent: Index = QModelIndex()) -> int:  # noqa: N802
        return 0 if parent.isValid() else len(FIXED) + len(STATS)

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole):  # noqa: N802
        if orientation != Qt.Orientation.Horizontal:  # the rows' numbers: the ranks
            return str(section + 1) if role == Qt.ItemDataRole.DisplayRole else None
        stat = STATS[section - len(FIXED)] if section >= len(FIXED) else None
        if role == Qt.ItemDataRole.DisplayRole:
            if stat is None:
                return FIXED[section]
            chance = self.chance.get(stat, math.nan)
            return SHORT[stat] + (f"\n{chance:.3f}" if math.isfinite(chance) else "\n\u2013")
        if role == Qt.ItemDataRole.ToolTipRole and stat is not None:
            chance = self.chance.get(stat, math.nan)
            return (f"{STATISTIC_LABELS[stat]}: each head's mean over the run's windows; chance "
                    f"{chance:.4f}: what a head attending evenly to every token it may see scores on the same "
                    "windows. Click to sort by it (again: the other way round).")
        return None

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole):
        if not index.isValid():
            return None
        rank, column = self.order[index.row()], index.column()
        stat = STATS[column - len(FIXED)] if column >= len(FIXED) else None
        value = float(self.scores[stat][rank.layer, rank.head]) if stat is not None else math.nan
        if role == Qt.ItemDataRole.DisplayRole:
            if stat is None:
                return f"L{rank.layer} H{rank.head}"
            return f"{value:.3f}" if math.isfinite(value) else "\u2013"
        if role == Qt.ItemDataRole.TextAlignmentRole:
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if role == Qt.ItemDataRole.BackgroundRole and stat == self.sorted_by:
            return self.sorted_background
        if role == Qt.ItemDataRole.ToolTipRole and stat is not None:
            shown = f"{value:.6f}" if math.isfinite(value) else "undefined on every window"
            windows = int(self.windows[stat][rank.layer, rank.head])
            return (f"L{rank.layer} H{rank.head}: {STATISTIC_LABELS[stat]} {shown} over {windows:,} windows "
                    f"(chance {self.chance.get(stat, math.nan):.4f})")
        return None


class HeadFinderPanel(Panel):
    def __init__(self, selection: Selection, parent: QWidget | None = None) -> None:
        super().__init__(selection, parent)
        self.statistic, self.descending = "induction", True
        self.pairs: list[PairExample] = []
        self._run: Any = None                      # the run the table shows
        row = QHBoxLayout()
        row.addWidget(QLabel("Rank by:"))
        self.stat_box = QComboBox()
        for name in STATS:
            self.stat_box.addItem(STATISTIC_LABELS[name], name)
        self.stat_box.currentIndexChanged.connect(lambda _i: self.sort_by(self.stat_box.currentData(), True))
        row.addWidget(self.stat_box)
        self.highest = QCheckBox("highest first")
        self.highest.setChecked(True)
        self.highest.toggled.connect(lambda on: self.sort_by(self.statistic, on))
        row.addWidget(self.highest)
        row.addStretch(1)
        self.body.addLayout(row)
        self.info = QLabel()  # the run: on a line of its own (the side dock is narrow)
        self.info.setWordWrap(True)
        self.info.setStyleSheet("color: palette(placeholder-text)")
        self.body.addWidget(self.info)
        self.note = QLabel(NO_RUN)
        self.note.setWordWrap(True)
        self.body.addWidget(self.note)
        self.chance_note = QLabel(CHANCE_NOTE)
        self.chance_note.setWordWrap(True)
        self.chance_note.setStyleSheet("color: palette(placeholder-text); font-size: 11px")

        self.model = HeadScoresModel(self)
        self.table = QTableView()
        self.table.setModel(self.model)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setAlternatingRowColors(True)
        self.table.verticalHeader().setDefaultSectionSize(self.table.fontMetrics().height() + 6)
        header = self.table.horizontalHeader()  # the head's column fits it, the scores share the rest (narrow dock)
        header.setMinimumSectionSize(self.table.fontMetrics().horizontalAdvance("duplicate") + 14)
        header.setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionsClickable(True)
        header.setSortIndicatorShown(True)
        header.sectionClicked.connect(self._header_clicked)
        self.table.clicked.connect(lambda index: self.selection.set_layer_head(*self.model.head_of(index.row())))

        self.pairs_title = QLabel()
        self.pairs_title.setWordWrap(True)
        self.pairs_view = QTextBrowser()
        self.pairs_view.setOpenLinks(False)
        self.pairs_view.setToolTip("Click a pair to make its context the prompt (up to the query token)")
        self.pairs_view.anchorClicked.connect(self._pair_clicked)
        below = QWidget()
        column = QVBoxLayout(below)
        column.setContentsMargins(0, 0, 0, 0)
        column.addWidget(self.pairs_title)
        column.addWidget(self.pairs_view, 1)
        above = QWidget()
        column = QVBoxLayout(above)
        column.setContentsMargins(0, 0, 0, 0)
        column.addWidget(self.chance_note)
        column.addWidget(self.table, 1)
        self.split = QSplitter(Qt.Orientation.Vertical)
        self.split.addWidget(above)
        self.split.addWidget(below)
        self.split.setStretchFactor(0, 3)
        self.split.setStretchFactor(1, 2)
        self.split.setChildrenCollapsible(False)
        self.body.addWidget(self.split, 1)
        self.add_exportable("head finder: every head's corpus scores", self.table, self.table_data)
        self.add_exportable("head finder: the selected head's top pairs", self.pairs_view, self.pairs_data)
        self._show(False)
        selection.changed.connect(self._selection_moved)

    # --- the session's corpus run ------------------------------------------------------------------
    def attach(self, session: Session) -> None:
        super().attach(session)
        session.corpus.changed.connect(self.refresh)
        self.refresh()

    @property
    def run(self) -> Any:
        return self.session.corpus.run if self.session is not None else None

    def available(self) -> bool:
        """Whether there is anything to show: a run with head statistics is open (else the dock is hidden)."""
        return self.session is not None and self.session.corpus.has_heads()

    def _show(self, on: bool) -> None:
        self.note.setVisible(not on)
        self.split.setVisible(on)

    def refresh(self) -> None:
        """The open run changed: rank its heads again (or say there is none)."""
        run = self.run if self.available() else None
        self._run = run
        if run is None:
            self.model.set_table({"scores": {}, "chance": {}, "windows": {}}, [], self.statistic)
            self.pairs = []
            self.pairs_view.clear()
            self.info.setText("")
            self._show(False)
            return
        self._show(True)
        info = run.info
        self.info.setText(f"{info.model} over {info.corpus}: {info.tokens:,} tokens in {info.windows:,} windows of "
                          f"{info.window} ({run.path.name})")
        self.sort_by(self.statistic, self.descending)

    # --- sorting and selecting ----------------------------------------------------------------------
    def sort_by(self, statistic: str, descending: bool = True) -> None:
        """Order the heads by ``statistic`` (a name of ``STATS``), highest first unless not ``descending``."""
        if statistic not in STATS:
            raise ValueError(f"unknown head statistic {statistic!r}")
        self.statistic, self.descending = statistic, bool(descending)
        for widget, value in ((self.stat_box, self.stat_box.findData(statistic)), (self.highest, self.descending)):
            widget.blockSignals(True)
            widget.setCurrentIndex(value) if widget is self.stat_box else widget.setChecked(value)
            widget.blockSignals(False)
        run = self._run
        if run is None:
            return
        try:
            table = run.head_scores()
            order = run.head_ranking(statistic, self.descending)
        except (CorpusError, sqlite3.Error) as exc:
            self.info.setText(" ".join(str(exc).split()))
            return
        self.model.set_table(table, order, statistic)
        self.table.horizontalHeader().setSortIndicator(
            len(FIXED) + STATS.index(statistic),
            Qt.SortOrder.DescendingOrder if self.descending else Qt.SortOrder.AscendingOrder)
        self._select_row()
        self.show_pairs()

    def _header_clicked(self, section: int) -> None:
        if section < len(FIXED):
            return
        stat = STATS[section - len(FIXED)]
        self.sort_by(stat, not self.descending if stat == self.statistic else True)

    def heads(self) -> list[tuple[int, int]]:
        """The heads as the table lists them, top to bottom."""
        return [(r.layer, r.head) for r in self.model.order]

    def _select_row(self) -> None:
        row = self.model.row_of(self.selection.layer, self.selection.head)
        if row is None:
            self.table.clearSelection()
            return
        self.table.selectRow(row)
        self.table.scrollTo(self.model.index(row, 0))

    def _selection_moved(self, what: str) -> None:
        """The shared selection's head moved (here or anywhere): its row and its pairs (no trace needed)."""
        if what in ("layer", "head") and self._run is not None:
            self._select_row()
            self.show_pairs()

    # --- the panel contract (nothing here depends on the prompt) --------------------------------------
    def prepare(self, trace: Trace, snapshot: PanelSnapshot) -> HeadFinderView:
        return HeadFinderView(trace)

    def draw(self, view: HeadFinderView) -> None:
        if self._run is not self.run:
            self.refresh()

    # --- the selected head's top query/key pairs ------------------------------------------------------
    def show_pairs(self) -> None:
        run = self._run
        layer, head = self.selection.layer, self.selection.head
        info = run.info if run is not None else None
        if run is None or info.heads is None or not (0 <= layer < info.heads[0] and 0 <= head < info.heads[1]):
            self.pairs = []
            self.pairs_view.clear()
            self.pairs_title.setText("")
            return
        try:
            self.pairs = run.head_pairs(layer, head)
        except (CorpusError, sqlite3.Error) as exc:
            self.pairs = []
            self.pairs_title.setText(html.escape(" ".join(str(exc).split())))
            return
        self.pairs_title.setText(f"<b>L{layer} H{head}'s top query/key pairs over the corpus</b>: the query "
                                 "(yellow) gives the key (blue) this much attention (in brackets: above even). "
                                 "Click one to make it the prompt.")
        text = self.palette().color(QPalette.ColorRole.Text).name()
        muted = self.palette().color(QPalette.ColorRole.PlaceholderText).name()
        rows = []
        for i, pair in enumerate(self.pairs):
            before, first, between, second, where = pair_line(pair, 16)
            key_first, itself = pair.key <= pair.query, pair.key == pair.query
            a, b = (KEY_BACKGROUND, FOCUS_BACKGROUND) if key_first and not itself else (FOCUS_BACKGROUND,
                                                                                        KEY_BACKGROUND)
            where = f"(it attends to itself) {where}" if itself else where
            rows.append(f'<p style="margin: 0 0 6px 0"><a href="pair:{i}" style="color: {text}; text-decoration: '
                        f'none"><b>{pair.weight:.3f}</b> (+{pair.lift:.3f})&nbsp;&nbsp;{html.escape(before)}'
                        f'<span style="background-color: {a}; color: #000000">{html.escape(first)}</span>'
                        f'{html.escape(between)}<span style="background-color: {b}; color: #000000"><b>'
                        f'{html.escape(second)}</b></span></a>&nbsp;&nbsp;<span style="color: {muted}; font-size: '
                        f'small">{html.escape(where)}</span></p>')
        self.pairs_view.setHtml("".join(rows) or "<p>No pairs were kept for this head.</p>")

    def _pair_clicked(self, url: QUrl) -> None:
        kind, _, index = url.toString().partition(":")
        if kind == "pair" and index.isdigit() and int(index) < len(self.pairs):
            context_as_prompt(self.session, self.pairs[int(index)])

    # --- exported data -------------------------------------------------------------------------------
    def table_data(self) -> tuple[np.ndarray, list[str], list[str]]:
        """Every head's scores in the table's order: rows "L{l} H{h}", one column per statistic."""
        order = self.model.order
        if not order:
            return np.zeros((0, len(STATS))), [], []
        values = np.array([[self.model.scores[s][r.layer, r.head] for s in STATS] for r in order], np.float64)
        return values, [f"L{r.layer} H{r.head}" for r in order], [STATISTIC_LABELS[s] for s in STATS]

    def pairs_data(self) -> tuple[np.ndarray, list[str], list[str]]:
        """The selected head's pairs: attention weight and lift above uniform, rows the contexts."""
        rows = []
        for pair in self.pairs:
            before, first, between, second, where = pair_line(pair, 16)
            rows.append(f"{where}: {before}[{first}]{between}[{second}]")
        values = np.array([[p.weight, p.lift] for p in self.pairs], np.float64).reshape(-1, 2)
        return values, rows, ["weight", "above uniform"] if rows else []
