"""The tokenizer in a GGUF file (``tokenizer.ggml.*``) gives the ids ``transformers``' GGUF tokenizer gives.

Vocabularies are written as llama.cpp writes them: GPT-2's byte-level BPE (rebuilt from the shipped
ranks) with its merges, with GPT-2's split and with Llama 3's (``tokenizer.ggml.pre = llama-bpe``);
Mistral-7B-v0.1's SentencePiece vocabulary (from ``mistral-common``) as tokens, scores and types,
without merges, so they are rebuilt from the scores.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import gguf
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpt2_files import gpt2_vocab_and_merges  # noqa: E402
from gguf_files import tokenizer_fields  # noqa: E402

from explorer.core.checkpoint.gguf_validate import read_header  # noqa: E402
from explorer.core.tokenize.gguf_tokenizer import tokenizer_from_gguf  # noqa: E402
from explorer.core.tokenize.huggingface import TokenIdTokenizer  # noqa: E402

TEXTS = ["Hello world", " leading space", "multiple   spaces  and\ttabs", "café ☕ 日本語 naïve", "emoji 🤖🎉",
         "<|endoftext|> after a special", "<s>inside</s> tags", "lines\nbreak\n\n  here", "digits 1234567 3.14159",
         "don't they'll WE'RE", "", " ", "ÿ\x00\x7f control"]


def write_tokenizer(path: Path, arch: str, tok: dict) -> Path:
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(f"tokenizer-{arch}")
    tokenizer_fields(w, tok)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@functools.cache
def _gpt2() -> tuple[dict, list]:
    return gpt2_vocab_and_merges()


def gpt2_tokens(pre: str, add_bos: bool | None = None) -> dict:
    encoder, merges = _gpt2()
    tokens = [t for t, _ in sorted(encoder.items(), key=lambda kv: kv[1])]
    types = [3 if t == "<|endoftext|>" else 1 for t in tokens]
    return {"model": "gpt2", "pre": pre, "tokens": tokens, "types": types, "merges": [f"{a} {b}" for a, b in merges],
            "bos": 50256, "eos": 50256, "add_bos": add_bos}


def mistral_tokens() -> dict:
    import mistral_common
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString((Path(mistral_common.__file__).parent / "data" / "tokenizer.model.v1").read_bytes())
    # llama.cpp's token types: 1 normal, 2 unknown, 3 control, 4 user-defined, 6 byte
    kinds = {1: 1, 2: 2, 3: 3, 4: 4, 6: 6}
    return {"model": "llama", "pre": "default", "tokens": [p.piece for p in proto.pieces],
            "scores": [p.score for p in proto.pieces], "types": [kinds.get(p.type, 1) for p in proto.pieces],
            "bos": 1, "eos": 2, "unk": 0, "add_bos": True}


def reference(path: Path):
    transformers = pytest.importorskip("transformers")
    return transformers.AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)


@pytest.mark.recent_reference  # transformers' GGUF tokenizer as of 5.2x (older ones add no BOS)
@pytest.mark.parametrize("case", ["gpt2", "llama-bpe", "sentencepiece", "sentencepiece-gemma2", "sentencepiece-phi3"])
def test_gguf_tokenizer_ids_equal_transformers(tmp_path, case):
    if case.startswith("sentencepiece"):
        arch = case.partition("-")[2] or "llama"  # Gemma's and Phi-3's pipelines differ from Llama's
        path = write_tokenizer(tmp_path / "spm.gguf", arch, mistral_tokens())
    else:
        path = write_tokenizer(tmp_path / f"{case}.gguf", "gpt2" if case == "gpt2" else "llama",
                               gpt2_tokens("gpt-2" if case == "gpt2" else "llama-bpe",
                                           add_bos=None if case == "gpt2" else True))
    ours, notes = tokenizer_from_gguf(read_header(path), 32000 if case.startswith("sentencepiece") else 50257)
    theirs = reference(path)
    assert not notes
    for text in TEXTS:
        assert ours.encode(text) == theirs(text)["input_ids"], text
    ids = ours.encode("Hello world, café")
    assert ours.decode(ids) == theirs.decode(ids)
    assert ours.eos_id == (2 if case.startswith("sentencepiece") else 50256)
    if case == "sentencepiece":
        assert ours.encode("Hi")[0] == 1 and b"".join(ours.token_bytes(i) for i in ours.encode("Hi")[1:]) == b" Hi"
    elif case == "gpt2" or case == "llama-bpe":
        ids = ours.encode("café")
        assert (ids[0] == 50256) == (case == "llama-bpe")  # Llama 3's files ask for a BOS
        assert b"".join(ours.token_bytes(i) for i in ids[1 if case == "llama-bpe" else 0:]) == "café".encode()


def test_a_file_without_a_readable_tokenizer_gets_the_token_id_stand_in(tmp_path):
    path = write_tokenizer(tmp_path / "t5.gguf", "llama", {"model": "t5", "tokens": ["a", "b"], "scores": [0.0, 0.0]})
    tokenizer, notes = tokenizer_from_gguf(read_header(path), 100)
    assert isinstance(tokenizer, TokenIdTokenizer) and tokenizer.encode("1 2") == [1, 2]
    assert "'t5'" in notes[0] and "token ids" in notes[0]


@pytest.mark.recent_reference  # transformers' GGUF tokenizer as of 5.2x (older ones add no BOS)
def test_split_regexes_are_transformers_own():
    from transformers.integrations.gguf import gguf_tokenizer_mapping

    from explorer.core.tokenize.gguf_tokenizer import SPLITS

    theirs = gguf_tokenizer_mapping.GGUF_PRE_TOKENIZER_SPLITS
    assert {k: theirs.get(k) for k in SPLITS} == SPLITS
    assert {"llama-bpe", "qwen2", "tekken", "gpt-4o"} <= set(SPLITS)


@pytest.mark.parametrize("declared, actual", [("llama", "bpe"), ("gpt2", "sentencepiece")])
def test_a_vocabulary_declared_as_the_other_kind_is_noted_not_read_wrongly(tmp_path, declared, actual):
    """Issue 34: GPT-2's BPE vocabulary declared SentencePiece (or Mistral's declared BPE) loaded as wrong tokens
    without a note; now the file gets the token-id stand-in and a note naming the mismatch."""
    tok = gpt2_tokens("gpt-2") if actual == "bpe" else mistral_tokens()
    path = write_tokenizer(tmp_path / "mislabelled.gguf", "llama", {**tok, "model": declared})
    tokenizer, notes = tokenizer_from_gguf(read_header(path), len(tok["tokens"]))
    assert isinstance(tokenizer, TokenIdTokenizer)
    assert len(notes) == 1 and f"says '{declared}'" in notes[0] and "read wrongly" in notes[0]
