"""Issue 42, "Reproduce in Python" (core half): the script File > Export as script writes, run in a fresh
process, prints the numbers ``explorer.core`` computes for the same state (the selected head's pattern, the
direct logit attribution, the patching grid, with the interventions), within 1e-6."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from explorer.core.analysis.dla import direct_logit_attribution
from explorer.core.checkpoint import load_checkpoint
from explorer.core.export_script import script_for
from explorer.core.interventions.attribution import attribution_patching
from explorer.core.interventions.patching import activation_patching
from explorer.core.interventions.spec import Intervention
from explorer.core.model_files import fingerprint
from explorer.core.session_file import SessionState, intervention_from, intervention_record

ROOT = Path(__file__).resolve().parents[2]
CLEAN = "When Mary and John went to the store, John gave a drink to"
CORRUPT = "When Mary and John went to the store, Mary gave a drink to"


def run_script(text: str, folder: Path) -> dict[str, np.ndarray | str]:
    """Run the script in a fresh interpreter; its ``show`` sections as arrays (and other lines by text)."""
    path = folder / "reproduce.py"
    path.write_text(text, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, env=env, timeout=600,
                          cwd=folder)
    assert done.returncode == 0, done.stderr[-3000:]
    return parse(done.stdout)


def parse(out: str) -> dict[str, np.ndarray | str]:
    """``show``'s sections ("== title", then "label: numbers" rows) as arrays; other "name: text" lines as text."""
    sections: dict[str, list] = {}
    found: dict[str, np.ndarray | str] = {}
    title = None
    for line in out.splitlines():
        if line.startswith("== "):
            title = line[3:]
            sections[title] = []
            continue
        if line.startswith("columns: "):
            continue
        label, _, values = line.rpartition(": ")
        try:
            row = [float(v) for v in values.split()]
        except ValueError:
            row = None
        if title is not None and label and row and not line.startswith("logit: "):
            sections[title].append(row)
        else:
            name, _, text = line.partition(": ")
            found[name] = text
            title = None
    found.update({name: np.array(rows) for name, rows in sections.items()})
    return found


@pytest.fixture(scope="module")
def state(tiny_gpt2_dir):
    loaded = load_checkpoint(tiny_gpt2_dir, device="cpu")
    ids, _ = loaded.encode(CLEAN)
    records = [intervention_record(iv) for iv in (Intervention("head", 0, 1, "zero"),
                                                  Intervention("neuron", 1, 5, "mean"))]
    records.append({**intervention_record(Intervention("head", 2, 3, "zero")), "enabled": False})
    mary = loaded.tokenizer.encode(" Mary")[0]
    panels = {"dla": {"target": mary, "distractor": loaded.tokenizer.encode(" John")[0], "position": len(ids) - 1},
              "patching": {"corrupted": CORRUPT, "target": " Mary", "distractor": " John", "mode": "exact"}}
    return SessionState(str(tiny_gpt2_dir), CLEAN, "cpu", "float32", loaded.name, fingerprint(tiny_gpt2_dir),
                        token_ids=list(ids), selection={"layer": 1, "head": 2, "token": None}, interventions=records,
                        panels=panels)


def test_the_exported_script_prints_what_the_core_computes(state, tiny_gpt2_dir, tmp_path):
    printed = run_script(script_for(state, "test"), tmp_path)
    assert "warning" not in printed
    loaded = load_checkpoint(tiny_gpt2_dir, device="cpu")
    ivs = [intervention_from(r) for r in state.interventions if r.get("enabled", True)]
    trace = loaded.trace_ids(state.token_ids, interventions=ivs)
    np.testing.assert_allclose(printed["attention pattern, layer 1 head 2"], trace.head(1, 2, "pattern"), atol=1e-6)
    dla = direct_logit_attribution(trace, state.panels["dla"]["target"], state.panels["dla"]["position"],
                                   state.panels["dla"]["distractor"])
    grid = np.concatenate([dla.heads, dla.mlp[:, None]], axis=1)
    np.testing.assert_allclose(printed["direct logit attribution"], grid, atol=1e-6)
    assert float(printed["logit"]) == pytest.approx(dla.logit, abs=1e-6)
    tok = loaded.tokenizer
    exact = activation_patching(loaded.model, state.token_ids, loaded.encode(CORRUPT)[0], tok.encode(" Mary")[0],
                                tok.encode(" John")[0], batch_size=16)
    np.testing.assert_allclose(printed["activation patching, residual stream"], exact.resid, atol=1e-6)
    np.testing.assert_allclose(printed["activation patching, heads"], exact.heads, atol=1e-6)
    # the interventions were applied: without them the pattern of layer 1 differs
    plain = loaded.trace_ids(state.token_ids).head(1, 2, "pattern")
    assert np.abs(plain - trace.head(1, 2, "pattern")).max() > 1e-4


def test_a_steering_vector_is_written_into_the_script_exactly(state, tiny_gpt2_dir, tmp_path):
    import dataclasses

    vector = np.linspace(-0.5, 0.5, 64).astype(np.float32) * np.float32(1 / 3)  # digits a print would round
    steer = intervention_record(Intervention("steer", 2, None, "add", None, vector, 2.0, "a-b"))
    steered = dataclasses.replace(state, interventions=[steer], panels={"dla": state.panels["dla"]})
    printed = run_script(script_for(steered), tmp_path)
    loaded = load_checkpoint(tiny_gpt2_dir, device="cpu")
    trace = loaded.trace_ids(state.token_ids, interventions=[intervention_from(steer)])
    np.testing.assert_allclose(printed["attention pattern, layer 1 head 2"], trace.head(1, 2, "pattern"), atol=1e-6)
    assert "do not add up" in printed["direct logit attribution"]  # as the panel says: the stream was steered


def test_the_estimate_is_reproduced_as_shown_and_a_changed_model_is_said(state, tiny_gpt2_dir, tmp_path):
    import dataclasses
    import shutil

    copy = shutil.copytree(tiny_gpt2_dir, tmp_path / "copy")
    estimate = dataclasses.replace(state, source=str(copy), panels={"patching": {**state.panels["patching"],
                                                                                 "mode": "estimate"}})
    text = script_for(estimate)
    loaded = load_checkpoint(copy, device="cpu")
    tok = loaded.tokenizer
    expected = attribution_patching(loaded.model, state.token_ids, loaded.encode(CORRUPT)[0], tok.encode(" Mary")[0],
                                    tok.encode(" John")[0])
    printed = run_script(text, tmp_path)
    np.testing.assert_allclose(printed["activation patching, heads"], expected.heads, atol=1e-6)
    assert "direct logit attribution" not in printed  # no DLA setting saved: not printed
    weights = copy / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-3] ^= 0x01
    weights.write_bytes(bytes(data))
    assert "warning" in run_script(text, tmp_path)  # other files: the script says so before its numbers


def test_nothing_in_a_session_becomes_code(state, tmp_path):
    import dataclasses

    hostile = "'); import os; os.system('touch PWNED'); print('"
    text = script_for(dataclasses.replace(state, prompt=hostile, token_ids=None, source=hostile,
                                          panels={"patching": {"corrupted": hostile, "mode": "exact"}}))
    compile(text, "reproduce.py", "exec")  # still valid Python: the texts are literals
    assert repr(hostile) in text and "\nimport os" not in text
