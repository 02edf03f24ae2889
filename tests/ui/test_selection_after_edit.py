"""Issue 42, item 2: after a prompt edit the selected position stayed at the old index. A researcher who
had the last token selected typed more at the end of the prompt; the Logit attribution then answered about
"4:' went'" of a 17-token prompt whose question was about the last token, and What changed did the same.
The selection at the end of the prompt follows the end."""

from __future__ import annotations

from PySide6.QtCore import QPointF, Qt
from PySide6.QtGui import QTextCursor
from PySide6.QtTest import QTest

from explorer.core.interventions.spec import parse_spec

PROMPT = "When Mary and John went to the store, John gave a drink"


def click_cell(heatmap, row: int, col: int) -> None:
    """A left click on a heatmap's cell, through its viewport as a mouse does."""
    view = heatmap
    scene = heatmap.plot.vb.mapViewToScene(QPointF(col + 0.5, row + 0.5))
    QTest.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier,
                     view.mapFromScene(scene))


def typed(qtbot, window, text: str) -> None:
    """Typed at the end of the prompt box, as a user does (each key an edit; the trace follows the pause)."""
    edit = window.prompt.edit
    edit.setFocus()
    cursor = edit.textCursor()
    cursor.movePosition(QTextCursor.MoveOperation.End)
    edit.setTextCursor(cursor)
    QTest.keyClicks(edit, text)


def drawn_with(window, n: int):
    return lambda frame: frame.trace.n_tokens == n and frame.trace is window.trace


def test_an_edit_at_the_end_keeps_the_last_token_selected(qtbot, window):
    with qtbot.waitSignal(window.presenter.drawn, timeout=30_000):
        window.set_prompt(PROMPT)
    window.session.set_interventions([parse_spec("0.1")])  # What changed then compares two runs
    qtbot.waitUntil(lambda: window.presenter.is_idle() and bool(window.trace.interventions), timeout=30_000)
    n = window.trace.n_tokens
    window.raise_panel("residual")
    residual = window.panel("residual")
    qtbot.waitUntil(lambda: residual.trace is window.trace and residual.norm_map.isVisible(), timeout=30_000)
    click_cell(residual.norm_map, 0, n - 1)  # the last token, clicked
    assert window.selection.token == n - 1

    typed(qtbot, window, " to")  # the question now ends one token later
    qtbot.waitUntil(lambda: window.trace.n_tokens == n + 1 and window.presenter.is_idle(), timeout=30_000)
    last = n
    assert window.selection.token == last
    for panel_id in ("dla", "what_changed"):
        window.raise_panel(panel_id)
        panel = window.panel(panel_id)
        qtbot.waitUntil(lambda: panel.trace is window.trace and window.presenter.is_idle(), timeout=30_000)
        assert f"after {last}:" in panel.info.text(), (panel_id, panel.info.text())
    assert window.panel("dla").result.position == last

    # an edit elsewhere (the selection not at the end) keeps the position chosen
    window.raise_panel("residual")
    qtbot.waitUntil(lambda: residual.norm_map.isVisible() and window.presenter.is_idle(), timeout=30_000)
    click_cell(residual.norm_map, 0, 2)
    assert window.selection.token == 2
    typed(qtbot, window, " Mary")
    qtbot.waitUntil(lambda: window.trace.n_tokens > n + 1 and window.presenter.is_idle(), timeout=30_000)
    assert window.selection.token == 2
