"""The Python API example of docs/python-api.md (linked from the README) runs as written, and prints what it
says it prints."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "python-api.md"


def _api_example() -> str:
    text = PAGE.read_text(encoding="utf-8")
    section = text.split("## A first session", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


_RUNNER = """
import json, sys, time
from PySide6.QtCore import QSettings, QTimer
from PySide6.QtWidgets import QApplication
QSettings.setDefaultFormat(QSettings.Format.IniFormat)  # the window's settings go to the temporary directory
QSettings.setPath(QSettings.Format.IniFormat, QSettings.Scope.UserScope, sys.argv[2])
from explorer.ui.app import ensure_app
from explorer.ui.window.main_window import MainWindow
app = ensure_app()
seen, started = [], time.monotonic()

def close_when_drawn():
    windows = [w for w in QApplication.topLevelWidgets() if isinstance(w, MainWindow) and w.isVisible()]
    drawn = [w for w in windows if w.trace is not None]
    if drawn or time.monotonic() - started > 120:
        seen.extend(list(w.trace.tokens) for w in drawn)
        for w in windows:
            w.close()
    else:
        QTimer.singleShot(100, close_when_drawn)

QTimer.singleShot(100, close_when_drawn)
namespace = {}
exec(compile(open(sys.argv[1], encoding="utf-8").read(), "python-api.md", "exec"), namespace)
trace, model, window = namespace["trace"], namespace["model"], namespace["window"]
print("RESULT " + json.dumps({"tokens": list(trace.tokens), "n_heads": model.config.n_heads,
                              "n_new": namespace["result"].n_new, "stop_reason": namespace["result"].stop_reason,
                              "shown": seen, "same_model": window.loaded.model is model.model}))
"""


def test_python_api_example_runs(tmp_path):
    """The example as written, in a fresh process (its window runs Qt's event loop until closed): its
    prints, its safetensors file, and its ``explorer.show`` window, closed by a timer once it has drawn
    its first trace, which shows the same prompt on the very model the example holds."""
    code = _api_example()
    assert "load_checkpoint" in code and "generate" in code and "explorer.show(" in code
    (tmp_path / "example.py").write_text(code, encoding="utf-8")
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run([sys.executable, "-c", _RUNNER, str(tmp_path / "example.py"), str(tmp_path)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    result = json.loads(next(line for line in lines if line.startswith("RESULT "))[len("RESULT "):])
    n, heads = len(result["tokens"]), result["n_heads"]
    assert f"({heads}, {n}, {n})" in lines[0]
    assert lines[1].endswith(result["stop_reason"])
    assert result["n_new"] == 8 or result["stop_reason"] != "max_new_tokens"
    from explorer.core import load_checkpoint, read_trace_safetensors

    saved = read_trace_safetensors(tmp_path / "trace.safetensors")
    assert list(saved.tokens) == result["tokens"]
    reference = load_checkpoint("shakespeare", device="cpu").trace("To be, or not to be")
    np.testing.assert_allclose(saved["blocks.0.attn.pattern"], reference["blocks.0.attn.pattern"], atol=1e-6)
    assert result["shown"] == [result["tokens"]] and result["same_model"]


def test_public_api_names_resolve():
    import explorer.core as core

    for name in core.__all__:
        assert getattr(core, name) is not None
    assert "load_checkpoint" in dir(core)
