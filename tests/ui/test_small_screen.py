"""Issue 42, item 1: a GGUF model on a 1280x800 laptop screen.

Opening a GGUF file from a long path widened the window from 1,203 to over 1,700 px (the status bar's
loading line asked for its whole width and the window never gave it back), pushing docks off the
screen; Help > About was wider than the screen, its Close button cut off.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, QRect
from PySide6.QtWidgets import QApplication, QDialogButtonBox

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "core"))

from decoder_reference import build  # noqa: E402
from gguf_files import write_model  # noqa: E402

SCREEN_W, SCREEN_H = 1280, 800
START_W, START_H = 1203, 752  # the window's first size on a 1280x800 screen (94 % of it)


@pytest.fixture(scope="module")
def gguf_far_away(tmp_path_factory):
    """A quantised GGUF file where a user keeps models: deep in a folder named after the repository."""
    folder = tmp_path_factory.mktemp("home") / "someone" / "models" / "HuggingFaceTB" / "SmolLM2-135M-Instruct-GGUF"
    folder.mkdir(parents=True)
    return write_model(build("LlamaConfig", "LlamaForCausalLM", num_key_value_heads=2),
                       folder / "smollm2-135m-instruct-q4_0.gguf", "llama", "Q4_0")


def test_opening_a_gguf_file_keeps_the_window_within_a_laptop_screen(qtbot, make_window, tiny_checkpoint,
                                                                    gguf_far_away):
    window = make_window()
    window.resize(START_W, START_H)
    with qtbot.waitSignal(window.trace_applied, timeout=60_000):
        window.open_checkpoint(str(tiny_checkpoint))
    stages: list[str] = []
    window.session.loading.connect(lambda text: stages.append(window.status.stage.toolTip()) if text else None)
    with qtbot.waitSignal(window.trace_applied, timeout=60_000):
        window.open_checkpoint(str(gguf_far_away))  # File > Open, as the user did
    QApplication.processEvents()
    assert window.width() <= SCREEN_W, f"the window widened to {window.width()} px"
    assert window.minimumSizeHint().width() <= START_W
    assert any(str(gguf_far_away) in tip for tip in stages)  # the whole path is in the loading line's tooltip
    # the GGUF line (quantisation types) is a notice cut to the bar's width, the whole of it in the tooltip
    line = window.status.currentMessage()
    assert "Q4_0" in line and "dequantised" in line
    if window.status.fontMetrics().horizontalAdvance(line) > window.status.width():
        assert window.status.toolTip() == line


def test_about_fits_the_screen_for_a_gguf_model(qtbot, window, gguf_far_away):
    from explorer.core.checkpoint import load_checkpoint
    from explorer.ui.window.about import AboutDialog

    dialog = AboutDialog(load_checkpoint(gguf_far_away, device="cpu"), window)
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitExposed(dialog)
    screen = dialog.screen().availableGeometry()
    frame = dialog.frameGeometry()
    assert frame.width() <= min(SCREEN_W, screen.width()) and frame.height() <= min(SCREEN_H, screen.height())
    assert "Q4_0" in dialog.text  # the quantisation line is there, wrapped
    close = dialog.findChild(QDialogButtonBox).button(QDialogButtonBox.StandardButton.Close)
    assert close.isVisible()
    where = QRect(close.mapTo(dialog, QPoint(0, 0)), close.size())
    assert dialog.rect().contains(where), f"the Close button at {where} is outside the dialog {dialog.rect()}"


def test_patching_fields_are_readable_at_1280x800(qtbot, window):
    """Item 3: the corrupted prompt, the target and the distractor were 30-75 px wide: what was typed could
    not be read. Typed into, as the user does, each shows its text (30 characters of the prompt at least)."""
    from PySide6.QtCore import Qt
    from PySide6.QtTest import QTest

    window.resize(SCREEN_W, SCREEN_H)
    dock = next(d for d in window.docks if hasattr(d.panel, "corrupt_edit"))  # Activation patching
    dock.show()
    dock.raise_()
    qtbot.waitUntil(dock.panel.isVisible)
    panel = dock.panel
    typed = {panel.corrupt_edit: "When Mary and John went to the store, Mary gave a drink to",
             panel.target_edit: " John", panel.distractor_edit: " Mary"}
    for field, text in typed.items():
        QTest.mouseClick(field, Qt.MouseButton.LeftButton)
        QTest.keyClicks(field, text)
        assert field.text() == text
    QApplication.processEvents()
    metrics = panel.corrupt_edit.fontMetrics()
    assert panel.corrupt_edit.width() >= metrics.horizontalAdvance(typed[panel.corrupt_edit][:30]) + 12
    for field in (panel.target_edit, panel.distractor_edit):
        assert field.width() >= field.fontMetrics().horizontalAdvance(" Mary and") + 12, field.width()


def shown_whole(table, row: int, col: int) -> bool:
    """Whether a cell's text is painted whole: it fits its column less the margins Qt's item views leave (the
    focus frame's margin + 1 on each side) and the column is inside the table's viewport."""
    from PySide6.QtCore import Qt
    from PySide6.QtWidgets import QStyle

    text = table.item(row, col).text()
    margin = table.style().pixelMetric(QStyle.PixelMetric.PM_FocusFrameHMargin, None, table) + 1
    room = table.columnWidth(col) - 2 * margin
    inside = 0 <= table.columnViewportPosition(col) and \
        table.columnViewportPosition(col) + table.columnWidth(col) <= table.viewport().width()
    return inside and table.fontMetrics().elidedText(text, Qt.TextElideMode.ElideMiddle, room) == text


@pytest.mark.parametrize("size", [(1280, 800), (1600, 1000)])
def test_the_patching_list_shows_whole_component_names(qtbot, window, size):
    """Polish 43: at 1600x1000 the list of the largest shares restored read "s…" in its component column (the
    value column, "+0.1234 (estimate)", took the width). After a patching run, as the user starts it, every
    listed name and value is painted whole, the full name in its tooltip, the window no wider."""
    from PySide6.QtCore import Qt
    from PySide6.QtTest import QTest

    from explorer.ui.panels.interventions.patching_worker import ESTIMATE

    window.resize(*size)
    with qtbot.waitSignal(window.presenter.drawn, timeout=60_000):
        window.set_prompt("When Mary and John went to the store, John gave a drink to")
    window.raise_panel("patching")
    panel = window.panel("patching")
    qtbot.waitUntil(lambda: panel.isVisible() and panel.trace is window.trace and window.presenter.is_idle(),
                    timeout=60_000)
    QTest.mouseClick(panel.corrupt_edit, Qt.MouseButton.LeftButton)
    QTest.keyClicks(panel.corrupt_edit, "When Mary and John went to the store, Mary gave a drink to")
    panel.mode_box.setCurrentIndex(panel.mode_box.findData(ESTIMATE))  # every value an estimate: the widest
    qtbot.waitUntil(panel.run_button.isEnabled, timeout=10_000)
    QTest.mouseClick(panel.run_button, Qt.MouseButton.LeftButton)
    table = panel.ranked.table
    qtbot.waitUntil(lambda: panel.run_button.isEnabled() and table.rowCount() > 0, timeout=60_000)
    rows = range(table.rowCount())
    assert any(table.item(r, 1).text().startswith("stream final @ ") for r in rows)  # the longest kind of name

    def whole() -> None:  # (the list asks for its width; the splitter gives it on its next layout)
        cut = [(table.item(r, c).text(), table.columnWidth(c)) for r in rows for c in (1, 2)
               if not shown_whole(table, r, c)]
        assert not cut, f"painted cut (text, column px): {cut}"

    qtbot.waitUntil(whole, timeout=5_000)
    assert all(table.item(r, 2).text().startswith("\u2248") for r in rows)  # estimates, marked as such
    assert all(table.item(r, 1).toolTip().startswith(table.item(r, 1).text()) for r in rows)
    assert window.width() <= size[0]
