"""Tokenizers found next to a Hugging Face checkpoint, read from local files with the ``tokenizers`` library.

Only local files are read (nothing is downloaded; ``transformers`` is not imported). The ids equal
those transformers' own tokenizer gives for the same local directory (the tests compare them),
because the same Rust library runs the same pipeline:

* ``tokenizer.json`` (every model ``tokenizers`` knows: byte-level BPE, SentencePiece-style BPE
  with ``Metaspace`` and byte fallback, Unigram, WordPiece; normalizers, added and special tokens,
  post-processors) is loaded as it is, after ``hf_files`` has checked it;
* a SentencePiece ``tokenizer.model`` alone is converted as transformers converts it (``spm``);
* GPT-2-format ``vocab.json`` + ``merges.txt`` become a byte-level BPE with GPT-2's pre-tokenizer;
* a BERT ``vocab.txt`` alone becomes BertTokenizer's WordPiece pipeline (BertNormalizer with
  ``do_lower_case``, BertPreTokenizer, ``[CLS] $A [SEP]``).

``tokenizer_config.json`` is then applied the way transformers applies it: its special tokens
(``bos_token`` ... ``mask_token``, ``added_tokens_decoder``) become special added tokens. Without a
``tokenizer.json`` an explicit ``add_bos_token``/``add_eos_token`` sets the post-processor to
``[bos] $A [eos]``; with one, those flags are ignored (as transformers 5 does) and the file's
post-processor rules (none at all means no special tokens are added).

The tokenizer itself (``HFTokenizer``, honest display strings) and ``apply_config`` live in
``hf_tokenizer``; the checks of hostile files in ``hf_files``.

When nothing can be read, ``tokenizer_for_checkpoint`` returns a ``TokenIdTokenizer`` with a note
saying why: the model still loads and runs, and a prompt is typed as token ids.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from explorer.core.errors import TokenizerError
from explorer.core.tokenize.base import Tokenizer
from explorer.core.tokenize.hf_tokenizer import STYLES, HFTokenizer, apply_config, display_style, guarded, token_text
from explorer.core.tokenize.hf_files import (MAX_TOKENIZER_JSON, check_id, check_tokenizer_json, read_json,
                                             read_text)

SUPPORTED = ("tokenizer.json (any model the tokenizers library reads), a SentencePiece BPE tokenizer.model, "
             "GPT-2-format vocab.json + merges.txt, or a BERT WordPiece vocab.txt")

__all__ = ["HFTokenizer", "SUPPORTED", "TokenIdTokenizer", "read_directory_tokenizer", "tokenizer_for_checkpoint",
           "tokenizer_from_json", "tokenizer_from_saved", "tokenizer_from_sentencepiece", "tokenizer_from_vocab_merges",
           "tokenizer_from_wordpiece"]


# --- the stand-in when no tokenizer can be read ------------------------------------------------

class TokenIdTokenizer(Tokenizer):
    """No usable tokenizer: a prompt is written as token ids ("1 450 4996"), each token shown as [id]."""

    def __init__(self, vocab_size: int, reason: str, eos_id: int | None = None) -> None:
        self._vocab_size = int(vocab_size)
        self.reason = reason
        self.name = "token ids (no supported tokenizer)"
        self.eos_id = eos_id

    @property
    def vocab_size(self) -> int:
        return self._vocab_size

    def encode(self, text: str) -> list[int]:
        pieces = text.replace(",", " ").split()
        try:
            ids = [int(p) for p in pieces]
        except ValueError:
            raise TokenizerError(f"{self.reason}. Type the prompt as token ids separated by spaces "
                                 f"(0 to {self._vocab_size - 1}), e.g. '1 450 4996'") from None
        bad = [i for i in ids if not 0 <= i < self._vocab_size]
        if bad:
            raise TokenizerError(f"token ids must lie in 0..{self._vocab_size - 1} (got {bad[0]})")
        return ids

    def decode(self, ids: list[int]) -> str:
        return " ".join(str(int(i)) for i in ids)

    def token_bytes(self, token_id: int) -> bytes:
        return f"[{int(token_id)}]".encode()

    def describe(self) -> dict[str, Any]:
        return {"type": "token-ids", "vocab_size": self._vocab_size, "reason": self.reason}

def tokenizer_from_json(path: Path, name: str | None = None, config: dict[str, Any] | None = None) -> HFTokenizer:
    """A checked ``tokenizer.json``, with ``tokenizer_config.json``'s special tokens and BOS/EOS applied."""
    from tokenizers import Tokenizer as Backend

    path = Path(path)
    name = name or f"{path.parent.name} tokenizer"
    data = read_json(path, MAX_TOKENIZER_JSON)
    check_tokenizer_json(data, path)
    raw = read_text(path, MAX_TOKENIZER_JSON)
    backend = guarded(lambda: Backend.from_str(raw), f"{path} cannot be read by the tokenizers library")
    backend.no_padding()  # a file may bake in padding/truncation (all-MiniLM's pads to 128);
    backend.no_truncation()  # transformers' tokenizer(text) switches both off unless asked
    # transformers ignores add_bos_token/add_eos_token when there is a tokenizer.json: its post-processor rules
    apply_config(backend, {k: v for k, v in (config or {}).items() if k not in ("add_bos_token", "add_eos_token")})
    return HFTokenizer(backend, name, display_style(data))


