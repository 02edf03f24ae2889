"""Issue 42, item 8: Help > Verify as users need it. After a README install plus ``[verify]``, a GGUF file
verifies (``transformers`` reads none without ``accelerate``: the extra now installs it, and a missing one
is said at once, not after our model has loaded); each layer's lowest cosine is reported beside max |diff|."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from test_verify import PROMPT, saved
from test_verify_gguf import PROMPT as GGUF_PROMPT, with_tokenizer

from explorer.cli import main
from explorer.core.checkpoint import load_checkpoint
from explorer.core.verify import VerifyRefused, min_cosine, verify_checkpoint

pytest.importorskip("transformers")
ROOT = Path(__file__).resolve().parents[2]


def test_the_verify_extra_installs_what_transformers_needs_for_gguf():
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]["optional-dependencies"]
    names = {requirement.split(">")[0].split("=")[0].strip() for requirement in extras["verify"]}
    assert {"transformers", "accelerate"} <= names


def test_without_accelerate_a_gguf_verify_says_so_at_once(tmp_path, monkeypatch, capsys):
    path = with_tokenizer(tmp_path, "llama", "Q8_0")
    monkeypatch.setitem(sys.modules, "accelerate", None)  # not installed

    def never(*args, **kwargs):
        raise AssertionError("our model was loaded before the missing engine was named")

    monkeypatch.setattr("explorer.core.checkpoint.load_checkpoint", never)
    with pytest.raises(VerifyRefused, match=r"accelerate.*transformer-explorer\[verify\]"):
        verify_checkpoint(path, GGUF_PROMPT)
    assert main(["verify", "--checkpoint", str(path), "--prompt", GGUF_PROMPT]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "accelerate" in err[0]


def test_a_gguf_file_verifies_with_the_extra_installed(tmp_path):
    pytest.importorskip("accelerate")  # the [verify] extra's
    report = verify_checkpoint(with_tokenizer(tmp_path, "llama", "Q8_0"), GGUF_PROMPT)
    assert report.passed, "\n".join(report.lines())
    assert all(row.cosine is not None and row.cosine > 0.9999990 for row in report.layers)


def test_each_layer_reports_its_lowest_cosine_beside_max_diff(tmp_path, capsys):
    saved("llama", tmp_path)
    broken = load_checkpoint(tmp_path, device="cpu")
    with torch.no_grad():  # a conversion that forgot to transpose layer 1's query projection
        weight = broken.model.blocks[1].attn.W_Q.weight
        weight.copy_(weight.T.clone())
    report = verify_checkpoint(tmp_path, PROMPT, _loaded=broken)
    embeddings, layer0, layer1 = report.layers[:3]
    assert embeddings.cosine > 0.9999990 and layer0.cosine > 0.9999990
    assert layer1.cosine < 0.999  # another direction, not a rounding
    assert "cos " in layer1.line() and f"{layer1.cosine:.7f}" in layer1.line()

    assert main(["verify", "--checkpoint", str(tmp_path), "--prompt", PROMPT]) == 0  # the unbroken model
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith(("embeddings", "layer "))]
    assert rows and all(" cos 1.0000000" in line or " cos 0.9999999" in line for line in rows), rows


def test_min_cosine_is_the_worst_position():
    import numpy as np

    ours = np.array([[1.0, 0.0], [0.0, 2.0], [0.0, 0.0]])
    theirs = np.array([[1.0, 0.0], [2.0, 2.0], [0.0, 0.0]])  # position 1 turned 45 degrees, position 2 both zero
    assert min_cosine(ours, theirs) == pytest.approx(np.sqrt(0.5), abs=1e-12)
    assert min_cosine(ours[:1], np.zeros((1, 2))) == 0.0  # one side zero: no agreement


def test_a_directory_without_tokenizer_files_is_not_a_token_id_failure(tiny_gpt2_dir):
    """transformers' AutoTokenizer reads nothing there and tokenizes to no ids at all: not compared, not failed."""
    report = verify_checkpoint(tiny_gpt2_dir, PROMPT)
    assert report.prompt_ids_equal is None and report.passed, "\n".join(report.lines())
    assert "prompt ids not compared" in report.lines()[-1]
