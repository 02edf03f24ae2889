from __future__ import annotations

import csv

import numpy as np

from explorer.cli import main

DOCUMENTED = {"token_ids", "tokens", "embeddings", "positions", "attention_scores", "attention",
              "mlp_activations", "residual", "residual_norms", "logits", "provenance"}


def test_info_describes_the_model(tiny_gpt2_dir, capsys):
    assert main(["info", "--checkpoint", str(tiny_gpt2_dir)]) == 0
    out = capsys.readouterr().out
    assert "gpt2" in out and "3,374,720" in out and "50257" in out and "128" in out


def test_export_writes_documented_arrays(tiny_gpt2_dir, tmp_path, capsys):
    prompt = "Hello world, hello again"
    assert main(["export", "--checkpoint", str(tiny_gpt2_dir), "--prompt", prompt, "--out", str(tmp_path),
                 "--per-head"]) == 0
    data = np.load(tmp_path / "trace.npz")
    assert set(data.files) == DOCUMENTED
    n, L, H, d = len(data["token_ids"]), 3, 4, 64
    assert data["token_ids"].dtype == np.int64 and data["tokens"].shape == (n,)
    assert data["attention"].shape == data["attention_scores"].shape == (L, H, n, n)
    assert data["mlp_activations"].shape == (L, n, 256)
    assert data["residual"].shape == (L + 1, n, d) and data["residual_norms"].shape == (L + 1, n)
    assert data["logits"].shape == (n, 50257) and data["embeddings"].shape == data["positions"].shape == (n, d)
    np.testing.assert_allclose(data["attention"].sum(-1), 1, atol=1e-5)
    assert np.isneginf(data["attention_scores"][0, 0, 0, 1])
    np.testing.assert_allclose(data["residual_norms"], np.linalg.norm(data["residual"], axis=-1), rtol=1e-5)
    head = np.load(tmp_path / "attention" / "L2_H3.npy")
    np.testing.assert_array_equal(head, data["attention"][2, 3])
    rows = list(csv.reader(open(tmp_path / "attention" / "L2_H3.csv", encoding="utf-8")))
    assert rows[0][1:] == [f"{i}:{t}" for i, t in enumerate(data["tokens"])]
    assert len(rows) == n + 1 and abs(float(rows[1][1]) - 1.0) < 1e-6


def test_bad_input_exits_2_with_one_line(tmp_path, capsys):
    assert main(["info", "--checkpoint", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: no checkpoint at") and "\n" not in err
    assert main(["export", "-c", "worked-example", "--prompt", "", "--out", str(tmp_path)]) == 2
    assert "empty" in capsys.readouterr().err


def test_exports_get_ordinary_permissions(tmp_path):
    import stat

    from explorer.core.export import write_text

    from explorer.core import export

    write_text(tmp_path / "a.txt", "x")
    assert stat.S_IMODE((tmp_path / "a.txt").stat().st_mode) == 0o666 & ~export._UMASK
