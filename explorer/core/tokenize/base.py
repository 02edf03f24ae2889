"""Tokenizers: text <-> token ids, and an honest display string for each token.

Byte-level BPE vocabularies (GPT-2's, the built-in models') run through tiktoken. Small
vocabularies of whole words or characters (the worked example; nanoGPT's character models)
use ``VocabTokenizer``. Both answer the same few questions the rest of the code asks.

GPT-2's BPE is read from local files only: the checkpoint's own ``vocab.json`` (the same format
as GPT-2's ``encoder.json``), or, when a checkpoint has none, ``resources/gpt2.tiktoken``, shipped
inside the package: GPT-2's byte-level merge ranks (MIT-licensed data) in tiktoken's own format,
byte-identical to OpenAI's published ``r50k_base.tiktoken`` and checked against its SHA-256 by
tiktoken's own loader.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from abc import ABC, abstractmethod
from functools import lru_cache
from pathlib import Path
from typing import Any

import tiktoken

from explorer.core.tokenize.bpe import ENDOFTEXT, GPT2_PATTERN, load_ranks
from explorer.core.display.tokens import bytes_display  # noqa: F401 (the one rule, re-exported)
from explorer.core.errors import TokenizerError
from explorer.core.text import capped_token

from explorer.core.paths import resources_dir

# SHA-256 of GPT-2's ranks in tiktoken's format: the hash tiktoken itself expects of r50k_base.tiktoken
GPT2_TIKTOKEN_SHA256 = "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"
GPT2_TIKTOKEN_FILE = "gpt2.tiktoken"
_TIKTOKEN_ENV_LOCK = threading.Lock()


class Tokenizer(ABC):
    """What the explorer needs of a vocabulary."""

    name: str
    eos_id: int | None = None

    @property
    @abstractmethod
    def vocab_size(self) -> int: ...

    @abstractmethod
    def encode(self, text: str) -> list[int]: ...

    @abstractmethod
    def decode(self, ids: list[int]) -> str: ...

    @abstractmethod
    def token_bytes(self, token_id: int) -> bytes: ...

    @abstractmethod
    def describe(self) -> dict[str, Any]:
        """A JSON-able description from which ``tokenizer_from_description`` rebuilds it."""

    @property
    def special_ids(self) -> frozenset[int]:
        """Ids drawn as special tokens (end of text; a tokenizer.json's special added tokens)."""
        return frozenset({self.eos_id}) if self.eos_id is not None else frozenset()

    def display(self, token_id: int) -> str:
        """The token as the user should see it: its text, or its bytes where they are not whole characters
        (a token over ``TOKEN_LIMIT`` characters, from a hostile vocabulary, cut with a note)."""
        return capped_token(bytes_display(self.token_bytes(token_id)))

    def displays(self, ids: list[int]) -> list[str]:
        return [self.display(i) for i in ids]


class TiktokenTokenizer(Tokenizer):
    def __init__(self, encoding: tiktoken.Encoding, description: dict[str, Any]) -> None:
        self.encoding = encoding
        self.name = encoding.name
        self._description = description
        self.eos_id = encoding._special_tokens.get(ENDOFTEXT)

    @property
    def vocab_size(self) -> int:
        return self.encoding.n_vocab

    def encode(self, text: str) -> list[int]:
        return self.encoding.encode(text, allowed_special="all")

    def decode(self, ids: list[int]) -> str:
        return self.encoding.decode(list(ids))

    def token_bytes(self, token_id: int) -> bytes:
        try:
            return self.encoding.decode_single_token_bytes(int(token_id))
        except KeyError:
            raise TokenizerError(f"token id {token_id} is not in the {self.name} vocabulary") from None

    def describe(self) -> dict[str, Any]:
        return dict(self._description)


class VocabTokenizer(Tokenizer):
    """A fixed list of tokens: whole words separated by whitespace, or single characters."""

    def __init__(self, tokens: list[str], split: str = "words", name: str = "vocab") -> None:
        if split not in ("words", "chars"):
            raise TokenizerError(f"vocabulary split must be 'words' or 'chars' (got {split!r})")
        if len(set(tokens)) != len(tokens):
            raise TokenizerError("the vocabulary lists a token twice")
        self.tokens, self.split, self.name = list(tokens), split, name
        self._ids = {t: i for i, t in enumerate(self.tokens)}

    @property
    def vocab_size(self) -> int:
        return len(self.tokens)

    def encode(self, text: str) -> list[int]:
        pieces = text.split() if self.split == "words" else list(text)
        unknown = [p for p in pieces if p not in self._ids]
        if unknown:
            shown = ", ".join(repr(u) for u in list(dict.fromkeys(unknown))[:5])
            known = ", ".join(repr(t) for t in self.tokens[:12]) + (" ..." if len(self.tokens) > 12 else "")
            raise TokenizerError(f"not in this model's vocabulary: {shown}. It knows: {known}")
        return [self._ids[p] for p in pieces]

    def decode(self, ids: list[int]) -> str:
        return (" " if self.split == "words" else "").join(self.tokens[i] for i in ids)

    def token_bytes(self, token_id: int) -> bytes:
        return self.tokens[token_id].encode("utf-8")

    def describe(self) -> dict[str, Any]:
        return {"type": "vocab", "split": self.split, "tokens": self.tokens, "name": self.name}


# --- GPT-2 style files -----------------------------------------------------------------------

@lru_cache(maxsize=1)
def _unicode_to_byte() -> dict[str, int]:
    """GPT-2's files write each byte as a printable character; this maps those characters back."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    chars = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + extra)
            extra += 1
    return {c: b for b, c in chars.items()}


def ranks_from_encoder_json(encoder: dict[str, int]) -> tuple[dict[bytes, int], dict[str, int]]:
    """Split a GPT-2 ``encoder.json``/``vocab.json`` mapping into byte-level ranks and special tokens."""
    u2b = _unicode_to_byte()
    ranks: dict[bytes, int] = {}
    specials: dict[str, int] = {}
    for text, idx in encoder.items():
        if text.startswith("<|") and text.endswith("|>"):
            specials[text] = idx
            continue
        try:
            ranks[bytes(u2b[c] for c in text)] = idx
        except KeyError:
            raise TokenizerError(f"vocabulary entry {text!r} is not a byte-level BPE token") from None
    if sorted(ranks.values()) != list(range(len(ranks))):
        raise TokenizerError("the byte-level vocabulary's ids are not 0..N-1 without gaps; "
                             "tiktoken cannot express it")
    return ranks, specials


def gpt2_style_tokenizer(encoder_json: Path, name: str = "gpt2", expected_sha256: str | None = None) -> TiktokenTokenizer:
    """A byte-level BPE from a local GPT-2-format ``encoder.json``/``vocab.json``.

    For GPT-2 the token ids are the merge ranks, so the ranks alone define the encoding.
    """
    try:
        raw = Path(encoder_json).read_bytes()
    except OSError as exc:
        raise TokenizerError(f"cannot read {encoder_json}: {exc.strerror}") from None
    if expected_sha256 and hashlib.sha256(raw).hexdigest() != expected_sha256:
        raise TokenizerError(f"{encoder_json} does not match GPT-2's published vocabulary (hash differs)")
    try:
        encoder = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise TokenizerError(f"{encoder_json} is not valid JSON: {exc}") from None
    ranks, specials = ranks_from_encoder_json(encoder)
    encoding = tiktoken.Encoding(name=name, pat_str=GPT2_PATTERN, mergeable_ranks=ranks, special_tokens=specials)
    return TiktokenTokenizer(encoding, {"type": "gpt2"} if name == "gpt2" else
                             {"type": "gpt2-files", "name": name})


def gpt2_tiktoken_path() -> Path:
    """GPT-2's merge ranks in tiktoken's format, shipped inside the package (``resources/``)."""
    return resources_dir() / GPT2_TIKTOKEN_FILE


def load_gpt2_ranks() -> dict[bytes, int]:
    """GPT-2's 50256 byte-level ranks, hash-checked, parsed by tiktoken's own loader.

    The hash is checked here: tiktoken's loader checks it only on the way into its download cache,
    and would keep a copy of the file there. An empty ``TIKTOKEN_CACHE_DIR`` turns that copy off
    for this one read, so nothing is written anywhere.
    """
    path = gpt2_tiktoken_path()
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TokenizerError(f"GPT-2's vocabulary file is missing from the installation ({path}: {exc.strerror})") from None
    if hashlib.sha256(data).hexdigest() != GPT2_TIKTOKEN_SHA256:
        raise TokenizerError(f"{path} does not match GPT-2's published vocabulary (hash differs)")
    from tiktoken.load import load_tiktoken_bpe

    with _TIKTOKEN_ENV_LOCK:
        saved = os.environ.get("TIKTOKEN_CACHE_DIR")
        os.environ["TIKTOKEN_CACHE_DIR"] = ""
        try:
            return load_tiktoken_bpe(str(path))
        finally:
            if saved is None:
                os.environ.pop("TIKTOKEN_CACHE_DIR", None)
            else:
                os.environ["TIKTOKEN_CACHE_DIR"] = saved


@lru_cache(maxsize=1)
def gpt2_tokenizer() -> TiktokenTokenizer:
    """GPT-2's own BPE (50257 tokens), offline, from the file shipped with the package, hash-checked."""
    encoding = tiktoken.Encoding(name="gpt2", pat_str=GPT2_PATTERN, mergeable_ranks=load_gpt2_ranks(),
                                 special_tokens={ENDOFTEXT: 50256})
    return TiktokenTokenizer(encoding, {"type": "gpt2"})


def tokenizer_from_description(desc: dict[str, Any], directory: Path | None = None) -> Tokenizer:
    """Rebuild a tokenizer from the ``tokenizer`` section of a native checkpoint's config."""
    kind = desc.get("type")
    if kind == "gpt2":
        return gpt2_tokenizer()
    if kind == "vocab":
        return VocabTokenizer(list(desc["tokens"]), desc.get("split", "words"), desc.get("name", "vocab"))
    if kind == "tiktoken":
        if directory is None:
            raise TokenizerError("a tiktoken vocabulary needs the checkpoint directory")
        try:
            ranks = load_ranks(directory / desc.get("ranks_file", "tokenizer.tiktoken"))
        except (OSError, ValueError) as exc:
            raise TokenizerError(f"cannot read the BPE vocabulary: {exc}") from None
        specials = {k: int(v) for k, v in desc.get("special_tokens", {}).items()}
        encoding = tiktoken.Encoding(name=desc.get("name", "bpe"), pat_str=desc.get("pattern", GPT2_PATTERN),
                                     mergeable_ranks=ranks, special_tokens=specials)
        return TiktokenTokenizer(encoding, desc)
    raise TokenizerError(f"unknown tokenizer type {kind!r}; supported: gpt2, tiktoken, vocab, hf-tokenizer-json")
