"""trace.npz is streamed (the same arrays as building them in memory) and a multi-file export is
all or nothing: the old export or the new one, never a mix, and no leftovers."""

from __future__ import annotations

import numpy as np
import pytest

from explorer.cli import main
from explorer.core.errors import ExportError
from explorer.core.export import export_directory, trace_arrays, write_trace_npz

PROMPT = "Hello world, hello again, and once more"


@pytest.fixture(scope="module")
def trace(tiny_gpt2):
    loaded, _ = tiny_gpt2
    return loaded.trace(PROMPT)


def test_the_streamed_archive_holds_the_in_memory_arrays(trace, tmp_path):
    lines = []
    write_trace_npz(trace, tmp_path / "trace.npz", progress=lines.append)
    expected = trace_arrays(trace)
    with np.load(tmp_path / "trace.npz") as data:
        assert set(data.files) == set(expected)
        for name, array in expected.items():
            assert data[name].dtype == array.dtype and data[name].shape == array.shape, name
            np.testing.assert_array_equal(data[name], array, err_msg=name)
        L, H = trace.config.n_layers, trace.config.n_heads
        for layer in range(L):
            for head in range(H):
                np.testing.assert_array_equal(data["attention"][layer, head], trace.head(layer, head))
    assert any("attention" in line for line in lines)  # progress names each array
    write_trace_npz(trace, tmp_path / "small.npz", compress=True)
    with np.load(tmp_path / "small.npz") as data:
        np.testing.assert_array_equal(data["attention_scores"], expected["attention_scores"])


def test_a_failed_export_leaves_the_old_one_whole_and_nothing_else(tmp_path):
    out = tmp_path / "export"
    with export_directory(out) as d:
        (d / "trace.npz").write_text("old")
        (d / "attention").mkdir()
        (d / "attention" / "L0_H0.csv").write_text("old")
    with pytest.raises(RuntimeError), export_directory(out) as d:
        (d / "trace.npz").write_text("new")
        raise RuntimeError("disk full halfway")
    assert (out / "trace.npz").read_text() == "old" and (out / "attention" / "L0_H0.csv").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]  # no temporary directory left
    assert sorted(p.name for p in out.iterdir()) == ["attention", "export-manifest.json", "trace.npz"]
    with export_directory(out) as d:
        (d / "trace.npz").write_text("new")
    assert (out / "trace.npz").read_text() == "new" and not (out / "attention").exists()  # not mixed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]


def test_leftovers_of_an_interrupted_run_are_removed_and_foreign_directories_refused(tmp_path):
    out = tmp_path / "export"
    out.mkdir()
    killed = out / ".explorer-export-staging-abc123"  # what a SIGTERM mid-write leaves behind
    killed.mkdir()
    (killed / ".explorer-export-staging").write_bytes(b"")
    (killed / "trace.npz").write_bytes(b"half")
    with export_directory(out) as d:
        (d / "trace.npz").write_text("complete")
    assert sorted(p.name for p in out.iterdir()) == ["export-manifest.json", "trace.npz"]
    home = tmp_path / "documents"
    home.mkdir()
    (home / "thesis.tex").write_text("precious")
    with pytest.raises(ExportError, match="not an earlier export"), export_directory(home):
        pass
    assert sorted(p.name for p in home.iterdir()) == ["thesis.tex"]


def test_export_command_writes_per_head_files_only_when_asked(tiny_gpt2_dir, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["export", "-c", str(tiny_gpt2_dir), "--prompt", PROMPT, "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["export-manifest.json", "provenance.json", "trace.npz",
                                                     "trace.safetensors"]  # no per-head files
    captured = capsys.readouterr()
    assert "trace.npz" in captured.out and "attention" in captured.out and captured.err == ""  # progress
    assert main(["export", "-c", str(tiny_gpt2_dir), "--prompt", PROMPT, "--out", str(out), "--per-head"]) == 0
    assert (out / "attention" / "L0_H0.csv").exists() and (out / "attention" / "L0_H0.npy").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
