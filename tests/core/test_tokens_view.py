"""Token chips' text, bytes and colours, headless."""

from __future__ import annotations

import numpy as np
import pytest

from explorer.core.tokenize.base import VocabTokenizer, bytes_display, gpt2_tokenizer
from explorer.core.tokenize.display import (CHIP_COLOURS, PARTIAL_COLOUR, SPECIAL_COLOUR, byte_hex, chip_views,
                                       display_bytes, display_chips, is_partial_utf8, one_hot, tokenizer_chips,
                                       visible_whitespace)


def test_whitespace_is_made_visible():
    assert visible_whitespace(" the\n\tend\r") == "·the↵⇥end␍"
    assert visible_whitespace("plain") == "plain"


def test_byte_hex_and_partial_utf8():
    assert byte_hex(b" ca") == "20 63 61"
    assert byte_hex(b"") == ""
    assert is_partial_utf8("🦜".encode()[:2])
    assert not is_partial_utf8("é".encode())


@pytest.mark.parametrize("data", [b"hello", " caf\u00e9".encode(), "🦜".encode()[:3], b"\xff", b"a\\x41b"])
def test_display_bytes_inverts_bytes_display(data):
    if b"\\x" in data:  # a literal backslash-x in the text is the documented ambiguity
        assert display_bytes(bytes_display(data)) == b"a\x41b"
    else:
        assert display_bytes(bytes_display(data)) == data


def test_chips_alternate_colours_and_mark_partial_and_special_tokens():
    chips = chip_views([5, 6, 7, 8], [b" a", b"b", "🦜".encode()[:2], b"<|endoftext|>"], special_ids={8})
    assert [c.label for c in chips] == ["·a", "b", "\\xf0\\x9f", "<|endoftext|>"]
    assert chips[0].colour == CHIP_COLOURS[0] and chips[1].colour == CHIP_COLOURS[1]
    assert chips[2].partial and chips[2].colour == PARTIAL_COLOUR
    assert chips[3].special and chips[3].colour == SPECIAL_COLOUR
    assert chips[2].tooltip.splitlines()[:3] == ["position 2", "id 7 (partial UTF-8: not a whole character)",
                                                 "bytes F0 9F"]
    with pytest.raises(ValueError):
        chip_views([1, 2], [b"x"])


def test_gpt2_chips_spell_the_text_back():
    tok = gpt2_tokenizer()
    text = "Café 🦜\n"
    chips = tokenizer_chips(tok, tok.encode(text))
    assert b"".join(c.data for c in chips).decode("utf-8") == text
    assert any(c.partial for c in chips)
    assert [c.position for c in chips] == list(range(len(chips)))


def test_display_chips_match_tokenizer_chips():
    tok = gpt2_tokenizer()
    ids = tok.encode("a 🦜 b")
    assert display_chips(ids, tok.displays(ids)) == tokenizer_chips(tok, ids)


def test_vocab_tokenizer_chips():
    tok = VocabTokenizer(["Today", "is", "sunday"], split="words")
    assert [c.label for c in tokenizer_chips(tok, [0, 1, 2])] == ["Today", "is", "sunday"]


def test_one_hot():
    vector = one_hot(3, 10)
    assert vector.dtype == np.float32 and vector.sum() == 1 and vector[3] == 1
    with pytest.raises(ValueError):
        one_hot(10, 10)
