"""Hostile tokenizer files: one clear TokenizerError line, never a traceback, a hang or a Rust panic."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from explorer.core.errors import TokenizerError
from explorer.core.tokenize.huggingface import HFTokenizer, read_directory_tokenizer, tokenizer_from_json

tokenizers = pytest.importorskip("tokenizers")
TEXT = "Hello world, 12345 café 🦜 <|eos|>"


def small_tokenizer(style: str) -> dict:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    if style == "byte":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        alphabet = pre_tokenizers.ByteLevel.alphabet()
    else:
        tok = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
        tok.decoder = decoders.Metaspace()
        alphabet = []
    tok.train_from_iterator(["Hello world, hello there. 12345 café"] * 3,
                            trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<|eos|>"],
                                                initial_alphabet=alphabet, show_progress=False))
    return json.loads(tok.to_str())


def write(tmp_path: Path, data) -> Path:
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return path


def refused(path: Path, match: str) -> str:
    with pytest.raises(TokenizerError, match=match) as info:
        tokenizer_from_json(path)
    assert "\n" not in str(info.value)
    return str(info.value)


@pytest.mark.parametrize("bad", ["12", 2**40, -1, 3.5, True, None])
def test_vocabulary_ids_of_the_wrong_type_or_range(tmp_path, bad):
    data = small_tokenizer("byte")
    data["model"]["vocab"]["a"] = bad
    refused(write(tmp_path, data), "token id")


def test_added_token_and_template_ids_are_checked(tmp_path):
    data = small_tokenizer("byte")
    data["added_tokens"][0]["id"] = "0"
    refused(write(tmp_path, data), "added token '<unk>': token id '0' is not an integer")
    data = small_tokenizer("byte")
    data["post_processor"] = {"type": "TemplateProcessing", "single": [], "pair": [],
                              "special_tokens": {"<unk>": {"id": "<unk>", "ids": [2**40], "tokens": ["<unk>"]}}}
    refused(write(tmp_path, data), "outside")


@pytest.mark.parametrize("stage", ["ByteLevel", ["ByteLevel"], 7, {"type": "Sequence", "pretokenizers": "x"},
                                   {"type": "Sequence", "pretokenizers": [None, 3]}, {"no": "type"}])
def test_a_pre_tokenizer_that_is_not_an_object(tmp_path, stage):
    data = small_tokenizer("byte")
    data["pre_tokenizer"] = stage
    refused(write(tmp_path, data), "pre_tokenizer")


def split(pattern: str) -> dict:
    return {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}


@pytest.mark.parametrize("pattern, match", [("(", "not valid"),
                                            (r"\w*\w*\w*\w*[^\w]", "backtracks catastrophically"),
                                            (r"(?:\s|\S)*?\d\d\d\d\d\d\d\d\d\d", "did not finish")])
def test_invalid_or_backtracking_split_regexes_are_refused(tmp_path, pattern, match):
    data = small_tokenizer("byte")
    data["pre_tokenizer"] = split(pattern)
    refused(write(tmp_path, data), match)


def test_known_and_harmless_regexes_are_accepted(tmp_path):
    from explorer.core.tokenize.bpe import GPT2_PATTERN

    for pattern in (GPT2_PATTERN, r"\p{N}{1,3}| ?\p{L}+|\s+"):
        data = small_tokenizer("byte")
        data["pre_tokenizer"] = split(pattern)
        assert tokenizer_from_json(write(tmp_path, data)).encode("Hello 12345")


def test_files_that_are_not_regular_or_too_large(tmp_path, monkeypatch):
    fifo = tmp_path / "fifo" / "tokenizer.json"
    fifo.parent.mkdir()
    os.mkfifo(fifo)
    refused(fifo, "not a regular file")
    big = tmp_path / "big" / "tokenizer.json"
    big.parent.mkdir()
    with open(big, "wb") as handle:
        handle.truncate(129 * 2**20)  # sparse: costs no disk
    refused(big, "more than the 128 MB")
    refused(write(tmp_path, "[" * 100000 + "]" * 100000), "nested too deeply|not valid JSON")
    refused(write(tmp_path, "\xff{"), "not valid JSON")


def test_tokenizer_config_and_vocab_merges_are_checked(tmp_path):
    (tmp_path / "vocab.json").write_text(json.dumps({"a": 0, "b": "1"}))
    (tmp_path / "merges.txt").write_text("a b\n")
    with pytest.raises(TokenizerError, match="token id '1' is not an integer"):
        read_directory_tokenizer(tmp_path, "t")
    (tmp_path / "vocab.json").write_text(json.dumps({"a": 0, "b": 1, "ab": 2}))
    (tmp_path / "merges.txt").write_text("a b c\n")
    with pytest.raises(TokenizerError, match="not two tokens"):
        read_directory_tokenizer(tmp_path, "t")
    (tmp_path / "merges.txt").write_text("a b\n")
    (tmp_path / "tokenizer_config.json").write_text("[1]")
    with pytest.raises(TokenizerError, match="JSON object"):
        read_directory_tokenizer(tmp_path, "t")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"added_tokens_decoder": [1]}))
    with pytest.raises(TokenizerError, match="added_tokens_decoder"):
        read_directory_tokenizer(tmp_path, "t")


def test_lone_surrogates_are_a_clean_error(tmp_path):
    tok = tokenizer_from_json(write(tmp_path, small_tokenizer("byte")))
    with pytest.raises(TokenizerError, match="lone surrogate"):
        tok.encode("a\ud800b")


# --- random mutations --------------------------------------------------------------------------

BASES = {style: small_tokenizer(style) for style in ("byte", "metaspace")} if tokenizers else {}
LEAVES = (st.none() | st.booleans() | st.integers(min_value=-2**63, max_value=2**63) | st.floats()
          | st.text(max_size=8) | st.sampled_from(["BPE", "Unigram", "WordPiece", "Sequence", "ByteLevel", "Split",
                                                     "Metaspace", "TemplateProcessing", "(", "a b", "<unk>"]))
VALUES = st.recursive(LEAVES, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.sampled_from(["type", "Regex", "id", "content", "vocab", "merges"]), inner,
                                        max_size=3), max_leaves=6)


def paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for key, value in list(node.items())[:40]:
            yield from paths(value, prefix + (key,))
    elif isinstance(node, list):
        for i, value in enumerate(node[:40]):
            yield from paths(value, prefix + (i,))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(style=st.sampled_from(sorted(BASES)), data=st.data())
def test_random_mutations_give_a_clean_error_or_a_working_tokenizer(tmp_path, style, data):
    doc = copy.deepcopy(BASES[style])
    for _ in range(data.draw(st.integers(1, 3))):
        where = data.draw(st.sampled_from(list(paths(doc))[1:]))
        parent = doc
        for key in where[:-1]:
            parent = parent[key]
        if data.draw(st.booleans()) and isinstance(parent, dict):
            del parent[where[-1]]
        else:
            parent[where[-1]] = data.draw(VALUES)
    path = write(tmp_path, doc)
    try:
        tok = tokenizer_from_json(path)
    except TokenizerError as exc:
        assert str(exc) and "\n" not in str(exc)
        return
    assert isinstance(tok, HFTokenizer)
    try:
        ids = tok.encode(TEXT)
    except TokenizerError:
        return
    assert all(isinstance(i, int) for i in ids)
    tok.displays(ids)
