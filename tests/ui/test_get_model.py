"""File ▸ Get a model…, driven as a user would, against the local Hub of tests/fake_hub.py."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest

from explorer.core.download import SUGGESTED
from explorer.ui.window.chrome.hub_dialog import HubCacheDialog
from explorer.ui.window.get_model import GetModelDialog
from fake_hub import Fault

SMOL = "HuggingFaceTB/SmolLM2-135M-Instruct"


@pytest.fixture()
def hub(fake_hub, hub_repo_files):
    fake_hub.add(SMOL, hub_repo_files)  # the suggestion, served with the tiny GPT-2's files
    return fake_hub


def click(widget) -> None:
    QTest.mouseClick(widget, Qt.MouseButton.LeftButton)


def pick(dialog: GetModelDialog, repo_id: str) -> None:
    row = [s.repo_id for s in SUGGESTED].index(repo_id)
    item = dialog.list.topLevelItem(row)
    rect = dialog.list.visualItemRect(item)
    QTest.mouseClick(dialog.list.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())


def test_pick_a_suggestion_download_and_it_is_cached(qtbot, hub, settings, hub_repo_files):
    dialog = GetModelDialog(settings)
    qtbot.addWidget(dialog)
    dialog.show()
    assert dialog.list.topLevelItemCount() == len(SUGGESTED)
    pick(dialog, SMOL)
    assert dialog.repo.text() == SMOL
    with qtbot.waitSignal(dialog.finished_download, timeout=120_000) as done:
        click(dialog.download_button)
    path = done.args[0]
    assert dialog.chosen == path and dialog.bar.value() == dialog.bar.maximum()
    from pathlib import Path

    assert (Path(path) / "model.safetensors").read_bytes() == hub_repo_files["model.safetensors"]
    assert not hub.fetched("modeling_evil.py")
    listed = HubCacheDialog()  # File ▸ Open from Hugging Face cache now lists it
    qtbot.addWidget(listed)
    assert SMOL in [m.repo_id for m in listed.models]


def test_cancel_then_resume_from_the_dialog(qtbot, hub, settings, hub_repo_files):
    hub.faults[SMOL, "model.safetensors"] = Fault(bytes_per_second=8_000_000)
    dialog = GetModelDialog(settings)
    qtbot.addWidget(dialog)
    dialog.show()
    dialog.repo.setText(SMOL)
    click(dialog.download_button)
    qtbot.waitUntil(lambda: "model.safetensors" in dialog.status.text() and dialog.bar.value() > 300,
                    timeout=60_000)
    assert "MB/s" in dialog.status.text() and "left" in dialog.status.text()
    click(dialog.cancel_button)
    qtbot.waitUntil(lambda: dialog.download_button.isEnabled(), timeout=60_000)
    assert dialog.download_button.text() == "Resume" and "Resume goes on from there" in dialog.status.text()
    hub.faults.clear()
    with qtbot.waitSignal(dialog.finished_download, timeout=120_000):
        click(dialog.download_button)
    ranges = [r.range for r in hub.fetched("model.safetensors") if r.range]
    assert ranges, "the resumed download asked only for the missing bytes"


def test_failures_are_one_line_in_the_dialog(qtbot, hub, settings):
    dialog = GetModelDialog(settings)
    qtbot.addWidget(dialog)
    dialog.show()
    dialog.repo.setText("no-such/model")
    click(dialog.download_button)
    qtbot.waitUntil(lambda: dialog.download_button.isEnabled(), timeout=60_000)
    text = dialog.status.text()
    assert text.startswith("no repository no-such/model on the Hub") and "\n" not in text
    assert dialog.chosen is None and dialog.isVisible()
