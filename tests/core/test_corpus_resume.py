"""Corpus runs that stop: killed with SIGKILL and resumed, cancelled, hostile corpus files, a locked database,
Parquet with and without pyarrow. Whatever happens, one line, and nothing committed is lost."""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from explorer.cli import main
from explorer.core.cancel import Cancel
from explorer.core.checkpoint import load_checkpoint
from explorer.core.corpus import Corpus, CorpusError, open_run, reading
from explorer.core.corpus.run import run_corpus
from tests.core.corpus_reference import same_results, table_rows

ROOT = Path(__file__).resolve().parents[2]
W, B = 16, 3
CHILD = """
import sys
from explorer.core.checkpoint import load_checkpoint
from explorer.core.corpus.run import run_corpus
model = load_checkpoint("shakespeare", device="cpu")
run_corpus(model, sys.argv[1], sys.argv[2], window={W}, batch={B}, k=4,
           progress=lambda p: print(p.tokens, flush=True))
print("done", flush=True)
""".format(W=W, B=B)


@pytest.fixture(scope="module")
def shakespeare():
    return load_checkpoint("shakespeare", device="cpu")


@pytest.fixture()
def text(tmp_path) -> Path:
    path = tmp_path / "plays.txt"
    path.write_text((ROOT / "models" / "shakespeare" / "heldout_sample.txt").read_text(encoding="utf-8")[:3000],
                    encoding="utf-8")  # about 1,000 tokens: 21 batches
    return path


def tokens_kept(path: Path) -> int:
    with open_run(path) as run:
        return run.info.tokens


def test_a_run_killed_at_random_points_and_resumed_equals_an_uninterrupted_run(shakespeare, text, tmp_path):
    whole = run_corpus(shakespeare, text, tmp_path / "whole.db", window=W, batch=B, k=4)
    out = tmp_path / "killed.db"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    rng = random.Random(39)
    kills, seen = 0, []
    while True:
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(text), str(out)], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, env=env)
        after = rng.randint(1, 8)  # progress lines to read: the kill lands somewhere in the batch after them
        lines = []
        for line in child.stdout:
            lines.append(line.strip())
            if line.startswith("done") or (kills < 3 and len(lines) >= after):
                break
        if lines and lines[-1] == "done":
            child.wait(timeout=120)
            break
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=60)
        kills += 1
        seen.append(tokens_kept(out))
    # batches are committed on a writer thread while the next computes: a kill soon after a progress line may
    # land before that batch's commit (a loaded machine), so a first kill can keep nothing; the last keeps some
    assert kills == 3 and seen == sorted(seen) and 0 < seen[-1] < whole.tokens
    with open_run(out) as run:
        assert run.info.tokens == whole.tokens and run.info.complete
    same_results(whole.path, out)


def test_a_cancelled_run_keeps_its_batches_and_resumes_to_the_same_database(shakespeare, text, tmp_path):
    whole = run_corpus(shakespeare, text, tmp_path / "whole.db", window=W, batch=B, k=4)
    cancel = Cancel()
    seen = []

    def progress(p):
        seen.append(p)
        if p.batches == 5:
            cancel.set()

    stopped = run_corpus(shakespeare, text, tmp_path / "run.db", window=W, batch=B, k=4, progress=progress,
                         cancel=cancel)
    assert stopped.cancelled and not stopped.complete and stopped.tokens == 5 * B * W == tokens_kept(stopped.path)
    assert seen[-1].tokens_per_second > 0 and seen[-1].target is not None and "tokens/s" in seen[-1].line()
    done = run_corpus(shakespeare, text, tmp_path / "run.db", window=W, batch=B, k=4)
    assert done.complete and done.tokens == whole.tokens
    same_results(whole.path, done.path)


