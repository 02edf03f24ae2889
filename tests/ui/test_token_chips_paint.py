"""Token chips paint only the chips a repaint's region meets, and those exactly as a whole repaint does."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QPoint, QRect
from PySide6.QtGui import QImage, QRegion

import explorer.ui  # noqa: F401  (binding and pyqtgraph options)
from explorer.core.tokenize.display import ChipView
from explorer.ui.widgets.token_chips import TokenChips


def _chips(n: int) -> list[ChipView]:
    return [ChipView(i, 1000 + i, f"tok{i % 37}" + "x" * (i % 5), b"t", False, False,
                     ["#fde68a", "#bfdbfe", "#bbf7d0"][i % 3]) for i in range(n)]


@pytest.mark.parametrize("band", [(0.0, 0.2), (0.45, 0.55), (0.8, 1.0)])
def test_a_region_of_the_chips_repaints_as_the_whole_widget_paints_it(qtbot, band):
    chips = TokenChips()
    qtbot.addWidget(chips)
    chips.set_chips(_chips(300))
    chips.resize(420, chips.heightForWidth(420))
    chips.show()
    qtbot.waitExposed(chips)
    chips.set_selected(150)
    whole = chips.grab().toImage().convertToFormat(QImage.Format.Format_ARGB32)
    height = whole.height()
    assert height > 400  # many rows of chips
    region = QRect(0, int(band[0] * height), whole.width(), max(1, int((band[1] - band[0]) * height)))
    part = QImage(whole.size(), QImage.Format.Format_ARGB32)
    part.fill(0)
    chips.render(part, region.topLeft(), QRegion(region))  # the region, drawn where it lies
    inner = region.adjusted(0, 1, 0, -1)  # (a glyph cut by the region's edge antialiases its edge row differently)
    assert part.copy(inner) == whole.copy(inner)
    blank = QImage(region.size(), QImage.Format.Format_ARGB32)
    blank.fill(0)
    assert part.copy(region) != blank  # chips were drawn in it


def test_chips_measured_for_an_earlier_prompt_lay_out_as_a_fresh_widget_lays_them_out(qtbot):
    """An edit re-measures only new chips: the kept widths give the very rectangles a fresh widget computes."""
    first, second = _chips(120), _chips(160)[40:]  # the edit keeps some labels, ids and positions shift
    second = [ChipView(i, c.token_id * 10 ** (3 * (i % 3)), c.label, c.data, c.partial, c.special, c.colour)
              for i, c in enumerate(second)]
    edited, fresh = TokenChips(), TokenChips()
    for w in (edited, fresh):
        qtbot.addWidget(w)
        w.resize(420, 300)
    edited.set_chips(first)
    edited.set_chips(second)
    fresh.set_chips(second)
    assert [edited.chip_rect(i) for i in range(len(second))] == [fresh.chip_rect(i) for i in range(len(second))]
    assert edited.heightForWidth(333) == fresh.heightForWidth(333)


def test_every_chip_is_found_under_its_centre_and_nothing_between_rows(qtbot):
    chips = TokenChips()
    qtbot.addWidget(chips)
    chips.set_chips(_chips(300))
    chips.resize(420, chips.heightForWidth(420))
    rects = [chips.chip_rect(i) for i in range(300)]
    assert [chips.chip_at(r.center()) for r in rects] == list(range(300))
    assert len({r.top() for r in rects}) > 10  # many rows
    below = max(r.bottom() for r in rects) + 2
    assert chips.chip_at(rects[0].center() + QPoint(0, below)) is None
    assert chips.chip_at(QPoint(rects[0].left() - 2, rects[0].center().y())) is None  # the margin before a row
