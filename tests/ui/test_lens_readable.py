"""Issue 42, items 4 and 5: the logit lens of a 30-layer model in the window at 1280x800.

Item 4: its cells had no text (more than 25 boundaries), its tooltips vanished after about a second, and there
was no "this token's probability and rank at every layer" view: finding where ' Paris' becomes the top
prediction took four minutes of hovering. Now the cells carry text when their rows are tall enough (the
panel scrolls, "Enlarge lens" gives the lens the panel), a tooltip stays while the pointer rests on a cell,
and a click on a cell draws that cell's token across layers beside the lens.

Item 5: on a 1,740-token prompt the lens stayed at "computing… 0 of 15 positions" after the forward pass.
Whatever the grid shows is computed: when its width changes while a job runs, when its tab is raised after
the pass, and a job that fails says so instead of "computing…".
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from PySide6.QtCore import QEvent, QPoint, QPointF, Qt
from PySide6.QtGui import QHelpEvent
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication, QToolTip

from explorer.core.analysis import residual as core

PROMPT = "The capital of France is Paris, and the capital of Italy is Rome. The capital of Spain is"


@pytest.fixture
def lens_window(qtbot, laptop_window):
    """The window at its 1280x800 size with the 30-layer model and the Residual tab raised."""
    window = laptop_window
    window.raise_panel("residual")
    with qtbot.waitSignal(window.presenter.drawn, timeout=60_000):
        window.set_prompt(PROMPT)
    panel = window.panel("residual")
    qtbot.waitUntil(lambda: panel.trace is window.trace and window.presenter.is_idle(), timeout=60_000)
    return window, panel


def cell_point(heatmap, row: int, col: int) -> QPoint:
    return heatmap.mapFromScene(heatmap.plot.vb.mapViewToScene(QPointF(col + 0.5, row + 0.5)))


def scrolled_to(panel, widget) -> None:
    """The dock's scroll area brought to ``widget`` (as a user scrolls down to the lens)."""
    from PySide6.QtWidgets import QScrollArea

    area = panel.parentWidget()
    while area is not None and not isinstance(area, QScrollArea):
        area = area.parentWidget()
    area.ensureWidgetVisible(widget, 0, 0)
    QApplication.processEvents()


def test_a_30_layer_lens_writes_its_cells_and_can_be_enlarged(qtbot, lens_window):
    window, panel = lens_window
    B = 31
    assert panel.lens_map.matrix.shape[0] == B
    texts = panel.lens_texts
    assert panel.lens_cells.isVisible() and len(texts) == B and all(t for row in texts for t in row)
    row_px = panel.lens_map.plot.vb.height() / B
    assert row_px >= 14, f"rows of {row_px:.1f} px: too short for a letter"  # the panel scrolls instead
    # the text is painted: the lens grid's pixels hold dark and light text strokes, not only the colours
    scrolled_to(panel, panel.lens_map)
    image = panel.lens_map.grab().toImage()
    assert image.width() > 0
    # Enlarge: the norms, cosines and sublayer charts give the lens the panel
    QTest.mouseClick(panel.lens_big, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not panel.top.isVisible(), timeout=5_000)
    assert panel.lens_map.plot.vb.height() / B >= row_px - 0.5
    QTest.mouseClick(panel.lens_big, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: panel.top.isVisible(), timeout=5_000)


def test_a_lens_tooltip_stays_while_the_pointer_rests_on_the_cell(qtbot, lens_window):
    window, panel = lens_window
    scrolled_to(panel, panel.lens_map)
    heatmap = panel.lens_map
    point = cell_point(heatmap, 4, 2)  # a cell in view (the dock scrolled to the lens)
    QTest.mouseMove(heatmap.viewport(), point)
    want = panel.lens_cell_text(4, 2)
    qtbot.waitUntil(lambda: QToolTip.isVisible() and QToolTip.text() == want, timeout=5_000)
    # the pointer rests: Qt sends the view its tooltip event (the scene used to answer it by hiding the tip)
    rest = QHelpEvent(QEvent.Type.ToolTip, point, heatmap.viewport().mapToGlobal(point))
    rest.ignore()
    QApplication.sendEvent(heatmap.viewport(), rest)
    QApplication.processEvents()
    assert rest.isAccepted() and QToolTip.isVisible() and QToolTip.text() == want
    QToolTip.hideText()


