"""Tests for explorer.core.tokenize.bpe: the byte-level BPE trainer and its tiktoken encoding."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from explorer.core.tokenize.bpe import (
    ENDOFTEXT,
    GPT2_PATTERN,
    load_ranks,
    make_encoding,
    save_ranks,
    train_byte_bpe,
    train_byte_bpe_detailed,
)

SAMPLE = (
    "ROMEO:\nBut soft, what light through yonder window breaks?\n"
    "It is the east, and Juliet is the sun.\n\n"
    "JULIET:\nO Romeo, Romeo! wherefore art thou Romeo?\n"
    "Deny thy father and refuse thy name;\n"
    "  Or, if thou wilt not, be but sworn my love,\n"
    "And I'll no longer be a Capulet.\n\n"
    "HAMLET:\nTo be, or not to be, that is the question:\n"
    "Whether 'tis nobler in the mind to suffer\n"
    "The slings and arrows of outrageous fortune...\n"
    "Café naïve façade — señor Ünïcødé 東京 東京 🙂🙂 1599 1600 1601\t\ttabs   spaces\n"
)
TEXT = SAMPLE * 3 + SAMPLE.upper() + SAMPLE.replace("o", "0")
VOCAB = 600


@pytest.fixture(scope="module")
def trained():
    return train_byte_bpe_detailed(TEXT, VOCAB)


@pytest.fixture(scope="module")
def enc(trained):
    return make_encoding(trained.ranks, name="test-bpe")


def _r50k_pattern() -> str:
    """tiktoken's r50k pattern: a module constant since tiktoken 0.8, inside ``r50k_base()`` before."""
    import tiktoken_ext.openai_public as openai_public

    if hasattr(openai_public, "r50k_pat_str"):
        return openai_public.r50k_pat_str
    from unittest import mock

    with mock.patch.object(openai_public, "load_tiktoken_bpe", lambda *a, **k: {}):  # no download
        return openai_public.r50k_base()["pat_str"]


@settings(max_examples=300, deadline=None)
@given(s=st.text(alphabet=st.sampled_from(list("ab Z9'sdlvetr \n\t\r.,!é東🙂\u00a0\u2003")) | st.characters()))
def test_gpt2_pattern_splits_like_tiktoken_r50k(s: str) -> None:
    """Same chunks as tiktoken's (possessive-quantifier) r50k pattern."""
    import regex

    assert regex.findall(GPT2_PATTERN, s) == regex.findall(_r50k_pattern(), s)
    assert "".join(regex.findall(GPT2_PATTERN, s)) == s


def test_single_bytes_have_rank_equal_to_byte(trained) -> None:
    for b in range(256):
        assert trained.ranks[bytes([b])] == b


def test_vocab_size_reached_and_ranks_contiguous(trained) -> None:
    ranks = trained.ranks
    assert len(ranks) == VOCAB
    assert sorted(ranks.values()) == list(range(VOCAB))
    # every merged token is longer than one byte and composed of two earlier tokens
    for tok, r in ranks.items():
        if r >= 256:
            assert len(tok) >= 2
            assert any(
                tok[:k] in ranks and tok[k:] in ranks and ranks[tok[:k]] < r and ranks[tok[k:]] < r
                for k in range(1, len(tok))
            )


def test_merged_tokens_are_frequent_words(trained) -> None:
    assert b" Romeo" in trained.ranks
    assert b"ROMEO" in trained.ranks


def test_tie_break_is_smallest_pair() -> None:
    ranks = train_byte_bpe("abcd", 259)
    extra = {tok: r for tok, r in ranks.items() if r >= 256}
    # all pairs have count 1: (a,b) first; then (c,d) < (ab,c); then (ab,cd)
    assert extra == {b"ab": 256, b"cd": 257, b"abcd": 258}


def test_most_frequent_pair_first() -> None:
    # chunks "zw", " zw" x3, " xy": (z,w)=4 beats (space,z)=3 and (space,x)=(x,y)=1.
    ranks = train_byte_bpe("zw zw zw zw xy", 257)
    assert {t: r for t, r in ranks.items() if r >= 256} == {b"zw": 256}
    # counts: (space, zw)=3 beats (x, y)=1 and the chunk "zw" stays whole.
    ranks = train_byte_bpe("zw zw zw zw xy", 258)
    assert ranks[b" zw"] == 257


