"""Weights never change under the app: after loading, a pytorch_model.bin or a nanoGPT ckpt.pt can be
truncated (a training run re-saving it does that) or rewritten in place, and the next trace neither
dies with SIGBUS nor silently gives other numbers. Run in a subprocess: a SIGBUS would kill pytest."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import torch
from safetensors.torch import load_file

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent("""
    import os, sys, numpy as np
    from explorer.core.checkpoint import load_checkpoint
    source, weights = sys.argv[1], sys.argv[2]
    loaded = load_checkpoint(source, device="cpu")
    ids = [1, 5, 7, 3, 2]
    before = loaded.trace_ids(ids)["logits"].copy()
    size = os.path.getsize(weights)
    with open(weights, "r+b") as f:  # rewritten in place with other bytes, then cut short
        f.write(os.urandom(size))
    os.truncate(weights, 0)
    after = loaded.trace_ids(ids)["logits"]
    print("same" if np.array_equal(before, after) else "changed")
""")


def run(source: Path, weights: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", SCRIPT, str(source), str(weights)], env=env,
                          capture_output=True, text=True, timeout=300)


def test_a_pytorch_model_bin_truncated_after_loading_does_not_kill_the_next_trace(tiny_gpt2_dir, tmp_path):
    folder = tmp_path / "bin"
    folder.mkdir()
    shutil.copy(tiny_gpt2_dir / "config.json", folder / "config.json")
    torch.save(load_file(tiny_gpt2_dir / "model.safetensors"), folder / "pytorch_model.bin")
    result = run(folder, folder / "pytorch_model.bin")
    assert result.returncode == 0, (result.returncode, result.stderr[-2000:])  # -7 is SIGBUS
    assert result.stdout.strip() == "same"


def test_a_nanogpt_ckpt_truncated_after_loading_does_not_kill_the_next_trace(tmp_path):
    from tests.core.test_checkpoint_safety import nanogpt_checkpoint

    ckpt = nanogpt_checkpoint()
    ckpt["model_args"]["vocab_size"] = 50304  # GPT-2's tokenizer: no meta.pkl needed
    d = ckpt["model_args"]["n_embd"]
    ckpt["model"]["transformer.wte.weight"] = torch.randn(50304, d)
    ckpt["model"]["lm_head.weight"] = ckpt["model"]["transformer.wte.weight"]
    ckpt["optimizer"] = {"state": {0: {"exp_avg": torch.randn(1000)}}}
    torch.save(ckpt, tmp_path / "ckpt.pt")
    result = run(tmp_path / "ckpt.pt", tmp_path / "ckpt.pt")
    assert result.returncode == 0, (result.returncode, result.stderr[-2000:])
    assert result.stdout.strip() == "same"
