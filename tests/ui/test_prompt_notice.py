"""A long notice under the prompt stays on one line (cut with "…", the whole text in its tooltip):
it never covers the prompt's lines, which keep their full height, at laptop and narrow widths."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QPoint, QRect
from PySide6.QtWidgets import QApplication

LONG = ("worked-example cannot read the prompt in the box: not in this model's vocabulary: 'The', 'capital', "
        "'of', 'France'. It knows: 'Today', 'is', 'sunday', 'saturday', and this line goes on long enough to "
        "wrap two or three times in a narrow window,\nwith a second line too.")


def rect(widget, window) -> QRect:
    return QRect(widget.mapTo(window, QPoint(0, 0)), widget.size())


@pytest.mark.parametrize("width", [1280, 760])
@pytest.mark.parametrize("kind", ["show_error", "show_notice"])
def test_a_long_notice_never_covers_the_prompt(qtbot, make_window, width, kind):
    window = make_window()
    window.resize(width, 800)
    prompt = window.prompt
    prompt.set_text("the first line of the prompt\nthe second line of the prompt\nthe third line")
    getattr(prompt, kind)(LONG)
    qtbot.waitUntil(lambda: prompt.notice.isVisible())
    for _ in range(3):
        QApplication.processEvents()
    edit, notice = rect(prompt.edit, window), rect(prompt.notice, window)
    assert not edit.intersects(notice), (edit, notice)
    assert rect(prompt, window).contains(notice), "the notice is drawn outside the prompt's row"
    line = prompt.edit.fontMetrics().lineSpacing()
    assert prompt.edit.viewport().height() >= 3 * line, "the prompt's lines were squeezed by the notice"
    assert notice.height() <= 2 * prompt.notice.fontMetrics().height() + 4  # one line
    assert prompt.notice.text() == LONG and prompt.notice.toolTip() == LONG
    assert prompt.notice.shown_text().endswith("\u2026") and "\n" not in prompt.notice.shown_text()
