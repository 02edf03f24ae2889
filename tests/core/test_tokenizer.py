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
