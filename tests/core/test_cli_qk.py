"""``transformer-explorer qk`` and ``ov`` on the bundled induction model: what they print is the split's."""

from __future__ import annotations

import csv
import re

import numpy as np

from explorer.cli import main
from explorer.core.analysis.ov import ov_split
from explorer.core.analysis.qk import qk_split
from explorer.core.checkpoint import load_checkpoint

REPEAT = " the cat sat on the hat. the cat sat on the"


def test_qk_prints_the_ranked_terms_and_writes_the_table(tmp_path, capsys):
    table = tmp_path / "table.csv"
    assert main(["qk", "-c", "induction", "-p", REPEAT, "-l", "1", "--head", "2", "--top", "3",
                 "--table", str(table)]) == 0
    out = capsys.readouterr().out.splitlines()
    trace = load_checkpoint("induction", device="cpu").trace(REPEAT)
    n = trace.n_tokens
    key = int(np.argmax(trace.head(1, 2, "pattern")[n - 1]))  # the default key: where the head looks most
    split = qk_split(trace, 1, 2, n - 1, key)
    assert out[0].startswith(f"head 1.2, query #{n - 1} '·the' -> key #{key} ")
    assert f"score {split.score:+.4f}" in out[0] and f"add up to {split.total:+.4f}" in out[0]
    terms = split.terms(3)
    assert [line.split(None, 2)[2] for line in out[1:4]] == [t.label for t in terms]
    assert [float(line.split()[1]) for line in out[1:4]] == [round(t.value, 4) for t in terms]
    assert any(line.startswith("note: Rotary") for line in out)
    rows = list(csv.reader(table.open(encoding="utf-8")))
    assert rows[0][1:] == list(split.key_names) and [r[0] for r in rows[1:]] == list(split.query_names)
    np.testing.assert_allclose(np.array([r[1:] for r in rows[1:]], dtype=float), split.table, rtol=1e-6, atol=1e-9)


def test_ov_prints_the_sources_and_what_the_head_would_copy(capsys):
    assert main(["ov", "-c", "induction", "-p", REPEAT, "-l", "1", "--head", "2", "--copy", "value",
                 "--target", " cat"]) == 0
    out = capsys.readouterr().out
    loaded = load_checkpoint("induction", device="cpu")
    trace = loaded.trace(REPEAT)
    split = ov_split(trace, 1, 2, trace.n_tokens - 1, loaded.tokenizer.encode(" cat")[0])
    assert f"add up to {split.dla.sum():+.4f}; the head's DLA term: {split.dla_total:+.4f}" in out
    first = int(split.sources[np.argmax(np.abs(split.shares))])
    assert re.search(rf"^  #{first} '·cat'  {split.weights.max():.3f} ", out, re.M)
    # copied with weight 1, the value at the first ' cat' raises ' cat' most: the induction head copies it
    assert re.search(r"^  '·cat' \(#1, weight [0-9.]+\): '·cat' \+", out, re.M)
    assert main(["ov", "-c", "induction", "-p", REPEAT, "-l", "3", "--head", "2"]) == 2
    assert "no head 3.2" in capsys.readouterr().err


def test_qk_on_a_recurrent_layer_says_what_it_is_in_one_line(capsys):
    """A hybrid's DeltaNet layer has no scores: the command ends with one line naming the layer's kind and where
    its effective attention is; its attention layer splits as any other."""
    from decoder_reference import VOCAB
    from test_in_memory_families import tiny

    from explorer.core.checkpoint.in_memory import register
    from explorer.core.tokenize.base import VocabTokenizer

    source = register(tiny("qwen3_5_text"), VocabTokenizer([f"w{i}" for i in range(VOCAB)]))
    prompt = " ".join(f"w{i}" for i in (3, 9, 4, 17, 3, 9))
    assert main(["qk", "-c", source, "-p", prompt, "-l", "0", "--head", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "layer 0 is a Gated DeltaNet layer" in err[0]
    assert "blocks.0.mixer.effective_attention" in err[0]
    assert main(["qk", "-c", source, "-p", prompt, "-l", "3", "--head", "1", "--top", "2"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("head 3.1, query #5 'w9' -> key #") and "note: A Gated DeltaNet layer is not linear" in out