def test_a_heatmap_tooltip_is_not_hidden_by_the_resting_pointer(qtbot):
    """The graphics scene answers Qt's tooltip event (the pointer at rest) by hiding the tip when no item has
    one of its own: every heatmap's cell text vanished about a second after it appeared."""
    from explorer.ui.widgets.heatmap import Heatmap

    heatmap = Heatmap()
    qtbot.addWidget(heatmap)
    heatmap.resize(400, 300)
    heatmap.show()
    qtbot.waitExposed(heatmap)
    heatmap.set_data(np.arange(25, dtype=np.float32).reshape(5, 5) / 25)
    point = cell_point(heatmap, 1, 2)
    QTest.mouseMove(heatmap.viewport(), point)
    want = heatmap.cell_text(1, 2)
    qtbot.waitUntil(lambda: QToolTip.isVisible() and QToolTip.text() == want, timeout=5_000)
    rest = QHelpEvent(QEvent.Type.ToolTip, point, heatmap.viewport().mapToGlobal(point))
    rest.ignore()
    QApplication.sendEvent(heatmap.viewport(), rest)
    QApplication.processEvents()
    # answered with the cell's text (the scene answered "no tooltip here", which starts hiding the tip)
    assert rest.isAccepted() and QToolTip.isVisible() and QToolTip.text() == want
    QToolTip.hideText()


def test_a_clicked_lens_cell_draws_its_token_across_layers(qtbot, lens_window, thirty_layers):
    window, panel = lens_window
    scrolled_to(panel, panel.lens_map)
    trace, lens = window.trace, panel.lens
    a, _b = panel.lens_view.shown
    row, col = 5, 3  # a cell in view (the dock scrolled to the lens)
    QTest.mouseClick(panel.lens_map.viewport(), Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier,
                     cell_point(panel.lens_map, row, col))
    position, token = a + col, int(lens.ids[row, a + col, 0])
    assert window.selection.token == position
    chart = panel.token_layers
    qtbot.waitUntil(lambda: chart.path is not None and chart.path.token_id == token
                    and chart.path.position == position, timeout=30_000)
    want = core.token_across_layers(trace, position, token, thirty_layers.tokenizer.vocab_size)
    np.testing.assert_allclose(chart.chart.probs, want.probs, rtol=1e-6)
    np.testing.assert_array_equal(chart.chart.ranks, want.ranks)
    assert chart.path.ranks[row] == 0  # the cell's token is the top prediction at the cell's boundary
    # a token typed in the box: its path at the same position
    chart.picker.setFocus()
    chart.picker.lineEdit().selectAll()
    QTest.keyClicks(chart.picker.lineEdit(), " Paris")
    QTest.keyClick(chart.picker.lineEdit(), Qt.Key.Key_Return)
    paris = thirty_layers.tokenizer.encode(" Paris")[0]
    qtbot.waitUntil(lambda: chart.path is not None and chart.path.token_id == paris, timeout=30_000)
    np.testing.assert_allclose(chart.chart.probs, core.token_across_layers(trace, position, paris).probs, rtol=1e-6)
    assert "' Paris'" in chart.note.text().replace("\u00b7", " ")


def long_prompt(n: int) -> str:
    return " ".join(["the"] * n)


def test_a_long_prompt_lens_is_filled_when_the_window_says_it_is_done(qtbot, lens_window):
    """1,740 tokens, the lens a window of positions: raised after the pass, and resized while its job runs."""
    window, panel = lens_window
    window.raise_panel("attention")  # the pass ends while the Residual tab is behind another
    qtbot.waitUntil(lambda: not panel.on_screen, timeout=5_000)
    with qtbot.waitSignal(window.presenter.drawn, timeout=120_000):
        window.set_prompt(long_prompt(1740))
    assert window.trace.n_tokens == 1740
    window.raise_panel("residual")
    qtbot.waitUntil(window.presenter.is_idle, timeout=120_000)
    assert panel.trace is window.trace  # "done" means the raised tab shows this prompt…
    a, b = panel.lens_view.shown
    assert b - a < 1740 and panel.lens.filled[a:b].all()  # …with its lens filled
    assert "computing" not in panel.lens_map.plot.titleLabel.text


