"""A SentencePiece ``tokenizer.model`` (Llama-2, Mistral-7B-v0.1, TinyLlama) as a ``tokenizers`` pipeline.

The ``.model`` file is a protobuf that ``sentencepiece`` parses (no code runs). For a BPE model
(``model_type`` 2, what those checkpoints use) this builds the pipeline that
``transformers.LlamaTokenizer`` builds from the same file, so the ids are the ones
``AutoTokenizer`` gives:

* the vocabulary is the pieces in file order; the merges are every split of a piece into two
  pieces that are both in the vocabulary, ordered by the merged piece's id and then by the length
  of its left half;
* a BPE with byte fallback (a character without a piece becomes its UTF-8 bytes, ``<0xNN>``);
* a ``Metaspace`` pre-tokenizer: spaces become ``▁`` and one ``▁`` is put before the text (only at
  its start, not after a special token, unless ``legacy`` is set; never when the model was trained
  without a dummy prefix);
* control pieces (``<s>``, ``</s>``) and the unknown piece are special added tokens, user-defined
  pieces plain added tokens.

Unigram models (T5, ALBERT style) are refused with the reason.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from explorer.core.errors import TokenizerError
from explorer.core.tokenize.hf_files import read_bytes

CONTROL, UNKNOWN, USER_DEFINED = 3, 2, 4


def _proto(path: Path) -> Any:
    try:
        from sentencepiece import sentencepiece_model_pb2
    except ImportError:  # pragma: no cover - a runtime dependency
        raise TokenizerError("reading tokenizer.model needs the 'sentencepiece' package") from None
    model = sentencepiece_model_pb2.ModelProto()
    try:
        model.ParseFromString(read_bytes(path))
    except Exception as exc:  # protobuf's DecodeError and friends
        raise TokenizerError(f"{path} is not a SentencePiece model ({type(exc).__name__})") from None
    if not model.pieces:
        raise TokenizerError(f"{path} is not a SentencePiece model (it has no pieces)")
    return model


def sentencepiece_merges(vocab: dict[str, int]) -> list[tuple[str, str]]:
    """Every (left, right) whose concatenation is a piece, by the piece's id, then the left half's length."""
    merges: list[tuple[str, str]] = []
    for piece, _ in sorted(vocab.items(), key=lambda kv: kv[1]):
        for cut in range(1, len(piece)):
            left, right = piece[:cut], piece[cut:]
            if left in vocab and right in vocab:
                merges.append((left, right))
    return merges


def tokenizer_from_model(path: Path, config: dict[str, Any]) -> Any:
    """A ``tokenizers.Tokenizer`` equivalent to transformers' LlamaTokenizer built from ``tokenizer.model``."""
    from tokenizers import AddedToken, Tokenizer, decoders, pre_tokenizers
    from tokenizers.models import BPE

    proto = _proto(path)
    if proto.trainer_spec.model_type != 2:
        kinds = {1: "Unigram", 2: "BPE", 3: "word", 4: "char"}
        raise TokenizerError(f"{path.name} is a SentencePiece {kinds.get(proto.trainer_spec.model_type, '?')} "
                             "model; only BPE SentencePiece models (Llama-2, Mistral style) are read")
    vocab: dict[str, int] = {}
    for i, p in enumerate(proto.pieces):
        vocab[p.piece] = i  # a repeated piece keeps its last id, as transformers' extractor does
    backend = Tokenizer(BPE(vocab=vocab, merges=sentencepiece_merges(vocab), fuse_unk=True, byte_fallback=True,
                            dropout=None))
    add_prefix = bool(config.get("add_prefix_space", True)) and proto.normalizer_spec.add_dummy_prefix
    scheme = ("always" if config.get("legacy", False) is True else "first") if add_prefix else "never"
    backend.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme=scheme, split=False)
    steps = [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
    backend.decoder = decoders.Sequence(steps + ([decoders.Strip(content=" ", left=1)] if add_prefix else []))
    added = [AddedToken(p.piece, normalized=False, special=p.type in (CONTROL, UNKNOWN))
             for p in proto.pieces if p.type in (CONTROL, UNKNOWN, USER_DEFINED)]
    if added:
        backend.add_tokens(added)
    return backend
