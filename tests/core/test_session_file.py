"""Issue 42, sessions (core half): a session file holds what the window showed and reopens exactly; a model
whose files changed since is named; a damaged or hostile file is one line; exports carry a provenance record."""

from __future__ import annotations

import json
import os
import shutil
import zipfile

import numpy as np
import pytest

from explorer.cli import main
from explorer.core.interventions.spec import Intervention
from explorer.core.model_files import fingerprint, model_files
from explorer.core.session_file import (
    MAX_BYTES,
    SessionFileError,
    SessionState,
    intervention_from,
    intervention_record,
    model_changed,
    read,
    save,
)

PROMPT = "When Mary and John went to the store, John gave a drink to"


@pytest.fixture
def model_copy(tiny_gpt2_dir, tmp_path):
    """A copy of the tiny GPT-2 the test may change."""
    return shutil.copytree(tiny_gpt2_dir, tmp_path / "gpt2-copy")


def _state(source, **changes) -> SessionState:
    steer = Intervention("steer", 1, None, "add", None, np.linspace(-1, 1, 64).astype(np.float32), 3.5, "love-hate")
    records = [intervention_record(iv) for iv in (Intervention("head", 0, 1, "zero"),
                                                  Intervention("neuron", 1, 7, "mean", (2, 3)), steer)]
    records[1]["enabled"] = False
    base = dict(source=str(source), prompt=PROMPT, device="cpu", dtype="float32", model_name="gpt2-copy",
                fingerprint=fingerprint(source), token_ids=[1, 2, 3],
                selection={"layer": 1, "head": 2, "token": 5, "step": None}, interventions=records,
                steering={"source": 3, "alpha": 4.0, "prompt_a": "Love", "prompt_b": "Hate"},
                sampling={"temperature": 0.7, "top_k": 40, "seed": 1234},
                panels={"dla": {"target": " Mary", "distractor": None}}, layout="AAAA/w==", saved_by="test")
    return SessionState(**{**base, **changes})


def test_a_session_file_reads_back_what_was_saved(model_copy, tmp_path):
    state = _state(model_copy)
    path = save(state, tmp_path / "s.explorer-session.json")
    again = read(path)
    assert again == state  # every field, the fingerprint and each intervention's numbers included
    ivs = [intervention_from(r) for r in again.interventions]
    assert [iv.label for iv in ivs] == ["head 0.1 zero", "neuron 1:7@2,3 mean", "steer 1 (love-hate) +3.5"]
    np.testing.assert_array_equal(ivs[2].value, np.linspace(-1, 1, 64).astype(np.float32))  # exactly
    assert again.interventions[1]["enabled"] is False
    assert model_changed(again) is None


def test_a_changed_model_file_is_named(model_copy, tmp_path):
    state = _state(model_copy)
    weights = model_copy / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-5] ^= 0x01  # one bit of one weight: the same size, shapes and names
    weights.write_bytes(bytes(data))
    message = model_changed(read(save(state, tmp_path / "s.json")))
    assert message is not None and "model file changed since this session was saved" in message
    assert "model.safetensors" in message and "config.json" not in message

    shutil.rmtree(model_copy)
    gone = model_changed(state)
    assert gone is not None and "no longer" in gone


def test_the_hash_is_of_the_content_a_touched_or_copied_file_still_matches(model_copy, tmp_path):
    saved = fingerprint(model_copy)
    assert {p.name for p in model_files(model_copy)} >= {"config.json", "model.safetensors"}
    weights = model_copy / "model.safetensors"
    os.utime(weights, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns + 10**9))  # touched, same bytes
    assert model_changed(_state(model_copy, fingerprint=saved)) is None
    assert fingerprint(model_copy).digest == saved.digest
    moved = shutil.copytree(model_copy, tmp_path / "elsewhere")
    assert fingerprint(moved).digest == saved.digest  # where it lies is no part of it
    (model_copy / "README.md").write_text("a model card edited")  # not read by the loader: not part of it
    assert fingerprint(model_copy).digest == saved.digest


def test_reading_nothing_on_the_gui_thread_leaves_unhashed_files_unknown(model_copy):
    other = shutil.copytree(model_copy, model_copy.parent / "never-hashed")
    unread = fingerprint(other, read=False)
    assert unread.digest is None and all(f.sha256 == "" for f in unread.files)
    full = fingerprint(other)
    assert fingerprint(other, read=False).digest == full.digest  # hashed once: known from then on


