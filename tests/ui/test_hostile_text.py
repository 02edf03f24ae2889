"""Issue 34: text read from a file is cut before a widget lays it out. A trace file whose prompt is 10 MB on
one line and whose model name is 50 MB opens in the window in bounded time, its prompt and name cut with a
note (before, PromptEditor.set_text and a QLabel's layout took minutes)."""

from __future__ import annotations

import json
import struct

from safetensors.numpy import load_file, save_file

from explorer.core.interop import write_trace_safetensors


def _metadata(path) -> dict[str, str]:
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n))["__metadata__"]


def test_a_trace_file_with_a_10_mb_prompt_and_a_50_mb_name_opens_with_both_cut(qtbot, window, tmp_path):
    original = window.trace
    path = write_trace_safetensors(original, tmp_path / "plain.safetensors", prompt=window.prompt.text())
    hostile = tmp_path / "hostile.safetensors"
    save_file(load_file(str(path)), str(hostile), metadata={**_metadata(path), "prompt": "p" * 10_000_000,
                                                            "model_name": "N" * 50_000_000})
    with qtbot.waitSignal(window.trace_applied, timeout=120_000):  # a generous bound: it took minutes before
        window.open_trace_file(hostile)
    text = window.prompt.text()
    assert text.startswith("ppp") and len(text) < 60_000 and "10,000,000" in text
    assert len(window.status.fields["model"].text()) < 400 and len(window.windowTitle()) < 400
    assert "prompt in the file has 10,000,000 characters" in window.prompt.notice.text()
    assert window.trace.tokens == original.tokens and window.trace is not original  # the tokens are all there
