"""The toolbar's Weights choice: before loading, the window says what the weights take each way; the model
opens held the way chosen (or the one that fits, with auto), and the status bar says what they are stored in."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from PySide6.QtTest import QTest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "core"))

from decoder_reference import build  # noqa: E402
from gguf_files import write_model  # noqa: E402


@pytest.fixture(scope="module")
def q8_file(tmp_path_factory):
    return write_model(build("LlamaConfig", "LlamaForCausalLM", num_key_value_heads=2),
                       tmp_path_factory.mktemp("gguf") / "m.gguf", "llama", "Q8_0")


def pick(combo, text: str) -> None:
    """Choose ``text`` in a combo box by typing its first letters, as a user does (one activation)."""
    combo.setFocus()
    QTest.keyClicks(combo, text[:3])
    assert combo.currentText() == text


def test_the_loading_line_says_what_each_way_takes_and_the_model_is_held_that_way(qtbot, make_window, q8_file):
    window = make_window()
    stages = []
    window.session.loading.connect(stages.append)
    with qtbot.waitSignal(window.model_loaded, timeout=60_000):
        window.open_checkpoint(str(q8_file))
    said = next(s for s in stages if "would take" in s)
    assert "weights kept as stored" in said and "all expanded would take" in said  # auto keeps a quantised file
    assert "Q8_0" in window.status.fields["dtype"].text()
    assert window.device_controls.weights == "auto"

    stages.clear()
    with qtbot.waitSignal(window.model_loaded, timeout=60_000):
        pick(window.device_controls.weights_combo, "dequantize")  # reopens the model, every weight expanded
    said = next(s for s in stages if "would take" in s)
    assert said.split(": ", 1)[1].startswith("weights all expanded")
    assert window.status.fields["dtype"].text() == "float32"  # nothing stored in less than it is computed in
    assert window.device_controls.weights == "dequantize"