HOSTILE = {
    "not json": b"\x00\xff not json",
    "a list": b"[1, 2, 3]",
    "another format": json.dumps({"format": "something else", "version": 1}).encode(),
    "no model": json.dumps({"format": "transformer-explorer session", "version": 1, "prompt": "x"}).encode(),
    "newer": json.dumps({"format": "transformer-explorer session", "version": 99, "source": "m"}).encode(),
    "nan": b'{"format": "transformer-explorer session", "version": 1, "source": "m", "sampling": {"t": NaN}}',
    "deep": b'{"format": "transformer-explorer session", "version": 1, "source": "m", "panels": '
            + b'{"a": ' * 5000 + b"1" + b"}" * 5001,
    "bad ids": json.dumps({"format": "transformer-explorer session", "version": 1, "source": "m",
                           "token_ids": [1, -2, "x"]}).encode(),
    "bad intervention": json.dumps({"format": "transformer-explorer session", "version": 1, "source": "m",
                                    "interventions": [{"target": "head", "layer": "0; rm -rf", "mode": "zero"}]}).encode(),
    "unknown target": json.dumps({"format": "transformer-explorer session", "version": 1, "source": "m",
                                  "interventions": [{"target": "os.system", "layer": 0}]}).encode(),
    "bool as number": json.dumps({"format": "transformer-explorer session", "version": 1, "source": "m",
                                  "selection": {"layer": True}}).encode(),
    "nested settings": json.dumps({"format": "transformer-explorer session", "version": 1, "source": "m",
                                   "sampling": {"seed": {"x": 1}}}).encode(),
    "damaged fingerprint": json.dumps({"format": "transformer-explorer session", "version": 1, "source": "m",
                                       "fingerprint": {"files": [{"name": "a", "size": 1}]}}).encode(),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_damaged_or_hostile_session_file_is_one_line(tmp_path, case):
    path = tmp_path / "s.json"
    path.write_bytes(HOSTILE[case])
    with pytest.raises(SessionFileError) as caught:
        read(path)
    message = str(caught.value)
    assert message.startswith("s.json: ") and "\n" not in message and len(message) <= 600


def test_a_huge_file_is_refused_before_it_is_parsed(tmp_path):
    path = tmp_path / "huge.json"
    with open(path, "wb") as f:
        f.truncate(MAX_BYTES + 10)
    with pytest.raises(SessionFileError, match="larger than a session file can be"):
        read(path)


def test_cli_export_carries_the_provenance_of_its_numbers(tiny_gpt2_dir, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["export", "-c", str(tiny_gpt2_dir), "-p", PROMPT, "--out", str(out), "--device", "cpu",
                 "--ablate", "0.1"]) == 0
    record = json.loads((out / "provenance.json").read_text("utf-8"))
    assert record["model"]["sha256"] == fingerprint(tiny_gpt2_dir).digest
    assert record["model"]["source"] == str(tiny_gpt2_dir) and "model.safetensors" in record["model"]["files"]
    assert record["versions"]["torch"] and record["versions"]["numpy"] and "transformers" in record["versions"]
    assert record["dtype"] == "float32" and record["device"] == "cpu"
    assert record["interventions"] == [{"target": "head", "layer": 0, "mode": "zero", "index": 1}]
    assert "stored_kinds" in record["capture"] and record["prompt"] == PROMPT
    from safetensors import safe_open

    with safe_open(str(out / "trace.safetensors"), framework="numpy") as f:
        assert json.loads(f.metadata()["provenance"])["model"]["sha256"] == record["model"]["sha256"]
    with zipfile.ZipFile(out / "trace.npz") as archive:
        assert "provenance.npy" in archive.namelist()
    assert json.loads(str(np.load(out / "trace.npz")["provenance"]))["model"] == record["model"]


def test_a_provenance_record_names_the_last_verify_of_its_model(tiny_gpt2_dir):
    pytest.importorskip("transformers")
    from explorer.core import provenance
    from explorer.core.checkpoint import load_checkpoint
    from explorer.core.verify import verify_checkpoint

    trace = load_checkpoint(tiny_gpt2_dir, device="cpu").trace(PROMPT)
    assert provenance.record(trace, source=str(tiny_gpt2_dir))["verify"] is None  # not checked yet: said so
    report = verify_checkpoint(tiny_gpt2_dir, PROMPT)
    provenance.remember_verify(str(tiny_gpt2_dir), report)
    checked = provenance.record(trace, source=str(tiny_gpt2_dir), fingerprint=fingerprint(tiny_gpt2_dir))["verify"]
    assert checked["passed"] is True and checked["reference"] == "GPT2LMHeadModel"
    assert checked["resid_min_cosine"] > 0.999999 and checked["tokens"] == len(report.ids)
