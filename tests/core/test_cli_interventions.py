"""--ablate on export and generate, and the patch command, on the bundled induction model."""

from __future__ import annotations

import csv
import json

import numpy as np

from explorer.cli import main
from explorer.core.checkpoint import load_checkpoint
from explorer.core.interventions.apply import run
from explorer.core.interventions.spec import Intervention

REPEAT = " the cat sat on the hat. the cat sat on the"
CORRUPT = " a dog ran in my hat. the cat sat on the"


def test_export_with_ablation_writes_the_intervened_trace(tmp_path, capsys) -> None:
    args = ["export", "-c", "induction", "-p", REPEAT, "-o", str(tmp_path)]
    assert main(args + ["--ablate", "1.2", "--ablate", "attn0", "--ablate-mode", "mean"]) == 0
    data = np.load(tmp_path / "trace.npz")
    assert json.loads(str(data["interventions"])) == [
        {"target": "head", "layer": 1, "mode": "mean", "index": 2}, {"target": "attn", "layer": 0, "mode": "mean"}]
    loaded = load_checkpoint("induction", device="cpu")
    ids = data["token_ids"].tolist()
    expected = run(loaded.model, ids, [Intervention("head", 1, 2, "mean"), Intervention("attn", 0, None, "mean")])
    np.testing.assert_allclose(data["logits"], expected.numpy(), atol=1e-5)
    assert np.abs(data["logits"] - run(loaded.model, ids).numpy()).max() > 0.1
    assert main(["export", "-c", "induction", "-p", REPEAT, "-o", str(tmp_path), "--ablate", "7.1"]) == 2
    assert "layer 7 is outside 0-1" in capsys.readouterr().err
    assert main(["export", "-c", "induction", "-p", REPEAT, "-o", str(tmp_path), "--ablate", "head3"]) == 2


def test_generate_with_the_induction_heads_off_stops_copying(capsys) -> None:
    base = ["generate", "-c", "induction", "-p", REPEAT, "-t", "0", "-n", "4", "--ignore-eos"]
    assert main(base) == 0
    copied = capsys.readouterr().out
    assert copied.startswith(" cat sat on the")  # after " the" it copies what followed the first " the"
    assert main(base + [f"--ablate=1.{h}" for h in range(4)]) == 0
    assert not capsys.readouterr().out.startswith(" cat sat")


def test_patch_writes_grids_and_attribution(tmp_path, capsys) -> None:
    assert main(["patch", "-c", "induction", "--clean", REPEAT, "--corrupt", CORRUPT, "--target", " cat",
                 "--distractor", " hat", "--out", str(tmp_path)]) == 0
    resid, heads = np.load(tmp_path / "resid_patch.npy"), np.load(tmp_path / "head_patch.npy")
    dla_heads, dla_mlp = np.load(tmp_path / "dla_heads.npy"), np.load(tmp_path / "dla_mlp.npy")
    summary = json.loads((tmp_path / "patch.json").read_text())
    n = len(summary["tokens"])
    assert resid.shape == (3, n) and heads.shape == (2, 4) and dla_heads.shape == (2, 4) and dla_mlp.shape == (2,)
    assert abs(resid[2, n - 1] - 1.0) < 1e-5
    total = summary["dla"]["embed"] + dla_heads.sum() + sum(summary["dla"]["attn_bias"]) + dla_mlp.sum() \
        + summary["dla"]["norm_bias"]
    assert abs(total - summary["dla"]["logit"]) < 1e-4
    rows = list(csv.reader(open(tmp_path / "resid_patch.csv", encoding="utf-8")))
    assert rows[0][1:] == summary["tokens"] and rows[0][1] == "0: the" and [r[0] for r in rows[1:]] == ["L0", "L1", "final"]
    assert main(["patch", "-c", "induction", "--clean", REPEAT, "--corrupt", " a b", "--target", " cat",
                 "--out", str(tmp_path)]) == 2
    assert "same length" in capsys.readouterr().err


def test_docs_interventions_example_runs(capsys) -> None:
    import re
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "interventions.md").read_text(encoding="utf-8")
    code = re.search(r"```python\n(from explorer.core import Intervention.*?)```", page, re.S).group(1)
    namespace: dict = {}
    exec(compile(code, "interventions.md", "exec"), namespace)  # noqa: S102 - our own docs page
    assert capsys.readouterr().out.splitlines() == ["head 1.0 zero", "(3, 12) (2, 4)", "True", "True"]
    grids = namespace["grids"]
    assert grids.clean_metric > grids.corrupt_metric + 5  # measured: 9.81 vs -0.07
    assert grids.resid[1, 5] > 0.9  # entering layer 1, the earlier " hat" (after " a") carries it
    assert namespace["estimate"].resid[1, 5] > 0.5  # the estimate finds it too (measured 0.74)
