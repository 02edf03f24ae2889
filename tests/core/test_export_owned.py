"""Issue 34: export recovery acts only where an export of ours is. A journal planted in a folder the user
received, links out of it, a symlinked backup folder, and the user's own folders under our reserved names
are refused in one line, and every file (inside the folder and outside it) is there unchanged afterwards."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from explorer.cli import main
from explorer.core.errors import ExportError
from explorer.core.export import export_directory

JOURNAL = ".explorer-export-journal.json"
BACKUP = ".explorer-export-previous"


def snapshot(*roots: Path) -> dict[str, bytes | str]:
    """Every file and link under ``roots`` (a link as its target, never followed)."""
    seen: dict[str, bytes | str] = {}
    for root in roots:
        for path in sorted(root.rglob("*")):
            if path.is_symlink():
                seen[str(path)] = "-> " + str(path.readlink())
            elif path.is_file():
                seen[str(path)] = path.read_bytes()
    return seen


def export(folder: Path, files: dict[str, str]) -> None:
    with export_directory(folder) as d:
        for rel, text in files.items():
            (d / rel).parent.mkdir(parents=True, exist_ok=True)
            (d / rel).write_text(text)


def refusal(capsys, argv: list[str]) -> tuple[int, list[str]]:
    """The exit status and the lines on stderr (progress lines left out)."""
    code = main(argv)
    return code, [line for line in capsys.readouterr().err.splitlines() if not line.startswith("[")]


def assert_one_line(code: int, err: list[str], *names: str) -> None:
    assert code == 2 and len(err) == 1 and err[0].startswith("error: ") and "internal" not in err[0], err
    assert any(name in err[0] for name in names), err


@pytest.fixture
def received(tmp_path):
    """A folder the user received (a colleague's results), with a journal planted in it that names the
    user's files, a link out of the folder to a file that must survive, and a backup folder that is a link
    to a folder of the sender's choosing."""
    outside = tmp_path / "home"
    outside.mkdir()
    (outside / "thesis.tex").write_text("\\section{years of work}")
    (outside / "evil").mkdir()
    (outside / "evil" / "results.csv").write_text("planted")
    folder = tmp_path / "received"
    folder.mkdir()
    (folder / "results.csv").write_text("a,b\n1,2\n")
    (folder / "README.md").write_text("read me")
    (folder / "thesis-link.tex").symlink_to(outside / "thesis.tex")
    (folder / "drafts").symlink_to(outside)  # a folder link out of it
    (folder / BACKUP).symlink_to(outside / "evil")
    (folder / JOURNAL).write_text(json.dumps({"old": ["results.csv"], "new_dirs": [],
                                              "new": ["README.md", "thesis-link.tex", "drafts/thesis.tex"]}))
    return folder, outside


def test_a_journal_planted_in_a_received_folder_deletes_nothing(received, capsys, tiny_gpt2_dir):
    folder, outside = received
    before = snapshot(folder, outside)
    code, err = refusal(capsys, ["export", "-c", str(tiny_gpt2_dir), "-p", "Hello", "-o", str(folder)])
    assert snapshot(folder, outside) == before  # the files the journal named, the link's target, the sender's folder
    assert_one_line(code, err, "not from an export of ours", "not from an interrupted export of ours")


def test_a_forged_journal_of_our_format_cannot_reach_outside_or_through_links(tmp_path):
    """Even a journal in our format beside a backup marked with its id (a complete forgery) removes nothing
    outside the folder, nothing through a link, and moves in nothing that is a link."""
    out = tmp_path / "export"
    export(out, {"trace.npz": "mine"})
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious.txt").write_text("precious")
    (out / "sub").symlink_to(outside)  # a link out of the folder
    (out / "precious-link.txt").symlink_to(outside / "precious.txt")
    for new in (["sub/precious.txt", "precious-link.txt"], ["../outside/precious.txt"]):
        backup = out / BACKUP
        backup.mkdir()
        (backup / ".explorer-export-backup").write_text("abc")
        (backup / "passwd").symlink_to("/etc/passwd")  # an "old" file that is a link is never moved in
        (out / JOURNAL).write_text(json.dumps({"format": "transformer-explorer export journal", "id": "abc",
                                               "old": ["passwd"], "new": new, "new_dirs": ["sub"]}))
        try:
            export(out, {"trace.npz": "again"})
        except ExportError as exc:
            assert "\n" not in str(exc) and "outside its folder" in str(exc)
            for leftover in (JOURNAL, BACKUP):
                (out / leftover).unlink() if leftover == JOURNAL else shutil.rmtree(out / leftover)
        assert (outside / "precious.txt").read_text() == "precious"
        assert (out / "precious-link.txt").is_symlink() and (out / "sub").is_symlink()
        assert not os.path.lexists(out / "passwd")


def test_a_users_own_backup_folder_is_refused_and_kept(tmp_path, capsys, tiny_gpt2_dir):
    out = tmp_path / "export"
    export(out, {"trace.npz": "old"})
    mine = out / BACKUP
    mine.mkdir()
    (mine / "my-backup.txt").write_text("mine")
    before = snapshot(out)
    code, err = refusal(capsys, ["export", "-c", str(tiny_gpt2_dir), "-p", "Hello", "-o", str(out)])
    assert snapshot(out) == before
    assert_one_line(code, err, f"{BACKUP} is not from an export of ours")


def test_a_folder_holding_only_a_users_folder_under_our_name_is_not_empty(tmp_path, capsys, tiny_gpt2_dir):
    for name in (BACKUP, ".explorer-export-previous.partial", ".explorer-export-staging-mine"):
        folder = tmp_path / f"f{len(name)}"
        (folder / name).mkdir(parents=True)
        (folder / name / "notes.txt").write_text("mine")
        before = snapshot(folder)
        code, err = refusal(capsys, ["export", "-c", str(tiny_gpt2_dir), "-p", "Hello", "-o", str(folder)])
        assert snapshot(folder) == before and sorted(p.name for p in folder.iterdir()) == [name]
        assert_one_line(code, err, name)


def test_a_marked_staging_folder_in_a_users_folder_stays_when_the_export_is_refused(tmp_path, capsys,
                                                                                   tiny_gpt2_dir):
    folder = tmp_path / "mine"
    staging = folder / ".explorer-export-staging-copy"
    staging.mkdir(parents=True)
    (staging / ".explorer-export-staging").write_text("")
    (staging / "figure.svg").write_text("<svg/>")
    (folder / "data.csv").write_text("1,2")
    before = snapshot(folder)
    code, err = refusal(capsys, ["export", "-c", str(tiny_gpt2_dir), "-p", "Hello", "-o", str(folder)])
    assert snapshot(folder) == before
    assert_one_line(code, err, "not an earlier export")
