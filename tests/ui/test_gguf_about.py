"""Help > About names a GGUF model's quantisation and says the numbers are the dequantised weights'."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "core"))

from decoder_reference import build  # noqa: E402
from gguf_files import write_model  # noqa: E402

from explorer.core.checkpoint import load_checkpoint  # noqa: E402
from explorer.ui.window.about import AboutDialog, versions  # noqa: E402


def test_about_names_the_quantisation_of_a_gguf_model(qtbot, tmp_path):
    path = write_model(build("LlamaConfig", "LlamaForCausalLM", num_key_value_heads=2), tmp_path / "m.gguf",
                       "llama", "Q4_0")
    loaded = load_checkpoint(path, device="cpu")
    weights = versions(loaded)["weights"]
    assert "16 Q4_0, 5 F32" in weights and "dequantised" in weights
    dialog = AboutDialog(loaded)
    qtbot.addWidget(dialog)
    assert "Q4_0" in dialog.text