def test_stops_when_no_pairs_left() -> None:
    ranks = train_byte_bpe("ab", 1000)
    assert len(ranks) == 257
    assert ranks[b"ab"] == 256


def test_vocab_below_256_rejected() -> None:
    with pytest.raises(ValueError):
        train_byte_bpe("abc", 255)
    assert len(train_byte_bpe("abc", 256)) == 256


def test_progress_called_for_each_merge() -> None:
    calls: list[tuple[int, int]] = []
    train_byte_bpe(TEXT, 300, progress=lambda d, t: calls.append((d, t)))
    assert calls == [(i, 44) for i in range(1, 45)]


def test_deterministic(trained) -> None:
    again = train_byte_bpe(TEXT, VOCAB)
    assert list(again.items()) == list(trained.ranks.items())


def test_tiktoken_equals_trainer_segmentation(trained, enc) -> None:
    for chunk, toks in trained.chunk_tokens.items():
        assert enc.encode_ordinary(chunk) == toks, chunk
    expected_len = sum(len(trained.chunk_tokens[c]) * n for c, n in trained.chunk_counts.items())
    ids = enc.encode_ordinary(TEXT)
    assert len(ids) == expected_len
    assert len(ids) < len(TEXT.encode("utf-8")) / 2  # real compression happened
    assert enc.decode(ids) == TEXT


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    text=st.text(alphabet=st.sampled_from(list("aab bc\n'é")), min_size=1, max_size=120),
    extra=st.integers(min_value=1, max_value=60),
)
def test_trainer_matches_tiktoken_on_adversarial_texts(text: str, extra: int) -> None:
    """Tiny alphabets force overlapping merges where a token can be spelled by several splits."""
    res = train_byte_bpe_detailed(text, 256 + extra)
    assert sorted(res.ranks.values()) == list(range(len(res.ranks)))
    enc = make_encoding(res.ranks, name="adv")
    for chunk, toks in res.chunk_tokens.items():
        assert enc.encode_ordinary(chunk) == toks
    assert enc.decode(enc.encode_ordinary(text)) == text


@settings(max_examples=300, deadline=None)
@given(s=st.text())
def test_roundtrip_arbitrary_unicode(enc, s: str) -> None:
    ids = enc.encode(s, disallowed_special=())
    assert all(0 <= i < enc.n_vocab for i in ids)
    assert enc.decode(ids) == s
    assert enc.decode(enc.encode_ordinary(s)) == s


@given(data=st.binary(max_size=64))
def test_every_byte_is_encodable(enc, data: bytes) -> None:
    for b in range(256):
        assert enc.encode_single_token(bytes([b])) == b
    s = data.decode("utf-8", errors="replace")
    assert enc.decode_bytes(enc.encode_ordinary(s)) == s.encode("utf-8")


def test_special_token(enc) -> None:
    assert enc.n_vocab == VOCAB + 1
    assert enc.encode(ENDOFTEXT, allowed_special="all") == [VOCAB]
    with pytest.raises(ValueError):
        enc.encode(ENDOFTEXT)


def test_save_load_roundtrip(tmp_path: Path, trained, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "r.tiktoken"
    save_ranks(trained.ranks, path)
    lines = path.read_text().splitlines()
    assert len(lines) == VOCAB
    assert lines[65] == "QQ== 65"  # base64 of b"A", rank 65
    loaded = load_ranks(path)
    assert loaded == trained.ranks
    # compatible with tiktoken's own reader (cache disabled: it caches by path otherwise)
    from tiktoken.load import load_tiktoken_bpe

    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "")
    assert load_tiktoken_bpe(str(path)) == trained.ranks
    # re-saving different ranks to the same path is picked up
    small = train_byte_bpe(TEXT, 270)
    save_ranks(small, path)
    assert load_ranks(path) == small


def test_load_rejects_garbage(tmp_path: Path) -> None:
    path = tmp_path / "bad.tiktoken"
    path.write_text("QQ== 65\nnot base64!! x\n")
    with pytest.raises(ValueError):
        load_ranks(path)