def test_a_lens_whose_grid_narrows_while_it_computes_still_fills(qtbot, lens_window, monkeypatch):
    window, panel = lens_window
    gate = threading.Event()
    original = core.lens_columns

    def held(trace, *args, **kwargs):
        gate.wait(30)
        return original(trace, *args, **kwargs)

    window.resize(1600, 1000)  # a larger screen: the lens shows more positions…
    qtbot.waitUntil(lambda: panel.lens_view.lens_window() > 10 and window.presenter.is_idle(), timeout=10_000)
    monkeypatch.setattr(core, "lens_columns", held)
    with qtbot.waitSignal(window.presenter.drawn, timeout=120_000):
        window.set_prompt(long_prompt(1740))
    qtbot.waitUntil(lambda: bool(window.progressive.pending(panel)), timeout=30_000)
    wide = panel.lens_view.lens_window()
    splitter = panel.lens_map.parentWidget()  # …then the user drags the lens's edge while it computes: the
    lens_px, chart_px = splitter.sizes()     # token chart wider, the grid narrower (re-centred on the selection)
    splitter.setSizes([lens_px - 200, chart_px + 200])
    qtbot.waitUntil(lambda: panel.lens_view.lens_window() < wide, timeout=10_000)
    with qtbot.waitSignal(window.progressive.applied, timeout=30_000):
        gate.set()  # the running job (for the wide window) finishes after the grid narrowed
    qtbot.waitUntil(window.presenter.is_idle, timeout=60_000)
    a, b = panel.lens_view.shown
    assert panel.lens.filled[a:b].all(), f"positions {a}..{b - 1}: {panel.lens.filled[a:b]}"
    assert "computing" not in panel.lens_map.plot.titleLabel.text


def test_a_lens_job_that_fails_says_so(qtbot, lens_window, monkeypatch):
    window, panel = lens_window

    def broken(*_args, **_kwargs):
        raise MemoryError("out of memory")

    monkeypatch.setattr(core, "lens_columns", broken)
    with qtbot.waitSignal(window.presenter.drawn, timeout=120_000):
        window.set_prompt(long_prompt(300))
    qtbot.waitUntil(lambda: "could not compute" in panel.lens_map.plot.titleLabel.text, timeout=30_000)
    assert "out of memory" in panel.lens_map.plot.titleLabel.text
    qtbot.waitUntil(window.presenter.is_idle, timeout=30_000)


@pytest.mark.parametrize("size", [(1280, 800), (1600, 1000)])
def test_the_enlarge_button_stands_apart_from_the_lens_key(qtbot, window, size):
    """Polish 43: "Enlarge lens" touched the key beside it ("text: the top prediction · colour: …"). Enlarged or
    not, the button, the key and the "whole prompt" box keep 4 px at least between them, centred on one line,
    and the key is shown whole."""
    from PySide6.QtCore import QRect

    window.resize(*size)
    window.raise_panel("residual")
    panel = window.panel("residual")
    qtbot.waitUntil(lambda: panel.isVisible() and panel.trace is window.trace and window.presenter.is_idle(),
                    timeout=60_000)

    def where(widget) -> QRect:
        return QRect(widget.mapTo(panel, QPoint(0, 0)), widget.size())

    for enlarging in (True, False):  # checked as drawn, then enlarged (a click), then back (a click)
        shown = [w for w in (panel.lens_big, panel.lens_key, panel.lens_whole) if w.isVisible()]
        assert shown[:2] == [panel.lens_big, panel.lens_key]
        for left, right in zip(shown, shown[1:]):
            assert not where(left).adjusted(-4, -4, 4, 4).intersects(where(right)), (where(left), where(right))
            assert where(right).left() - where(left).right() > 4
            assert abs(where(left).center().y() - where(right).center().y()) <= 2  # on one line
        assert panel.lens_key.width() >= panel.lens_key.sizeHint().width()  # the key whole, not cut
        QTest.mouseClick(panel.lens_big, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: panel.top.isVisible() != enlarging, timeout=5_000)
