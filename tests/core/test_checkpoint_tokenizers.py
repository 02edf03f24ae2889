"""A checkpoint's own tokenizer: tokenizer.json (byte-level BPE in several styles, SentencePiece-style),
vocab.json + merges.txt, GPT-2's files, the token-id stand-in when none can be read; compared with the
``tokenizers`` library on the same text."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from loader_reference import CORPUS, TEXTS, TOL, VOCAB, build, compare, reference, train_tokenizer

from explorer.core.checkpoint import load_checkpoint
from explorer.core.errors import CheckpointError, TokenizerError

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")


@pytest.fixture(scope="module", params=["gpt2", "llama3", "smollm", "pythia", "prefix"])
def trained(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(f"tok-{request.param}")
    tok = train_tokenizer(request.param)
    tok.save(str(path / "tokenizer.json"))
    from explorer.core.tokenize.huggingface import tokenizer_from_json

    return request.param, tok, tokenizer_from_json(path / "tokenizer.json")


def test_byte_level_tokenizer_json_matches_tokenizers(trained):
    style, reference_tok, ours = trained
    for text in TEXTS + CORPUS[:7]:
        assert ours.encode(text) == reference_tok.encode(text).ids, text
        if style not in ("prefix", "pythia"):  # those add a space / normalize
            assert ours.decode(ours.encode(text)).replace("<|begin_of_text|>", "") == text


PIECES = list("ab 1\n\t.'éü日\u0301") + ["  ", "<|endoftext|>", "    ", "<|padding|>", "The", " quick", "123"]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=16).map("".join) | st.text(max_size=20))
def test_byte_level_tokenizer_json_matches_tokenizers_on_any_text(trained, text):
    _, reference_tok, ours = trained
    assert ours.encode(text) == reference_tok.encode(text).ids


def test_ids_out_of_merge_order_are_read_as_tokenizers_reads_them(tmp_path):
    from explorer.core.tokenize.huggingface import tokenizer_from_json

    data = json.loads(train_tokenizer("gpt2").to_str())
    vocab = data["model"]["vocab"]
    first, second = ("".join(m) if isinstance(m, list) else m.replace(" ", "") for m in data["model"]["merges"][:2])
    vocab[first], vocab[second] = vocab[second], vocab[first]
    (tmp_path / "tokenizer.json").write_text(json.dumps(data))
    reference_tok = tokenizers.Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    ours = tokenizer_from_json(tmp_path / "tokenizer.json")
    for text in TEXTS:
        assert ours.encode(text) == reference_tok.encode(text).ids


def test_llama_with_llama3_style_tokenizer_runs_on_text(llama, tmp_path):
    path, model = llama
    for f in path.iterdir():
        (tmp_path / f.name).write_bytes(f.read_bytes())
    tok = train_tokenizer("llama3")
    tok.save(str(tmp_path / "tokenizer.json"))
    loaded = load_checkpoint(tmp_path, device="cpu")
    assert loaded.notes == [] and loaded.tokenizer.name == f"{tmp_path.name} tokenizer"
    ids = loaded.tokenizer.encode("Hello world, 12345")
    assert ids == tok.encode("Hello world, 12345").ids and ids[0] == tok.token_to_id("<|begin_of_text|>")
    trace = loaded.trace("Hello world, 12345")
    assert trace.tokens[0] == "<|begin_of_text|>"
    assert np.abs(trace["logits"] - reference(model, ids).logits[0].numpy()).max() < TOL


def test_sentencepiece_style_tokenizer_json_is_read(llama, tmp_path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    path, model = llama
    for f in path.iterdir():
        (tmp_path / f.name).write_bytes(f.read_bytes())
    sp = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>"))
    sp.pre_tokenizer = pre_tokenizers.Metaspace()
    sp.decoder = decoders.Metaspace()
    sp.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=120, special_tokens=["<unk>", "<s>", "</s>"],
                                                        show_progress=False))
    sp.save(str(tmp_path / "tokenizer.json"))
    loaded = load_checkpoint(tmp_path, device="cpu")
    assert loaded.notes == [] and loaded.tokenizer.encode("Hello world") == sp.encode("Hello world").ids
    ids = loaded.tokenizer.encode("Hello world")
    assert "".join(loaded.tokenizer.displays(ids)) == " Hello world"  # ▁ shown as the space it stands for
    compare(loaded, model, ids)


def test_unreadable_tokenizer_falls_back_to_token_ids_with_a_note(llama, tmp_path):
    path, model = llama
    for f in path.iterdir():
        (tmp_path / f.name).write_bytes(f.read_bytes())
    (tmp_path / "tokenizer.model").write_bytes(b"\x0a\x00")
    loaded = load_checkpoint(tmp_path, device="cpu")
    assert len(loaded.notes) == 1 and "tokenizer.model is a SentencePiece Unigram model" in loaded.notes[0]
    assert loaded.tokenizer.encode("1 250, 12") == [1, 250, 12]
    assert loaded.tokenizer.displays([1, 250]) == ["[1]", "[250]"]
    with pytest.raises(TokenizerError, match="token ids separated by spaces"):
        loaded.tokenizer.encode("Hello")
    with pytest.raises(TokenizerError, match="0..299"):
        loaded.tokenizer.encode("5 300")
    compare(loaded, model)
    (tmp_path / "tokenizer.model").write_bytes(b"\xff" * 9)
    assert "tokenizer.model is not a SentencePiece model" in load_checkpoint(tmp_path, device="cpu").notes[0]


def test_tokenizer_larger_than_the_model_is_an_error(tmp_path):
    model = build("gpt_neox", vocab_size=100)
    model.save_pretrained(tmp_path)
    train_tokenizer("gpt2").save(str(tmp_path / "tokenizer.json"))
    with pytest.raises(CheckpointError, match="tokens but the model only 100"):
        load_checkpoint(tmp_path)


def test_a_plain_byte_level_tokenizer_survives_a_native_round_trip(tmp_path):
    from explorer.core.checkpoint import save_native

    model = build("gpt_neox")
    model.save_pretrained(tmp_path / "hf")
    tok = train_tokenizer("gpt2")
    tok.save(str(tmp_path / "hf" / "tokenizer.json"))
    loaded = load_checkpoint(tmp_path / "hf", device="cpu")
    assert loaded.tokenizer.describe()["type"] == "hf-tokenizer-json"
    save_native(loaded.model, loaded.tokenizer, tmp_path / "native")
    again = load_checkpoint(tmp_path / "native", device="cpu")
    for text in TEXTS:
        assert again.tokenizer.encode(text) == tok.encode(text).ids
    assert np.array_equal(again.trace("Hello world")["logits"], loaded.trace("Hello world")["logits"])


def test_vocab_json_and_merges_txt(tmp_path):
    from explorer.core.tokenize.huggingface import tokenizer_for_checkpoint

    tok = train_tokenizer("gpt2")
    tok.model.save(str(tmp_path))  # vocab.json + merges.txt
    ours, notes = tokenizer_for_checkpoint(tmp_path, VOCAB)
    assert notes == []
    for text in TEXTS:
        assert ours.encode(text) == tok.encode(text).ids


def test_gpt2_files_read_by_tokenizers_equal_tiktoken_gpt2(tmp_path):
    from explorer.core.tokenize.huggingface import tokenizer_from_vocab_merges
    from explorer.core.tokenize.base import gpt2_tokenizer

    from gpt2_files import write_gpt2_files  # tests/gpt2_files.py

    encoder_json, vocab_bpe = write_gpt2_files(tmp_path)
    ours, reference_tok = tokenizer_from_vocab_merges(encoder_json, vocab_bpe, "gpt2-files"), gpt2_tokenizer()
    assert ours.vocab_size == 50257 and ours.eos_id is None
    for text in TEXTS + ["<|endoftext|>Café 🦜"]:
        ids = ours.encode(text)
        assert ids == reference_tok.encode(text)
        assert ours.displays(ids) == reference_tok.displays(ids)