@pytest.mark.parametrize("bad, match", [
    ("invalid", "is not UTF-8 text (an invalid byte at byte 6)"),
    ("binary", "looks binary, not text"),
    ("sparse", "looks binary, not text (a NUL byte at byte 0)"),
    ("jsonl_huge", "a line longer than"),
    ("jsonl_field", "has no 'text' text field"),
])
def test_hostile_corpus_files_end_in_one_line_without_losing_earlier_results(bad, match, shakespeare, text,
                                                                            tmp_path, monkeypatch, capsys):
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "a.txt").write_bytes(text.read_bytes())
    if bad == "invalid":
        (folder / "b.txt").write_bytes(b"hello \xff\xfe world")
    elif bad == "binary":
        (folder / "b.txt").write_bytes(bytes(range(256)) * 4)
    elif bad == "sparse":
        with open(folder / "b.txt", "wb") as f:
            f.truncate(10 * 2**30)  # 10 GB of nothing: never written, never read past its first megabyte
    elif bad == "jsonl_huge":
        monkeypatch.setattr(reading, "MAX_LINE_BYTES", 4096)
        (folder / "b.jsonl").write_text('{"text": "ok"}\n{"text": "' + "x" * 10_000 + '"}\n', encoding="utf-8")
    else:
        (folder / "b.jsonl").write_text('{"text": "ok"}\n{"title": "no text"}\n', encoding="utf-8")
    out = tmp_path / "run.db"
    for attempt in range(2):  # and again: the same line, the same results kept
        with pytest.raises(CorpusError, match=match.replace("(", r"\(").replace(")", r"\)")) as info:
            run_corpus(shakespeare, folder, out, window=W, batch=B, k=4)
        assert "\n" not in str(info.value)
        kept = tokens_kept(out)
        assert kept >= 900 if attempt == 0 else kept == first
        first = kept
    args = ["corpus", "--checkpoint", "shakespeare", "--device", "cpu", "--corpus", str(folder), "--out", str(out),
            "--window", str(W), "--batch", str(B), "--top", "4"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("error: ") and match.split(" (")[0] in err
    assert tokens_kept(out) == first


def test_a_huge_line_in_a_text_file_is_read_a_piece_at_a_time(shakespeare, tmp_path, monkeypatch):
    monkeypatch.setattr(reading, "CHUNK_BYTES", 1000)
    path = tmp_path / "line.txt"
    path.write_text(("word " * 1500).strip() + "é" * 600, encoding="utf-8")  # one line, no newline, 2-byte chars
    pieces = list(Corpus(path).pieces())
    assert len(pieces) >= 9 and "".join(p.text for p in pieces) == path.read_text(encoding="utf-8")
    assert [p.last for p in pieces].count(True) == 1 and pieces[0].first
    summary = run_corpus(shakespeare, path, tmp_path / "run.db", window=W, batch=8, k=4, heads=False)
    assert summary.complete and summary.tokens > 1500


def test_a_locked_database_ends_in_one_line_and_keeps_what_it_holds(shakespeare, text, tmp_path, capsys):
    out = tmp_path / "run.db"
    run_corpus(shakespeare, text, out, window=W, batch=B, k=4, tokens=4 * W)
    before = tokens_kept(out)
    holder = sqlite3.connect(out, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(CorpusError, match="is locked by another program") as info:
            run_corpus(shakespeare, text, out, window=W, batch=B, k=4, timeout=0.2)
        assert "\n" not in str(info.value)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert tokens_kept(out) == before
    assert run_corpus(shakespeare, text, out, window=W, batch=B, k=4).complete


def test_parquet_reads_like_json_lines(shakespeare, tmp_path):
    pa = pytest.importorskip("pyarrow", reason="Parquet is the optional 'parquet' extra")
    import pyarrow.parquet as pq

    docs = ["To be, or not to be.", "", "That is the question. " * 40, "Whether 'tis nobler in the mind to suffer"]
    pq.write_table(pa.table({"text": docs}), tmp_path / "d.parquet", row_group_size=2)
    (tmp_path / "d.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in docs), encoding="utf-8")
    a = run_corpus(shakespeare, tmp_path / "d.parquet", tmp_path / "p.db", window=W, batch=B, k=4)
    b = run_corpus(shakespeare, tmp_path / "d.jsonl", tmp_path / "j.db", window=W, batch=B, k=4)
    assert a.tokens == b.tokens > 100
    for table in ("windows", "top", "stats"):
        assert table_rows(a.path, table) == table_rows(b.path, table)
    with open_run(a.path) as run:
        assert run.top_examples("neurons", 0, 0)[0].doc_name.startswith("d.parquet:row ")


def test_parquet_without_pyarrow_says_what_to_install(tmp_path, monkeypatch):
    (tmp_path / "d.parquet").write_bytes(b"PAR1")
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(CorpusError, match=r"reading Parquet needs pyarrow: pip install 'transformer-explorer\[parquet\]'"):
        Corpus(tmp_path / "d.parquet")


def test_an_out_file_that_is_not_a_run_is_left_as_it_is(shakespeare, text, tmp_path):
    note = tmp_path / "notes.db"
    note.write_text("my notes, not a database\n", encoding="utf-8")
    with pytest.raises(CorpusError, match="is not a corpus run database"):
        run_corpus(shakespeare, text, note, window=W, batch=B, k=4)
    assert note.read_text(encoding="utf-8") == "my notes, not a database\n"
    other = tmp_path / "other.db"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE mine (x)")
    con.commit()
    con.close()
    before = other.read_bytes()
    with pytest.raises(CorpusError, match="is a database of another program"):
        run_corpus(shakespeare, text, other, window=W, batch=B, k=4)
    assert other.read_bytes() == before
