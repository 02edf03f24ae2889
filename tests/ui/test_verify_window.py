"""Help > Verify this model: the check on a worker, its table per layer, one line where it cannot run."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from explorer.ui.window.verify_dialog import VerifyDialog

transformers = pytest.importorskip("transformers")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "core"))


@pytest.fixture(scope="module")
def hf_checkpoint(tmp_path_factory):
    from test_verify import saved

    path = tmp_path_factory.mktemp("hf") / "tiny-gpt2"
    saved("gpt2", path)
    return path


def _run(qtbot, dialog: VerifyDialog):
    with qtbot.waitSignal(dialog.finished_check, timeout=120_000) as blocker:
        dialog.start()
    return blocker.args[0]


def test_the_window_verifies_its_checkpoint_and_shows_a_row_per_layer(qtbot, make_window, hf_checkpoint):
    window = make_window()
    with qtbot.waitSignal(window.trace_applied, timeout=60_000):
        window.open_checkpoint(str(hf_checkpoint))
    help_menu = window.menuBar().actions()[-1].menu()
    action = next(a for a in help_menu.actions() if a.text() == "&Verify this model…")
    window.set_prompt("w5 w17 w99 w3")
    action.trigger()  # Help > Verify this model: the session's checkpoint and prompt, started at once
    dialog = window.findChild(VerifyDialog)
    with qtbot.waitSignal(dialog.finished_check, timeout=120_000) as blocker:
        pass
    report = blocker.args[0]
    assert report.prompt_ids_equal is True and list(report.ids) == [5, 17, 99, 3]
    assert report.passed
    L = window.loaded.config.n_layers
    assert dialog.table.rowCount() == L + 1 + 2  # embeddings, each layer, the logits, the token ids
    headers = [dialog.table.horizontalHeaderItem(c).text() for c in range(dialog.table.columnCount())]
    passed, cosine = headers.index("passed"), headers.index("residual cosine (lowest)")
    assert dialog.table.item(1, 0).text() == "layer 0" and dialog.table.item(1, passed).text() == "yes"
    for row in range(L + 1):  # beside max |diff|, each layer's lowest cosine (issue 42): 1 to 7 decimals here
        assert float(dialog.table.item(row, cosine).text()) >= 0.9999990
    assert "Within tolerance" in dialog.verdict.text() and dialog.progress.value() == dialog.progress.maximum()


def test_what_the_reference_cannot_read_is_one_line(qtbot, window):
    dialog = VerifyDialog(window.session.source, None, window)  # the app's own format
    qtbot.addWidget(dialog)
    message = _run(qtbot, dialog)
    assert isinstance(message, str) and "transformers does not read" in message and "\n" not in message
    assert dialog.status.text() == message and dialog.table.rowCount() == 0


def test_without_transformers_one_line_says_how_to_install_it(qtbot, window, hf_checkpoint, monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers raises ImportError
    dialog = VerifyDialog(str(hf_checkpoint), None, window)
    qtbot.addWidget(dialog)
    message = _run(qtbot, dialog)
    assert "pip install" in message and "verify" in message


def test_cancel_stops_the_check(qtbot, window, hf_checkpoint):
    dialog = VerifyDialog(str(hf_checkpoint), None, window)
    qtbot.addWidget(dialog)
    dialog.cancel.set()  # cancelled before its first step
    message = _run(qtbot, dialog)
    assert message == "Cancelled." and dialog.report is None
