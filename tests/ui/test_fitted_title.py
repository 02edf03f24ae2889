"""A plot title elided to its width (``FittedTitle``): a resize to the width it was fitted for and a tooltip
equal to the one set are no-ops; a new width or text is fitted again."""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import QSizeF

import explorer.ui  # noqa: F401  (binds pyqtgraph to PySide6)
from explorer.ui.widgets.axis import FittedTitle, readable, thin_axes

LONG = "L3 neuron #1234: activation at each token (selected: 'word' (17) = 0.1234)"


def shown_plot(qtbot, width: int) -> tuple[pg.PlotWidget, pg.PlotItem]:
    """A readable plot (thin axes, a ``FittedTitle``) shown at ``width`` x 200."""
    widget = pg.PlotWidget(axisItems=thin_axes())
    qtbot.addWidget(widget)
    plot = readable(widget)
    widget.resize(width, 200)
    widget.show()
    qtbot.waitExposed(widget)
    return widget, plot


def test_a_resize_to_the_same_width_does_not_fit_again_a_new_one_does(qtbot, monkeypatch):
    widget, plot = shown_plot(qtbot, 260)
    title = plot.titleLabel
    assert isinstance(title, FittedTitle)
    plot.setTitle(LONG)
    qtbot.waitUntil(lambda: title.rect().width() >= 40)
    plot.setTitle(LONG + " ")  # fitted at the laid-out width
    assert title.is_elided() and title.toolTip() == LONG + " "
    fits, tips = [], []
    original = title._fitted
    monkeypatch.setattr(title, "_fitted", lambda: fits.append(1) or original())
    set_tip = title.setToolTip
    monkeypatch.setattr(title, "setToolTip", lambda text: (tips.append(text), set_tip(text)))
    title.resize(QSizeF(title.size()))  # the same size: nothing fitted
    title.resizeEvent(type("E", (), {})())  # a resize event at the width it was fitted for
    assert fits == []
    title.resize(QSizeF(title.size().width() + 2000, title.size().height()))  # a new width: fitted again
    assert fits and title.item.toPlainText().strip() == LONG and tips == [""]
    tips.clear()
    plot.setTitle("short")
    assert tips == []  # the tooltip was "" already: not set again
    assert title.item.toPlainText().strip() == "short" and not title.is_elided()


def test_a_new_title_of_the_same_height_is_drawn_in_place_without_laying_the_plot_out_again(qtbot, monkeypatch):
    widget, plot = shown_plot(qtbot, 900)
    title = plot.titleLabel
    plot.setTitle("query 'the' (3): attention weight over the keys")
    qtbot.waitUntil(lambda: title.rect().width() >= 40 and title.rect().height() > 0)
    height = title.minimumHeight()
    geometry = []
    monkeypatch.setattr(title, "updateGeometry", lambda: geometry.append(1))
    plot.setTitle("query 'a much longer token' (17): attention weight over the keys")
    assert geometry == []  # one line as before: no re-layout of the plot
    assert title.item.toPlainText() == "query 'a much longer token' (17): attention weight over the keys"
    assert title.minimumWidth() == 0 and title.minimumHeight() == height
    plot.setTitle("two lines<br>now")  # a new height: laid out again
    assert geometry  # (setMinimumHeight asks too)
    assert title.item.toPlainText() == "two lines\nnow"


def test_the_same_tick_spacing_again_keeps_the_axis_drawing(qtbot):
    widget = pg.PlotWidget(axisItems=thin_axes())
    qtbot.addWidget(widget)
    axis = widget.getPlotItem().getAxis("left")
    axis.setTickSpacing(2, 2)
    axis.picture = "drawn"  # stands for the axis' cached drawing
    axis.setTickSpacing(2, 2)
    assert axis.picture == "drawn"
    axis.setTickSpacing(3, 3)
    assert axis.picture is None and axis._tickSpacing == [(3, 0.0), (3, 0.0)]
    axis.setTickSpacing()  # back to pyqtgraph's own spacing
    assert axis._tickSpacing is None


def test_plain_lines_are_remembered_per_title_the_same_as_a_fresh_document_and_never_stale(qtbot):
    from PySide6.QtGui import QTextDocument

    widget, plot = shown_plot(qtbot, 300)
    title = plot.titleLabel
    qtbot.waitUntil(lambda: title.rect().width() >= 40)
    rich = ["logit lens: positions 3\u20139; <span style='color:#ff8c00'>\u25a1</span> = the real next token",
            "a <b>bold</b> title<br>on two &amp; lines", "plain\ntwo lines"]
    for given in rich + rich:  # each title twice: the second time from what was kept
        plot.setTitle(given)
        document = QTextDocument()
        document.setHtml(given)
        fresh = document.toPlainText().splitlines() if "<" in given else given.splitlines()
        assert title.plain_lines(given) == fresh
        assert title.toolTip() in ("", "\n".join(fresh))
    kept = title._lines[rich[0]]
    assert title.plain_lines(rich[0]) is kept  # not parsed again
    plot.setTitle(rich[0].replace("3", "4"))  # a changed title is read anew
    assert title.plain_lines(rich[0].replace("3", "4")) == [kept[0].replace("3", "4")]
    for i in range(200):  # only so many kept
        title.plain_lines(f"t{i}")
    assert len(title._lines) <= 64 and title.plain_lines("t199") == ["t199"]


def test_the_styled_html_follows_a_changed_colour_and_the_same_html_is_not_set_again(qtbot, monkeypatch):
    widget, plot = shown_plot(qtbot, 600)
    title = plot.titleLabel
    qtbot.waitUntil(lambda: title.rect().width() >= 40)
    plot.setTitle("red title", color="#ff0000")
    assert "#ffff0000" in title.item.toHtml().lower() or "#ff0000" in title.item.toHtml().lower()
    plot.setTitle("red title", color="#0000ff")  # the same text, a new colour: styled anew
    assert "#0000ff" in title.item.toHtml().lower()
    sets = []
    original = title.item.setHtml
    monkeypatch.setattr(title.item, "setHtml", lambda text: (sets.append(text), original(text)))
    title._set_html(title._shown_html)  # what the item holds already
    assert sets == []
    plot.setTitle("another title")
    assert len(sets) == 1 and title.item.toPlainText() == "another title"
