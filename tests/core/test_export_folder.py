"""An export owns only what it wrote (its manifest): the user's files beside it are never deleted, a
folder that is not an earlier export is refused, and a kill at any step of the swap followed by a
failed run still leaves a complete export (the old one until the new one is in place)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from explorer.cli import main
from explorer.core.errors import ExportError
from explorer.core.export import export_directory
from explorer.core.export_folder import MANIFEST

ROOT = Path(__file__).resolve().parents[2]
OLD = {"trace.npz": "old npz", "attention/L0_H0.csv": "old csv", "only-old.txt": "old only"}
NEW = {"trace.npz": "new npz", "attention/L0_H0.csv": "new csv", "trace.safetensors": "new only"}
USER = {"notes.md": "my notes", "attention/figure.svg": "my figure", ".config.old-backup/x": "hidden"}


def write_export(folder: Path, files: dict[str, str]) -> None:
    with export_directory(folder) as d:
        for rel, text in files.items():
            (d / rel).parent.mkdir(parents=True, exist_ok=True)
            (d / rel).write_text(text)


def contents(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): p.read_text() for p in folder.rglob("*") if p.is_file()
            and p.name != MANIFEST}


def test_a_re_export_replaces_exactly_its_own_files_and_keeps_the_users(tmp_path):
    out = tmp_path / "export"
    write_export(out, OLD)
    for rel, text in USER.items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text(text)
    write_export(out, NEW)
    assert contents(out) == {**NEW, **USER}  # only-old.txt went, the user's files stayed
    assert json.loads((out / MANIFEST).read_text())["files"] == sorted(NEW)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]


def test_a_failed_export_leaves_everything_as_it_was_and_no_empty_folder(tmp_path):
    with pytest.raises(RuntimeError), export_directory(tmp_path / "new") as d:
        (d / "trace.npz").write_text("half")
        raise RuntimeError("disk full halfway")
    assert list(tmp_path.iterdir()) == []  # no empty new folder, no hidden ..old-* / .partial-*
    out = tmp_path / "export"
    write_export(out, OLD)
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    with pytest.raises(RuntimeError), export_directory(out) as d:
        (d / "trace.npz").write_text("half")
        raise RuntimeError("disk full halfway")
    assert contents(out) == OLD and sorted(p.relative_to(out) for p in out.rglob("*")) == before


def test_a_users_folder_with_a_bare_trace_npz_is_refused_and_untouched(tiny_gpt2_dir, tmp_path, capsys):
    folder = tmp_path / "thesis"
    folder.mkdir()
    mine = {"thesis.tex": "\\section{precious}", "data.csv": "a,b\n1,2\n", "trace.npz": "from File > Export trace"}
    for rel, text in mine.items():
        (folder / rel).write_text(text)
    assert main(["export", "-c", str(tiny_gpt2_dir), "-p", "Hello world", "-o", str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not an earlier export" in err and "internal" not in err
    assert contents(folder) == mine and sorted(p.name for p in folder.iterdir()) == sorted(mine)


def test_a_glob_name_touches_nothing_beside_it(tiny_gpt2_dir, tmp_path, monkeypatch):
    parent = tmp_path / "exports"
    for rel in (".config.old-backup/settings", ".x.partial-1/keep", ".*.old-1/keep", "other/keep"):
        (parent / rel).parent.mkdir(parents=True, exist_ok=True)
        (parent / rel).write_text("mine")
    monkeypatch.chdir(tmp_path)
    assert main(["export", "-c", str(tiny_gpt2_dir), "-p", "Hello world", "-o", "exports/*"]) == 0
    assert main(["export", "-c", str(tiny_gpt2_dir), "-p", "Hello world", "-o", "exports/*"]) == 0
    assert main(["export", "-c", str(tiny_gpt2_dir), "-p", "Hello world", "-o", "exports/.*.old-1"]) == 2
    kept = sorted(p.relative_to(parent).as_posix() for p in parent.rglob("keep")) + \
        [p.relative_to(parent).as_posix() for p in parent.rglob("settings")]
    assert kept == [".*.old-1/keep", ".x.partial-1/keep", "other/keep", ".config.old-backup/settings"]
    assert (parent / "*" / "trace.npz").is_file()


def test_the_current_folder_and_a_users_file_in_the_way(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_export(Path("."), OLD)  # "-o ." has no name: nothing is made beside it
    assert contents(tmp_path) == OLD and list(tmp_path.parent.glob(".*old-*")) == []
    (tmp_path / "trace.safetensors").write_text("the user's own")
    with pytest.raises(ExportError, match="not from the earlier export"):
        write_export(tmp_path, NEW)
    assert contents(tmp_path) == {**OLD, "trace.safetensors": "the user's own"}


@pytest.mark.parametrize("entry", ["../outside.txt", "/etc/hostname", "a/../../b", 7])
def test_a_forged_manifest_cannot_name_a_file_outside_the_export(tmp_path, entry):
    out = tmp_path / "export"
    write_export(out, OLD)
    (tmp_path / "outside.txt").write_text("mine")
    manifest = json.loads((out / MANIFEST).read_text())
    manifest["files"].append(entry)
    (out / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(ExportError) as info:
        write_export(out, NEW)
    assert "\n" not in str(info.value) and (tmp_path / "outside.txt").read_text() == "mine"
    assert contents(out) == OLD


KILL = textwrap.dedent("""
    import os, sys
    from pathlib import Path
    from explorer.core import export_folder
    at, seen = int(sys.argv[2]), []
    def step(name):
        seen.append(name)
        if len(seen) == at:
            os._exit(137)  # a kill: no finally, no clean-up
    export_folder._step = step
    with export_folder.export_directory(sys.argv[1]) as d:
        for rel, text in {new}.items():
            (d / rel).parent.mkdir(parents=True, exist_ok=True)
            (d / rel).write_text(text)
    print(len(seen))
