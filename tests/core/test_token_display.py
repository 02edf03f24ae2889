"""One way to show a token (explorer.core.display.tokens): the same glyphs in every panel, the
generation pane, the token chips and the exported pictures."""

from __future__ import annotations

from explorer.core.display.levels import abbreviate
from explorer.core.display.tokens import EMPTY, GLYPHS, quoted, short, visible, vocab_quoted, vocab_text
from explorer.core.tokenize.base import VocabTokenizer, bytes_display
from explorer.core.tokenize.display import chip_views, visible_whitespace


def test_spaces_newlines_tabs_and_control_characters_get_one_glyph_each() -> None:
    assert visible(" a\n\tb\r\u00a0") == "\u00b7a\u21b5\u21e5b\u240d\u237d"
    assert visible("x\x00y\x7f") == "x\\x00y\\x7f"
    assert short("", 5) == EMPTY and short(" the long token", 6) == "\u00b7the\u00b7\u2026"
    assert quoted(" cat") == "'\u00b7cat'" and quoted("") == "''"
    assert quoted("a" * 30, 10) == "'" + "a" * 9 + "\u2026'"


def test_partial_bytes_are_shown_as_escapes() -> None:
    assert bytes_display("é".encode()[:1]) == "\\xc3"
    assert visible(bytes_display(b" \xf0\x9f")) == "\u00b7\\xf0\\x9f"


def test_every_display_function_uses_the_same_glyphs() -> None:
    """Chips, the generation pane, heatmap cells, quoted tokens and axis labels agree on each character."""
    chip = chip_views([1], [b" \n\t"])[0].label
    assert chip == visible_whitespace(" \n\t") == visible(" \n\t") == short(" \n\t") == quoted(" \n\t")[1:-1]
    for c in "\n\t\r":  # axis labels (not only tokens) keep their spaces, and share the other glyphs
        assert abbreviate(f"a{c}b") == f"a{GLYPHS[c]}b"


def test_a_vocabulary_id_without_a_display_string_is_its_number() -> None:
    tok = VocabTokenizer(["a", " b"])
    assert vocab_text(tok, 1) == " b" and vocab_quoted(tok, 1) == "'\u00b7b'"
    assert vocab_text(None, 7) == "#7" and vocab_quoted(None, 7) == "#7"
    assert vocab_text(tok, 99) == "#99"
