"""The command-line contract: `features` writes features.npz; `--steer L:FILE.npy:ALPHA` on generate and export."""

from __future__ import annotations

import pytest

import json

import numpy as np
import torch
from sae_reference import write_sae

from explorer.cli import main
from explorer.core.checkpoint import load_checkpoint
from explorer.core.features.steering import steer
from explorer.core.generation.generate import generate
from explorer.core.generation.sampling import SamplingParams
from explorer.core.interventions.apply import run

pytestmark = pytest.mark.recent_reference  # compares with sae_lens (needs NumPy 2: not in the floors step)

PROMPT = "The cat sat on the mat and the dog"


def test_features_writes_the_sae_activations(tmp_path, tiny_gpt2_dir, capsys) -> None:
    ref = write_sae(tmp_path / "sae", "topk", "blocks.1.hook_resid_pre", 64, 120, model_name="other", k=9)
    write_sae(tmp_path / "sae2", "standard", "blocks.2.hook_mlp_out", 64, 30, model_name="other", seed=3)
    out = tmp_path / "out"
    args = ["features", "-c", str(tiny_gpt2_dir), "--sae", str(tmp_path / "sae"), "-p", PROMPT, "-o", str(out)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "trained on 'other'" in err and "--allow-other-model" in err
    assert main(args + ["--allow-other-model", "--sae", str(tmp_path / "sae2")]) == 0
    assert "warning: sae was trained on 'other'" in capsys.readouterr().out
    data = np.load(out / "features.npz")
    loaded = load_checkpoint(tiny_gpt2_dir, device="cpu")
    ids = loaded.encode(PROMPT)[0]
    assert data["acts"].dtype == np.float32 and data["acts"].shape == (len(ids), 120)
    np.testing.assert_array_equal(data["token_ids"], ids)
    x = np.array(loaded.trace(PROMPT)["blocks.1.resid_pre"])
    np.testing.assert_allclose(data["acts"], ref.encode(torch.from_numpy(x)).detach().numpy(), atol=1e-5, rtol=0)
    np.testing.assert_array_equal(data["acts_0"], data["acts"])
    assert data["acts_1"].shape == (len(ids), 30) and list(data["hook_names"])[1] == "blocks.2.hook_mlp_out"
    assert data["reconstruction_error"].shape == (len(ids),)


def test_features_refuses_a_hostile_sae_in_one_line(tmp_path, tiny_gpt2_dir, capsys) -> None:
    sae = tmp_path / "sae"
    write_sae(sae, "standard", "blocks.1.hook_resid_pre", 64, 16)
    cfg = json.loads((sae / "cfg.json").read_text())
    cfg["d_sae"] = 17
    (sae / "cfg.json").write_text(json.dumps(cfg))
    args = ["features", "-c", str(tiny_gpt2_dir), "--sae", str(sae), "-p", "hi", "-o", str(tmp_path / "o"),
            "--allow-other-model"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "implies [64, 17]" in err
    assert not (tmp_path / "o" / "features.npz").exists()


def test_generate_and_export_with_steer(tmp_path, tiny_gpt2_dir, capsys) -> None:
    loaded = load_checkpoint(tiny_gpt2_dir, device="cpu")
    v = np.random.default_rng(0).standard_normal(64).astype(np.float32)
    np.save(tmp_path / "v.npy", v)
    ids = loaded.encode(PROMPT)[0]
    params = SamplingParams(temperature=0.0, max_new_tokens=6, stop_at_eos=False)
    ivs = [steer(1, v, 3.0), steer(2, -v, 1.0)]
    expected = generate(loaded, ids, params, interventions=ivs).text
    plain = generate(loaded, ids, params).text
    assert expected != plain
    base = ["generate", "-c", str(tiny_gpt2_dir), "-p", PROMPT, "-t", "0", "-n", "6", "--ignore-eos"]
    assert main(base + ["--steer", f"1:{tmp_path / 'v.npy'}:3", "--steer", f"2:{tmp_path / 'v.npy'}:-1"]) == 0
    assert capsys.readouterr().out == expected + "\n"
    assert main(base + ["--steer", "1:v.npy"]) == 2
    assert "use LAYER:FILE.npy:ALPHA" in capsys.readouterr().err
    np.save(tmp_path / "short.npy", v[:10])
    assert main(base + ["--steer", f"1:{tmp_path / 'short.npy'}:1"]) == 2
    assert "a steering vector is 64 floats" in capsys.readouterr().err

    out = tmp_path / "export"
    assert main(["export", "-c", str(tiny_gpt2_dir), "-p", PROMPT, "-o", str(out),
                 "--steer", f"1:{tmp_path / 'v.npy'}:3"]) == 0
    data = np.load(out / "trace.npz")
    np.testing.assert_allclose(data["logits"], run(loaded.model, ids, [steer(1, v, 3.0)]).numpy(), atol=1e-4)
    assert json.loads(str(data["interventions"])) == [
        {"target": "steer", "layer": 1, "mode": "add", "amount": 3.0, "source": "v.npy"}]


@pytest.mark.parametrize("top", ["0", "-1"])
def test_top_below_1_is_one_line_not_none_fire(tmp_path, tiny_gpt2_dir, capsys, top) -> None:
    """Issue 34: --top 0 printed 'none fire', as if no feature fired."""
    write_sae(tmp_path / "sae", "topk", "blocks.1.hook_resid_pre", 64, 120, k=9)
    args = ["features", "-c", str(tiny_gpt2_dir), "--sae", str(tmp_path / "sae"), "-p", PROMPT, "-o",
            str(tmp_path / "out"), "--top", top, "--allow-other-model"]
    assert main(args) == 2
    captured = capsys.readouterr()
    assert captured.err.strip().splitlines() == [f"error: --top must be at least 1 (got {top})"]
    assert "none fire" not in captured.out and not (tmp_path / "out").exists()