""")


def test_a_kill_at_each_step_of_the_swap_then_a_failed_run_keeps_a_complete_export(tmp_path):
    script = KILL.replace("{new}", repr(NEW))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    at, outcomes = 1, []
    while True:
        out = tmp_path / f"run{at}" / "export"
        write_export(out, OLD)
        for rel, text in USER.items():
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            (out / rel).write_text(text)
        run = subprocess.run([sys.executable, "-c", script, str(out), str(at)], env=env, capture_output=True,
                             text=True, timeout=120)
        assert run.returncode in (0, 137), run.stderr
        with pytest.raises(RuntimeError), export_directory(out) as d:  # the following run fails too
            (d / "trace.npz").write_text("half")
            raise RuntimeError("failed again")
        got = contents(out)
        assert got in ({**OLD, **USER}, {**NEW, **USER}), (at, got)
        assert sorted(p.name for p in out.iterdir() if p.name.startswith(".")) == [".config.old-backup"]
        outcomes.append(got == {**NEW, **USER})
        if run.returncode == 0:
            break
        at += 1
    assert at > 8 and outcomes[0] is False and outcomes[-1] is True  # every step was tried, old until commit


def test_running_out_of_memory_during_an_export_is_one_line_and_leaves_nothing(tiny_gpt2_dir, tmp_path,
                                                                               monkeypatch, capsys):
    from explorer.core import export

    def full(*args, **kwargs):
        raise MemoryError()

    monkeypatch.setattr(export, "write_trace_npz", full)
    assert main(["export", "-c", str(tiny_gpt2_dir), "-p", "Hello world", "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "ran out of memory while exporting" in err and "internal" not in err
    assert list(tmp_path.iterdir()) == []


def test_nothing_is_removed_or_written_through_a_users_link(tmp_path):
    import shutil

    out = tmp_path / "export"
    write_export(out, OLD)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "L0_H0.csv").write_text("mine")
    shutil.rmtree(out / "attention")
    (out / "attention").symlink_to(mine)  # the user put a link where the export's folder was
    with pytest.raises(ExportError, match="not from the earlier export"):
        write_export(out, NEW)
    write_export(out, {"trace.npz": "again"})  # the old attention/L0_H0.csv is not removed through the link
    assert (mine / "L0_H0.csv").read_text() == "mine" and (out / "trace.npz").read_text() == "again"


def test_a_failed_first_export_leaves_no_empty_folders_and_an_unmarked_staging_folder_is_ours(tmp_path):
    with pytest.raises(RuntimeError), export_directory(tmp_path / "a" / "b" / "c") as d:
        (d / "trace.npz").write_text("half")
        raise RuntimeError("failed")
    assert list(tmp_path.iterdir()) == []
    out = tmp_path / "export"
    (out / ".explorer-export-staging-k1ll3d").mkdir(parents=True)  # killed before its marker was written
    write_export(out, OLD)
    assert sorted(p.name for p in out.iterdir() if p.name.startswith(".")) == []
