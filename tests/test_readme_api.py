"""The README's Python API example runs as written, and prints what it says it prints."""

from __future__ import annotations

import contextlib
import io
import re
import time
from pathlib import Path

import numpy as np

README = Path(__file__).resolve().parents[1] / "README.md"


def _api_example() -> str:
    text = README.read_text(encoding="utf-8")
    section = text.split("## Python API", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_readme_python_api_example_runs(tmp_path, monkeypatch):
    """The example as written: its prints, its safetensors file, and its ``explorer.show`` window, which
    blocks in Qt's event loop until a timer here closes it once the window has drawn its first trace."""
    from PySide6.QtCore import QSettings, QTimer
    from PySide6.QtWidgets import QApplication

    from explorer.ui.app import ensure_app
    from explorer.ui.main_window import MainWindow

    code = _api_example()
    assert "load_checkpoint" in code and "generate" in code and "explorer.show(" in code
    monkeypatch.chdir(tmp_path)
    QSettings.setDefaultFormat(QSettings.Format.IniFormat)  # the window's settings go to tmp_path, not the user's
    QSettings.setPath(QSettings.Format.IniFormat, QSettings.Scope.UserScope, str(tmp_path))
    app = ensure_app()
    seen: list = []
    started = time.monotonic()

    def close_when_drawn() -> None:
        windows = [w for w in QApplication.topLevelWidgets() if isinstance(w, MainWindow) and w.isVisible()]
        drawn = [w for w in windows if w.trace is not None]
        if drawn or time.monotonic() - started > 120:
            seen.extend(w.trace for w in drawn)
            for w in windows:
                w.close()
            app.quit()
        else:
            QTimer.singleShot(100, close_when_drawn)

    QTimer.singleShot(100, close_when_drawn)
    out = io.StringIO()
    namespace: dict = {}
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(code, str(README), "exec"), namespace)  # noqa: S102 - our own README
    finally:
        QSettings.setDefaultFormat(QSettings.Format.NativeFormat)
    trace, result, model = namespace["trace"], namespace["result"], namespace["model"]
    n = len(trace.tokens)
    assert trace["blocks.0.attn.pattern"].shape == (model.config.n_heads, n, n)
    assert result.n_new == 8 or result.stop_reason != "max_new_tokens"
    lines = out.getvalue().splitlines()
    assert f"({model.config.n_heads}, {n}, {n})" in lines[0]
    assert lines[1].endswith(result.stop_reason)
    from explorer.core import read_trace_safetensors

    saved = read_trace_safetensors(tmp_path / "trace.safetensors")
    np.testing.assert_array_equal(saved["blocks.0.attn.pattern"], trace["blocks.0.attn.pattern"])
    assert len(seen) == 1 and seen[0].tokens == trace.tokens  # the window showed the same prompt
    assert namespace["window"].loaded.model is model.model  # on the very model the notebook holds


def test_public_api_names_resolve():
    import explorer.core as core

    for name in core.__all__:
        assert getattr(core, name) is not None
    assert "load_checkpoint" in dir(core)
