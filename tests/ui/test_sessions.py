"""Issue 42, sessions and "Reproduce in Python" (the window half).

File > Save session… then File > Open session… in a fresh process shows the same numbers on every visible
panel (their export data, as Export data as NPY would write it), with the same selection, interventions and
settings; a model whose file changed since is named and not shown silently. File > Export as script… writes
a script that, run in a fresh process, prints the window's numbers.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from explorer.core.interventions.spec import Intervention
from explorer.core.session_file import read

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "core"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from reopen_session import panel_arrays  # noqa: E402

PROMPT = "When Mary and John went to the store, John gave a drink to"
WIDTH, HEIGHT = 1200, 800


def fresh_process(tmp_path: Path, session: Path) -> tuple[dict, dict[str, np.ndarray]]:
    """``reopen_session.py`` in a new interpreter: File > Open session…, then every panel's data."""
    out = tmp_path / "reopened.npz"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "QT_QPA_PLATFORM": "offscreen"}
    done = subprocess.run([sys.executable, str(Path(__file__).with_name("reopen_session.py")), str(session), str(out),
                           str(WIDTH), str(HEIGHT)], capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    info = json.loads(done.stdout.strip().splitlines()[-1])
    arrays = dict(np.load(out)) if out.exists() and not info["failed"] else {}
    return info, arrays


def settled(window) -> bool:
    return (window.presenter.is_idle() and window.trace is not None
            and not any(p.computing() for p in window.panels if p.on_screen))


@pytest.fixture
def model_copy(tiny_checkpoint, tmp_path):
    return shutil.copytree(tiny_checkpoint, tmp_path / "tiny-model")


@pytest.fixture
def saved_session(qtbot, make_window, model_copy, tmp_path):
    """A window on a copy of the tiny model with a prompt, an intervention (and one switched off), a selection
    and sampling settings, saved with File > Save session."""
    window = make_window()
    window.resize(WIDTH, HEIGHT)
    with qtbot.waitSignal(window.trace_applied, timeout=60_000):
        window.open_checkpoint(str(model_copy))
    with qtbot.waitSignal(window.trace_applied, timeout=60_000):
        window.set_prompt(PROMPT)
    with qtbot.waitSignal(window.trace_applied, timeout=60_000):
        window.session.set_interventions([Intervention("head", 0, 1, "zero"), Intervention("head", 1, 0, "zero")])
    with qtbot.waitSignal(window.trace_applied, timeout=60_000):
        window.session.interventions.toggle(1, False)
    window.selection.set_layer_head(1, 1)
    window.selection.set_token(5)
    window.generation.controls.temperature.setValue(0.7)
    window.generation.controls.seed.setValue(1234)
    qtbot.waitUntil(lambda: settled(window), timeout=60_000)
    path = tmp_path / "s.explorer-session.json"
    with qtbot.waitSignal(window.session_files.saved, timeout=60_000):
        window.session_files.save(path)
    return window, path


def test_a_saved_session_reopens_in_a_fresh_process_with_the_same_numbers(qtbot, saved_session, tmp_path):
    window, path = saved_session
    here = panel_arrays(window, lambda condition: qtbot.waitUntil(condition, timeout=60_000))
    state = read(path)
    assert state.fingerprint is not None and state.fingerprint.digest
    info, there = fresh_process(tmp_path, path)
    assert info["failed"] == ""
    assert info["prompt"] == PROMPT and info["ids"] == [int(i) for i in window.trace.token_ids]
    assert info["selection"] == [1, 1, 5]
    assert info["interventions"] == [["head 0.1 zero", True], ["head 1.0 zero", False]]
    assert info["temperature"] == pytest.approx(0.7) and info["seed"] == 1234
    compared = sorted(set(here) & set(there))
    assert len(compared) >= 12 and set(here) == set(there), (sorted(here), sorted(there))
    print(f"{len(compared)} plots compared:", ", ".join(compared))
    assert any("attention" in name.lower() for name in compared)
    for name in compared:
        np.testing.assert_allclose(there[name], here[name], atol=1e-6, equal_nan=True, err_msg=name)


def test_a_changed_model_file_is_said_instead_of_showing_other_numbers(qtbot, saved_session, model_copy):
    window, path = saved_session
    weights = next(p for p in Path(model_copy).iterdir() if p.suffix == ".safetensors")
    data = bytearray(weights.read_bytes())
    data[-7] ^= 0x01  # one weight's last bit: same size, same shapes and names
    weights.write_bytes(bytes(data))
    asked = []
    with qtbot.waitSignal(window.session_files.failed, timeout=60_000) as blocker:
        window.session_files.open(path, confirm=lambda line: asked.append(line) or False)
    assert asked and "the model file changed since this session was saved" in asked[0]
    assert weights.name in asked[0] and "changed since this session was saved" in blocker.args[0]
    assert "changed since" in window.status.warning.text()


def test_the_exported_script_prints_the_windows_numbers(qtbot, saved_session, tmp_path):
    from test_export_script import parse

    window, _ = saved_session
    dla_dock = next(d for d in window.docks if type(d.panel).__name__ == "DLAPanel")
    dla_dock.raise_()  # the Logit attribution tab in front, as the user looks at it
    dla = dla_dock.panel
    qtbot.waitUntil(lambda: dla.result is not None and settled(window), timeout=60_000)
    script = tmp_path / "reproduce.py"
    with qtbot.waitSignal(window.session_files.saved, timeout=60_000):
        window.session_files.export_script(script)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=600,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    printed = parse(done.stdout)
    np.testing.assert_allclose(printed["attention pattern, layer 1 head 1"], window.trace.head(1, 1, "pattern"),
                               atol=1e-6)
    assert dla.result is not None and dla.result.position == 5
    matrix, _, _ = dla.exportables()[0].data()
    np.testing.assert_allclose(printed["direct logit attribution"], matrix, atol=1e-6)
