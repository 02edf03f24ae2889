"""The Heatmap widget: data round trip, masked overlay, tooltips, clicks."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
import pytest
from PySide6.QtCore import QPointF, Qt

import explorer.ui  # noqa: F401  (binding and pyqtgraph options)
from explorer.ui.widgets.heatmap import Heatmap

ROWS = ["0:The", "1: cat", "2: sat", "3: down"]
COLS = ["k0", "k1", "k2", "k3", "k4"]


@pytest.fixture
def heatmap(qtbot):
    widget = Heatmap(title="test")
    qtbot.addWidget(widget)
    widget.resize(500, 400)
    widget.show()
    qtbot.waitExposed(widget)
    return widget


def _matrix():
    return np.arange(20, dtype=np.float64).reshape(4, 5) / 19.0


def test_data_round_trip(heatmap):
    m = _matrix()
    heatmap.set_data(m, ROWS, COLS)
    np.testing.assert_array_equal(heatmap.matrix, m)
    shown = heatmap.image.image
    assert shown.dtype == np.float32 and shown.flags.c_contiguous and shown.shape == (4, 5)
    np.testing.assert_allclose(shown, m, rtol=1e-6)
    assert heatmap.levels == (0.0, 1.0)
    assert heatmap.image.lut.shape[0] == 256
    assert heatmap.row_labels == ROWS and heatmap.col_labels == COLS
    assert not heatmap.masked.any()
    assert heatmap.plot.getViewBox().yInverted()  # row 0 at the top


def test_levels_given_and_symmetric(qtbot):
    h = Heatmap(colormap="CET-D1", symmetric=True)
    qtbot.addWidget(h)
    h.set_data(np.array([[-0.25, 0.5], [0.1, 0.0]]))
    assert h.levels == (-0.5, 0.5)
    h.set_data(np.array([[-0.25, 0.5]]), levels=(-2, 3))
    assert h.levels == (-2.0, 3.0)
    assert h.colorbar.levels() == (-2.0, 3.0)


def test_masked_overlay_equals_mask(heatmap):
    m = _matrix()
    mask = np.triu(np.ones((4, 5), dtype=bool), 1)
    heatmap.set_data(m, ROWS, COLS, masked=mask)
    np.testing.assert_array_equal(heatmap.masked, mask)
    np.testing.assert_array_equal(heatmap.overlay_mask(), mask)
    # masked cells are not part of the colour scale
    assert heatmap.levels == (float(m[~mask].min()), float(m[~mask].max()))
    heatmap.set_data(m, ROWS, COLS)
    assert not heatmap.overlay_mask().any()


def test_non_finite_cells_are_overlaid_not_coloured(heatmap):
    m = _matrix()
    m[0, 3] = -np.inf
    heatmap.set_data(m, ROWS, COLS)
    assert np.isfinite(heatmap.image.image).all()
    expected = np.zeros((4, 5), dtype=bool)
    expected[0, 3] = True
    np.testing.assert_array_equal(heatmap.overlay_mask(), expected)


def test_tooltip_text_for_a_cell_under_the_mouse(heatmap, qtbot):
    m = _matrix()
    mask = np.zeros((4, 5), dtype=bool)
    mask[0, 4] = True
    heatmap.set_data(m, ROWS, COLS, masked=mask, value_name="attention")
    vb = heatmap.plot.getViewBox()
    scene_pos = vb.mapViewToScene(QPointF(2.5, 1.5))  # column 2, row 1
    assert heatmap.cell_at(scene_pos) == (1, 2)
    assert heatmap.cell_text(*heatmap.cell_at(scene_pos)) == f"1: cat \u2192 k2: attention = {m[1, 2]:.6f}"
    assert heatmap.cell_text(0, 4) == "0:The \u2192 k4: masked"
    assert heatmap.cell_at(vb.mapViewToScene(QPointF(7.0, 1.0))) is None
    with qtbot.waitSignal(heatmap.cell_hovered) as hovered:
        heatmap._on_mouse_moved((scene_pos,))  # what the rate-limited proxy calls
    assert hovered.args == [1, 2]


def test_click_emits_row_and_column(heatmap, qtbot):
    heatmap.set_data(_matrix(), ROWS, COLS)
    qtbot.wait(1)
    scene_pos = heatmap.plot.getViewBox().mapViewToScene(QPointF(3.5, 2.5))
    point = heatmap.mapFromScene(scene_pos)
    with qtbot.waitSignal(heatmap.cell_clicked) as blocker:
        qtbot.mouseClick(heatmap.viewport(), Qt.MouseButton.LeftButton, pos=point)
    assert blocker.args == [2, 3]


def test_bad_shapes_are_refused(heatmap):
    with pytest.raises(ValueError):
        heatmap.set_data(np.zeros((2, 2, 2)))
    with pytest.raises(ValueError):
        heatmap.set_data(np.zeros((2, 3)), masked=np.zeros((3, 2), bool))
    with pytest.raises(ValueError):
        heatmap.set_data(np.zeros((2, 3)), row_labels=["a"])


def test_many_labels_are_thinned(qtbot):
    h = Heatmap()
    qtbot.addWidget(h)
    h.resize(400, 300)
    labels = [f"{i}:tok" for i in range(300)]
    h.set_data(np.random.default_rng(0).random((300, 300)), labels, labels)
    ticks = h.plot.getAxis("left")._tickLevels[0]
    assert 2 <= len(ticks) < 60
    assert h.cell_text(299, 0).startswith("299:tok \u2192 0:tok")


def test_an_unchanged_mask_keeps_its_overlay(qtbot, monkeypatch):
    from explorer.ui.widgets import heatmap as module

    calls = []
    real = module.mask_overlay
    monkeypatch.setattr(module, "mask_overlay", lambda hidden: calls.append(1) or real(hidden))
    widget = module.Heatmap()
    qtbot.addWidget(widget)
    mask = np.triu(np.ones((6, 6), dtype=bool), 1)
    widget.set_data(np.random.default_rng(0).random((6, 6)), masked=mask)
    widget.set_data(np.random.default_rng(1).random((6, 6)), masked=mask)  # another head, same mask
    assert len(calls) == 1
    widget.set_data(np.random.default_rng(2).random((6, 6)), masked=mask.T)
    assert len(calls) == 2 and np.array_equal(widget.overlay_mask(), mask.T)


@pytest.mark.parametrize("size", [(3, 5), (200, 256), (1024, 1024)])
def test_mask_overlay_hatches_exactly_the_hidden_cells(size):
    """The tiled overlay equals a pixel-by-pixel drawing: stripes on hidden cells, transparent elsewhere."""
    from explorer.ui.widgets.heatmap_image import MASK_DARK, MASK_LIGHT, mask_overlay

    rows, cols = size
    hidden = np.random.default_rng(0).random(size) < 0.4
    rgba, s = mask_overlay(hidden)
    assert rgba.shape == (rows * s, cols * s, 4) and rgba.dtype == np.uint8
    cells = np.repeat(np.repeat(hidden, s, axis=0), s, axis=1)
    expected = np.zeros_like(rgba)
    if s == 1:
        expected[cells] = MASK_DARK
    else:
        yy, xx = np.indices(cells.shape)
        stripe = ((xx + yy) % s) < max(1, s // 4)
        expected[cells & ~stripe] = MASK_LIGHT
        expected[cells & stripe] = MASK_DARK
    np.testing.assert_array_equal(rgba, expected)


def test_the_stripe_tile_is_kept_per_size_read_only_and_a_second_overlay_equals_the_first():
    from explorer.ui.widgets.heatmap_image import MASK_DARK, MASK_LIGHT, mask_overlay, stripe_tile

    for s in (2, 4, 8, 16):
        i, j = np.indices((s, s))
        fresh = np.where((((i + j) % s) < max(1, s // 4))[..., None], np.uint8(MASK_DARK), np.uint8(MASK_LIGHT))
        kept = stripe_tile(s)
        assert stripe_tile(s) is kept and not kept.flags.writeable
        np.testing.assert_array_equal(kept.view(np.uint8).reshape(s, s, 4), fresh)
    hidden = np.tril(np.ones((40, 40), bool), -1)
    first, s = mask_overlay(hidden)
    again, s2 = mask_overlay(hidden)  # the tile from the cache
    np.testing.assert_array_equal(first, again)
    other, _ = mask_overlay(~hidden)  # a changed mask is drawn anew
    assert s == s2 and not np.array_equal(first[..., 3] > 0, other[..., 3] > 0)


def test_the_column_labels_are_counted_from_the_plots_width_not_the_row_axis(qtbot):
    """Many columns on a wide heatmap: as many labels as fit its width (the row axis' own width, a few tens
    of pixels, once stood in for it: two labels under a 700-pixel map)."""
    widget = Heatmap()
    qtbot.addWidget(widget)
    widget.resize(900, 300)
    widget.show()
    qtbot.waitExposed(widget)
    widget.set_data(np.zeros((30, 40)), [f"{i}:x" for i in range(30)], [str(7 * i) for i in range(40)])
    qtbot.waitUntil(lambda: widget.plot.vb.width() > 600)
    widget.set_data(np.ones((30, 40)), [f"{i}:x" for i in range(30)], [str(7 * i) for i in range(40)])
    shown = widget.plot.getAxis("bottom")._tickLevels[0]
    assert len(shown) >= 10


def test_an_outline_moved_over_the_image_repaints_from_pixmaps_not_the_image_or_axes(heatmap, qtbot):
    from PySide6.QtCore import QRectF
    from PySide6.QtWidgets import QApplication, QGraphicsItem

    from explorer.ui.widgets.plots import outline

    heatmap.set_data(_matrix(), ROWS, COLS)
    assert heatmap.image.cacheMode() == QGraphicsItem.CacheMode.DeviceCoordinateCache
    box = outline(heatmap.plot, pg.mkPen("r", width=2), z=10)
    box.setRect(QRectF(0, 0, 5, 1))
    for row in (1, 0):  # drawn on screen once (its pixmap made) and any layout still due done
        box.setRect(QRectF(0, row, 5, 1))
        heatmap.viewport().repaint()
        QApplication.processEvents()
    before = heatmap.grab().toImage()
    paints, original = [], heatmap.image.paint

    def counted(*args) -> None:
        paints.append(1)
        original(*args)

    heatmap.image.paint = counted
    axes, left, bottom = [], heatmap.plot.getAxis("left"), heatmap.plot.getAxis("bottom")
    for axis in (left, bottom):
        axis.paint = lambda *args, axis=axis, original=axis.paint: (axes.append(axis), original(*args))[1]
    for row in (1, 2, 0):  # the token outline moves and comes back
        box.setRect(QRectF(0, row, 5, 1))
        QApplication.processEvents()
    assert paints == [] and axes == []  # the pixels under the outline came from the cached pixmaps
    assert heatmap.grab().toImage() == before  # the same pixels as before it moved
    heatmap.image.setCacheMode(QGraphicsItem.CacheMode.NoCache)
    assert heatmap.grab().toImage() == before and paints  # drawn directly: the same pixels
    heatmap.image.setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
    paints.clear()
    heatmap.set_data(_matrix()[::-1].copy(), ROWS, COLS)  # a new image is drawn again
    heatmap.grab()
    assert paints


def test_the_same_labels_again_keep_their_ticks_and_new_labels_or_a_new_width_are_thinned_anew(qtbot, monkeypatch):
    from explorer.core.display.levels import thinned_ticks
    from explorer.ui.widgets import heatmap as module

    widget = Heatmap()
    qtbot.addWidget(widget)
    widget.resize(700, 400)
    widget.show()
    qtbot.waitExposed(widget)
    rows, cols = [f"after {i}" for i in range(13)], [f"tok{i}" for i in range(60)]
    widget.set_data(np.zeros((13, 60)), rows, cols)
    qtbot.waitUntil(lambda: widget.plot.vb.width() > 300)
    widget.set_data(np.zeros((13, 60)), rows, cols)
    calls = []
    monkeypatch.setattr(module, "thinned_ticks", lambda *a, **k: calls.append(a) or thinned_ticks(*a, **k))

    def fresh(axis_name, labels, chars):  # what the axis shows, computed without the memo
        vb = widget.plot.vb
        if axis_name == "left":
            room = max(vb.height(), 100.0) / 14.0
        else:
            room = max(vb.width(), 100.0) / (7.0 * min(chars, max(len(s) for s in labels)) + 10.0)
        return [thinned_ticks(labels, max_labels=max(2, int(room)), max_chars=chars)]

    widget.set_data(np.ones((13, 60)), list(rows), list(cols))  # equal labels (new lists): kept
    assert calls == []
    assert widget.plot.getAxis("left")._tickLevels == fresh("left", rows, 14)
    assert widget.plot.getAxis("bottom")._tickLevels == fresh("bottom", cols, 8)
    moved = [f"tok{i}" for i in range(7, 67)]  # the window moved: new column labels, the same rows
    widget.set_data(np.ones((13, 60)), rows, moved)
    assert len(calls) == 1 and widget.plot.getAxis("bottom")._tickLevels == fresh("bottom", moved, 8)
    calls.clear()
    widget.resize(300, 400)  # a new width: the columns thinned again for it
    qtbot.waitUntil(lambda: widget.plot.vb.width() < 250)
    widget.set_data(np.ones((13, 60)), rows, moved)
    assert widget.plot.getAxis("bottom")._tickLevels == fresh("bottom", moved, 8)
    assert widget.plot.getAxis("left")._tickLevels == fresh("left", rows, 14)


def test_a_small_overlay_is_kept_hidden_under_a_matrix_without_hidden_cells_and_shown_again_for_its_mask(
        qtbot, monkeypatch):
    from explorer.ui.widgets import heatmap as module

    calls = []
    real = module.mask_overlay
    monkeypatch.setattr(module, "mask_overlay", lambda hidden: calls.append(1) or real(hidden))
    widget = module.Heatmap()
    qtbot.addWidget(widget)
    blank = np.full((12, 13), np.nan, np.float32)  # a panel's blank while it computes
    widget.set_data(blank)
    first = widget._overlay.image.copy()
    assert len(calls) == 1 and widget.overlay_mask().all()
    widget.set_data(np.ones((12, 13)))  # the numbers: no hatching shown
    assert not widget._overlay.isVisible() and not widget.overlay_mask().any()
    widget.set_data(blank)  # the next switch's blank: the same overlay shown again, not drawn anew
    assert len(calls) == 1 and widget.overlay_mask().all()
    np.testing.assert_array_equal(widget._overlay.image, first)
    other = np.ones((12, 13))
    other[:, 4] = np.nan  # another mask: drawn anew
    widget.set_data(other)
    assert len(calls) == 2 and np.array_equal(widget.overlay_mask(), np.isnan(other))
    big = np.full((300, 300), np.nan)  # a large overlay is not kept once hidden
    widget.set_data(big)
    widget.set_data(np.ones((300, 300)))
    assert widget._overlay.image is None and widget._overlay_of is None
    widget.set_data(big)
    assert len(calls) == 4 and widget.overlay_mask().all()


def test_the_colour_bar_is_given_new_levels_only(qtbot, monkeypatch):
    widget = Heatmap()
    qtbot.addWidget(widget)
    calls = []
    real = widget.colorbar.setLevels
    monkeypatch.setattr(widget.colorbar, "setLevels", lambda *a, **k: (calls.append(a), real(*a, **k)))
    widget.set_data(np.random.default_rng(0).random((5, 6)), levels=(0.0, 2.0))
    widget.set_data(np.random.default_rng(1).random((5, 6)), levels=(0.0, 2.0))  # the same levels: kept
    assert len(calls) == 1 and tuple(widget.colorbar.levels()) == (0.0, 2.0)
    assert tuple(widget.image.levels) == (0.0, 2.0)
    widget.set_data(np.random.default_rng(2).random((5, 6)), levels=(-1.0, 2.0))
    assert len(calls) == 2 and tuple(widget.colorbar.levels()) == (-1.0, 2.0) == tuple(widget.image.levels)


def test_a_map_prepared_off_the_gui_thread_shows_the_same_pixels_values_and_hatching(qtbot):
    """A panel's worker prepares a large map (``heatmap_image``); shown, it is the map ``set_data`` makes itself."""
    from explorer.ui.widgets.heatmap_image import heatmap_image

    rng = np.random.default_rng(3)
    scores = rng.normal(size=(40, 40)).astype(np.float32)
    scores[np.triu_indices(40, 1)] = -np.inf  # causal scores: the hidden cells
    masked = np.zeros((40, 40), dtype=bool)
    masked[5, 2] = True
    widgets = []
    for given in (scores, heatmap_image(scores, masked=masked, overlay=True)):
        w = Heatmap()
        qtbot.addWidget(w)
        w.resize(300, 300)
        w.show()
        qtbot.waitExposed(w)
        w.set_data(given, masked=masked if given is scores else None, value_name="score")
        widgets.append(w)
    plain, prepared = widgets
    assert prepared.levels == plain.levels == (float(scores[np.isfinite(scores) & ~masked].min()),
                                               float(scores[np.isfinite(scores) & ~masked].max()))
    np.testing.assert_array_equal(prepared.overlay_mask(), ~np.isfinite(scores) | masked)
    np.testing.assert_array_equal(prepared.overlay_mask(), plain.overlay_mask())
    assert prepared.cell_text(7, 3) == plain.cell_text(7, 3) and "score = " in prepared.cell_text(7, 3)
    assert prepared.grab().toImage() == plain.grab().toImage()
