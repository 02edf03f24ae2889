"""The Head finder on the bundled induction model: its first row by induction score is head 1.2, every row in
``head_ranking``'s order; clicking a row selects the head in the window and lists its top pairs; clicking a
score's header ranks by that score; the Attention panel's head statistics switch to the corpus's scores."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtTest import QTest

import explorer.ui  # noqa: F401  (binds pyqtgraph to PySide6)
from explorer.core.checkpoint import load_checkpoint
from explorer.core.corpus import open_run
from explorer.core.corpus.run import run_corpus
from explorer.ui.panels.head_finder import FIXED, STATS


@pytest.fixture(scope="module")
def induction_run(tmp_path_factory):
    """The induction model over 50,000 tokens of the bundled sample (1.1 leads on the first 10,000)."""
    model = load_checkpoint("induction", device="cpu")
    return run_corpus(model, "sample", tmp_path_factory.mktemp("runs") / "induction.db", tokens=50_000).path


def click_cell(qtbot, table, row: int, column: int) -> None:
    rect = table.visualRect(table.model().index(row, column))
    QTest.mouseClick(table.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())


def test_the_head_finder_ranks_head_1_2_first_by_induction_on_the_induction_model(qtbot, make_window, induction_run):
    window = make_window()
    with qtbot.waitSignal(window.trace_applied, timeout=60_000):
        window.open_checkpoint("induction")
    panel = window.panel("head_finder")
    dock = window.dock("head_finder")
    assert dock.isHidden() and not panel.available()                 # no run: nothing to rank
    with qtbot.waitSignal(window.session.corpus.changed, timeout=30_000):
        window.corpus_runs.open(str(induction_run))
    assert not dock.isHidden() and panel.available()
    dock.raise_()
    table = panel.table
    qtbot.waitUntil(lambda: table.isVisible() and table.model().rowCount() == 8, timeout=10_000)
    with open_run(induction_run) as run:
        ranking = run.head_ranking("induction")
        pairs = run.head_pairs(1, 2)
        previous = run.head_ranking("previous_token")
        scores = run.head_scores()
    model = table.model()
    shown = [model.data(model.index(r, 0)) for r in range(model.rowCount())]
    assert shown[0] == "L1 H2"                                       # the named induction head, first
    assert shown == [f"L{r.layer} H{r.head}" for r in ranking]
    column = len(FIXED) + STATS.index("induction")
    assert model.data(model.index(0, column)) == f"{ranking[0].score:.3f}"
    assert model.headerData(column, Qt.Orientation.Horizontal) == f"induction\n{ranking[0].chance:.3f}"  # its chance
    assert model.headerData(0, Qt.Orientation.Vertical) == "1"                                     # the rank

    click_cell(qtbot, table, 0, 0)                                   # selects L1 H2 in the whole window
    assert (window.selection.layer, window.selection.head) == (1, 2)
    assert panel.pairs == pairs and len(pairs) > 0
    assert panel.pairs_view.toPlainText().splitlines()[0].startswith(f"{pairs[0].weight:.3f}")

    header = table.horizontalHeader()                                # rank by the previous-token score
    section = len(FIXED) + STATS.index("previous_token")
    QTest.mouseClick(header.viewport(), Qt.MouseButton.LeftButton,
                     pos=QPoint(header.sectionViewportPosition(section) + 8, header.height() // 2))
    assert panel.statistic == "previous_token"
    assert [model.data(model.index(r, 0)) for r in range(model.rowCount())][0] == \
        f"L{previous[0].layer} H{previous[0].head}" == "L0 H1"

    # the Attention panel's head statistics: the corpus's scores instead of this prompt's
    attention = window.panel("attention")
    window.raise_panel("attention")
    qtbot.waitUntil(lambda: attention.trace is window.trace and window.presenter.is_idle(), timeout=30_000)
    toggle = attention.corpus_scores.toggle
    assert toggle.isVisible()
    attention.set_statistic("induction")
    toggle.setChecked(True)
    assert attention.stats_toggle.isChecked()
    np.testing.assert_allclose(attention.statistic_values(), scores["scores"]["induction"])
    title = attention.statistics.plot.titleLabel.full_text
    assert "over sample, 50,000 tokens" in title and f"chance {scores['chance']['induction']:.3f}" in title
    toggle.setChecked(False)
    assert "over sample" not in attention.statistics.plot.titleLabel.full_text