def tokenizer_from_vocab_merges(vocab_json: Path, merges_txt: Path, name: str,
                                config: dict[str, Any] | None = None) -> HFTokenizer:
    """GPT-2-format ``vocab.json`` + ``merges.txt``: transformers' GPT2Tokenizer pipeline."""
    from tokenizers import AddedToken, Tokenizer as Backend, decoders, pre_tokenizers
    from tokenizers.models import BPE

    config = dict(config or {})
    vocab = read_json(vocab_json)
    if not isinstance(vocab, dict):
        raise TokenizerError(f"{vocab_json} should hold a JSON object")
    for token, idx in vocab.items():
        check_id(idx, f"{vocab_json.name} entry {token[:40]!r}")
    merges = []
    for line in read_text(merges_txt).splitlines():
        if not line or line.startswith("#version"):
            continue
        parts = line.split(" ")
        if len(parts) != 2:
            raise TokenizerError(f"{merges_txt.name}: merge {line[:60]!r} is not two tokens separated by a space")
        merges.append((parts[0], parts[1]))
    backend = guarded(lambda: Backend(BPE(vocab=vocab, merges=merges, dropout=None, continuing_subword_prefix="",
                                           end_of_word_suffix="", fuse_unk=False)),
                       f"{vocab_json.name} + {merges_txt.name} do not make a BPE")
    prefix = config.get("add_prefix_space", False) is True
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=prefix)
    backend.decoder = decoders.ByteLevel()
    for key in ("unk_token", "bos_token", "eos_token"):  # GPT2Tokenizer's defaults
        config.setdefault(key, "<|endoftext|>")
    if "<|endoftext|>" in vocab:
        backend.add_tokens([AddedToken("<|endoftext|>", special=True, normalized=False)])
    apply_config(backend, config)
    return HFTokenizer(backend, name, "byte-level", {"type": "hf-tokenizer-json", "name": name,
                                                     "file": "tokenizer.json", "style": "byte-level"})


def tokenizer_from_wordpiece(vocab_txt: Path, name: str, config: dict[str, Any] | None = None) -> HFTokenizer:
    """A BERT ``vocab.txt`` (one token per line, the id is the line number): transformers' BertTokenizer pipeline."""
    from tokenizers import Tokenizer as Backend, decoders, normalizers, pre_tokenizers, processors
    from tokenizers.models import WordPiece

    config = dict(config or {})
    vocab: dict[str, int] = {}
    for i, line in enumerate(read_text(vocab_txt).splitlines()):
        token = line.rstrip("\r")
        if token and token not in vocab:
            vocab[token] = i
    if not vocab:
        raise TokenizerError(f"{vocab_txt} lists no tokens")
    names = {}
    for key, default in (("unk_token", "[UNK]"), ("sep_token", "[SEP]"), ("pad_token", "[PAD]"),
                         ("cls_token", "[CLS]"), ("mask_token", "[MASK]")):
        names[key] = token_text(config.get(key)) or default
        config.setdefault(key, names[key])
    backend = guarded(lambda: Backend(WordPiece(vocab, unk_token=names["unk_token"])),
                       f"{vocab_txt.name} does not make a WordPiece vocabulary")
    strip = config.get("strip_accents")
    backend.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=config.get("tokenize_chinese_chars", True) is not False,
        strip_accents=strip if isinstance(strip, bool) else None, lowercase=config.get("do_lower_case", True) is not False)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.decoder = decoders.WordPiece(prefix="##")
    apply_config(backend, {k: v for k, v in config.items() if k not in ("add_bos_token", "add_eos_token")})
    cls, sep = names["cls_token"], names["sep_token"]
    cls_id, sep_id = backend.token_to_id(cls), backend.token_to_id(sep)
    backend.post_processor = processors.TemplateProcessing(  # BertTokenizer's, whatever the configuration says
        single=f"{cls}:0 $A:0 {sep}:0", pair=f"{cls}:0 $A:0 {sep}:0 $B:1 {sep}:1",
        special_tokens=[(cls, 2 if cls_id is None else cls_id), (sep, 3 if sep_id is None else sep_id)])
    return HFTokenizer(backend, name, "wordpiece", {"type": "hf-tokenizer-json", "name": name,
                                                    "file": "tokenizer.json", "style": "wordpiece"})


