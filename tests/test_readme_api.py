"""The README's Python API example runs as written, and prints what it says it prints."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def _api_example() -> str:
    text = README.read_text(encoding="utf-8")
    section = text.split("## Python API", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_readme_python_api_example_runs():
    code = _api_example()
    assert "load_checkpoint" in code and "generate" in code
    out = io.StringIO()
    namespace: dict = {}
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(README), "exec"), namespace)  # noqa: S102 - our own README
    trace, result, model = namespace["trace"], namespace["result"], namespace["model"]
    n = len(trace.tokens)
    assert trace["blocks.0.attn.pattern"].shape == (model.config.n_heads, n, n)
    assert result.n_new == 8 or result.stop_reason != "max_new_tokens"
    lines = out.getvalue().splitlines()
    assert f"({model.config.n_heads}, {n}, {n})" in lines[0]
    assert lines[1].endswith(result.stop_reason)


def test_public_api_names_resolve():
    import explorer.core as core

    for name in core.__all__:
        assert getattr(core, name) is not None
    assert "load_checkpoint" in dir(core)