def tokenizer_from_sentencepiece(model_file: Path, name: str, config: dict[str, Any] | None = None) -> HFTokenizer:
    from explorer.core.tokenize.spm import tokenizer_from_model

    config = dict(config or {})
    backend = tokenizer_from_model(model_file, config)
    for key, default in (("unk_token", "<unk>"), ("bos_token", "<s>"), ("eos_token", "</s>")):
        config.setdefault(key, default)  # LlamaTokenizer's defaults
    apply_config(backend, config)
    return HFTokenizer(backend, name, "sentencepiece", {"type": "hf-tokenizer-json", "name": name,
                                                        "file": "tokenizer.json", "style": "sentencepiece"})


def tokenizer_from_saved(desc: dict[str, Any], directory: Path) -> HFTokenizer:
    """A native checkpoint's ``hf-tokenizer-json`` description: its tokenizer.json, exactly as saved."""
    file = str(desc.get("file", "tokenizer.json"))
    if Path(file).name != file:
        raise TokenizerError(f"the tokenizer file {file!r} is not a plain file name in the checkpoint directory")
    loaded = tokenizer_from_json(Path(directory) / file, desc.get("name"))
    style = str(desc.get("style", loaded.style))
    tokenizer = HFTokenizer(loaded.backend, loaded.name, style if style in STYLES else loaded.style, desc)
    for key in ("eos_id", "mask_id"):
        value = desc.get(key)
        setattr(tokenizer, key, value if isinstance(value, int) and 0 <= value < tokenizer.vocab_size else None)
    return tokenizer

def read_tokenizer_config(directory: Path) -> dict[str, Any]:
    path = Path(directory) / "tokenizer_config.json"
    if not path.exists():
        return {}
    data = read_json(path)
    if not isinstance(data, dict):
        raise TokenizerError(f"{path} should hold a JSON object")
    return data


def read_directory_tokenizer(directory: Path, name: str) -> HFTokenizer | None:
    """The directory's own tokenizer: tokenizer.json, else tokenizer.model, else vocab.json + merges.txt, else a
    WordPiece vocab.txt."""
    directory = Path(directory)
    config = None
    for file in ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt"):
        if (directory / file).exists():
            config = read_tokenizer_config(directory)
            break
    if (directory / "tokenizer.json").exists():
        tokenizer = tokenizer_from_json(directory / "tokenizer.json", name, config)
    elif (directory / "tokenizer.model").exists():
        tokenizer = tokenizer_from_sentencepiece(directory / "tokenizer.model", name, config)
    elif (directory / "vocab.json").exists() and (directory / "merges.txt").exists():
        tokenizer = tokenizer_from_vocab_merges(directory / "vocab.json", directory / "merges.txt", name, config)
    elif (directory / "vocab.txt").exists():
        tokenizer = tokenizer_from_wordpiece(directory / "vocab.txt", name, config)
    else:
        return None
    mask = token_text((config or {}).get("mask_token"))
    for text in ([mask] if mask else []) + ["[MASK]", "<mask>"]:
        if tokenizer.mask_id is None and tokenizer.backend.token_to_id(text) is not None:
            tokenizer.mask_id = tokenizer.backend.token_to_id(text)
    eos = token_text((config or {}).get("eos_token")) or ("<|endoftext|>" if tokenizer.style == "byte-level" else None)
    tokenizer.eos_id = tokenizer.backend.token_to_id(eos) if eos else None
    return tokenizer


def tokenizer_for_checkpoint(directory: Path, model_vocab_size: int,
                             eos_token_id: Any = None) -> tuple[Tokenizer, list[str]]:
    """The checkpoint's own tokenizer, or the token-id stand-in and a note saying why.

    A tokenizer whose vocabulary is larger than the model's is an error (the ids would not fit
    the embedding).
    """
    directory = Path(directory)
    name = f"{directory.name} tokenizer"
    reason = ""
    tokenizer: HFTokenizer | None = None
    try:
        tokenizer = read_directory_tokenizer(directory, name)
        if tokenizer is None:
            reason = "there are no tokenizer files (tokenizer.json, tokenizer.model, vocab.json + merges.txt, vocab.txt)"
    except TokenizerError as exc:
        reason = f"its tokenizer files cannot be used: {exc}"
    eos = eos_token_id[0] if isinstance(eos_token_id, list) and eos_token_id else eos_token_id
    eos = eos if isinstance(eos, int) and not isinstance(eos, bool) and 0 <= eos < model_vocab_size else None
    if tokenizer is not None:
        if tokenizer.vocab_size > model_vocab_size:
            raise TokenizerError(f"the tokenizer in {directory} has {tokenizer.vocab_size} tokens but the model "
                                 f"only {model_vocab_size}")
        if eos is not None:
            tokenizer.eos_id = eos
        return tokenizer, []
    note = (f"No tokenizer: {reason}. Supported: {SUPPORTED}. The model runs on token ids: "
            f"type the prompt as ids separated by spaces; tokens are shown as [id].")
    return TokenIdTokenizer(model_vocab_size, f"This checkpoint has no supported tokenizer ({reason})", eos), [note]
