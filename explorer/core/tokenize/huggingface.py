"""Tokenizers found next to a Hugging Face checkpoint, read from local files with the ``tokenizers`` library.

The ids are the ones ``transformers.AutoTokenizer.from_pretrained(directory)(text)["input_ids"]``
gives, because the same Rust library runs the same pipeline:

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

Display strings stay honest (``token_bytes``): a byte-level token is its bytes, a SentencePiece
``▁`` is a space and a ``<0xNN>`` piece the byte NN (so a split character shows as partial UTF-8),
a WordPiece token is written as in its vocabulary (``##ing``).

When nothing can be read, ``tokenizer_for_checkpoint`` returns a ``TokenIdTokenizer`` with a note
saying why: the model still loads and runs, and a prompt is typed as token ids.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from explorer.core.errors import TokenizerError
from explorer.core.tokenize.base import Tokenizer, _unicode_to_byte
from explorer.core.tokenize.hf_files import (MAX_TOKENIZER_JSON, check_id, check_tokenizer_json, read_json,
                                             read_text)

SUPPORTED = ("tokenizer.json (any model the tokenizers library reads), a SentencePiece BPE tokenizer.model, "
             "GPT-2-format vocab.json + merges.txt, or a BERT WordPiece vocab.txt")
SPECIAL_KEYS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
STYLES = ("byte-level", "sentencepiece", "wordpiece", "plain")
_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def _backend_error(exc: BaseException, what: str) -> TokenizerError:
    line = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
    return TokenizerError(f"{what}: {line}")


def _guarded(call: Any, what: str) -> Any:
    """Run a ``tokenizers`` call; its errors (and Rust panics, which are BaseExceptions) become TokenizerError."""
    try:
        return call()
    except (KeyboardInterrupt, SystemExit, MemoryError):
        raise
    except TokenizerError:
        raise
    except BaseException as exc:  # noqa: BLE001 - pyo3's PanicException derives from BaseException
        raise _backend_error(exc, what) from None


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


# --- a tokenizers.Tokenizer -------------------------------------------------------------------

class HFTokenizer(Tokenizer):
    """A ``tokenizers.Tokenizer``: ``encode`` is ``tokenizer(text)["input_ids"]`` of transformers."""

    def __init__(self, backend: Any, name: str, style: str, description: dict[str, Any] | None = None) -> None:
        if style not in STYLES:
            raise TokenizerError(f"unknown token display style {style!r}")
        self.backend, self.name, self.style = backend, name, style
        self._description = description or {"type": "hf-tokenizer-json", "name": name, "file": "tokenizer.json",
                                             "style": style}
        added = backend.get_added_tokens_decoder()
        self._added = {int(i): t.content for i, t in added.items()}
        self._special = frozenset(int(i) for i, t in added.items() if t.special)
        self._size = max([backend.get_vocab_size(with_added_tokens=True) - 1, *self._added]) + 1
        self._bytes: dict[int, bytes] = {}
        self.mask_id: int | None = None  # an encoder's [MASK] token, whose position the MLM head fills in

    @property
    def vocab_size(self) -> int:
        return self._size

    @property
    def special_ids(self) -> frozenset[int]:
        return self._special | ({self.eos_id} if self.eos_id is not None else frozenset())

    def encode(self, text: str) -> list[int]:
        if not isinstance(text, str):
            raise TokenizerError(f"a prompt is text, not {type(text).__name__}")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise TokenizerError("the text contains a lone surrogate (half of a UTF-16 pair), which is not a "
                                 "character and cannot be tokenized") from None
        return list(_guarded(lambda: self.backend.encode(text, add_special_tokens=True).ids,
                             f"{self.name} cannot encode this text"))

    def decode(self, ids: list[int]) -> str:
        ids = [int(i) for i in ids]
        return _guarded(lambda: self.backend.decode(ids, skip_special_tokens=False), f"{self.name} cannot decode")

    def token_bytes(self, token_id: int) -> bytes:
        token_id = int(token_id)
        if token_id not in self._bytes:
            self._bytes[token_id] = self._compute_bytes(token_id)
        return self._bytes[token_id]

    def _compute_bytes(self, token_id: int) -> bytes:
        token = self.backend.id_to_token(token_id) if 0 <= token_id < 2**32 else None
        if token is None:
            raise TokenizerError(f"token id {token_id} is not in the {self.name} vocabulary")
        if token_id in self._added:
            return token.encode("utf-8")
        if self.style == "byte-level":
            u2b = _unicode_to_byte()
            if all(c in u2b for c in token):
                return bytes(u2b[c] for c in token)
        elif self.style == "sentencepiece":
            byte = _BYTE_PIECE.fullmatch(token)
            if byte:
                return bytes([int(byte.group(1), 16)])
            return token.replace("▁", " ").encode("utf-8")
        return token.encode("utf-8")

    def describe(self) -> dict[str, Any]:
        return {**self._description, "eos_id": self.eos_id, "mask_id": self.mask_id}

    def save(self, path: Path) -> None:
        """The whole pipeline as one ``tokenizer.json`` (what a native checkpoint keeps)."""
        self.backend.save(str(path))


def display_style(data: dict[str, Any]) -> str:
    """How a token of this tokenizer.json is shown: its bytes, SentencePiece pieces, or its text."""
    def kinds(node: Any, key: str) -> set[str]:
        if not isinstance(node, dict):
            return set()
        if node.get("type") == "Sequence":
            return set().union(*[kinds(c, key) for c in node.get(key, [])]) if node.get(key) else set()
        return {str(node.get("type"))}

    stages = (kinds(data.get("pre_tokenizer"), "pretokenizers") | kinds(data.get("decoder"), "decoders")
              | kinds(data.get("normalizer"), "normalizers"))
    model = data.get("model") or {}
    if "ByteLevel" in stages:
        return "byte-level"
    if stages & {"Metaspace", "ByteFallback", "Prepend"} or model.get("byte_fallback"):
        return "sentencepiece"
    if model.get("type") == "WordPiece":
        return "wordpiece"
    return "plain"


def tokenizer_from_json(path: Path, name: str | None = None, config: dict[str, Any] | None = None) -> HFTokenizer:
    """A checked ``tokenizer.json``, with ``tokenizer_config.json``'s special tokens and BOS/EOS applied."""
    from tokenizers import Tokenizer as Backend

    path = Path(path)
    name = name or f"{path.parent.name} tokenizer"
    data = read_json(path, MAX_TOKENIZER_JSON)
    check_tokenizer_json(data, path)
    raw = read_text(path, MAX_TOKENIZER_JSON)
    backend = _guarded(lambda: Backend.from_str(raw), f"{path} cannot be read by the tokenizers library")
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
    backend = _guarded(lambda: Backend(BPE(vocab=vocab, merges=merges, dropout=None, continuing_subword_prefix="",
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
        names[key] = _token_text(config.get(key)) or default
        config.setdefault(key, names[key])
    backend = _guarded(lambda: Backend(WordPiece(vocab, unk_token=names["unk_token"])),
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


def _token_text(value: Any) -> str | None:
    if isinstance(value, str):
        return value or None
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"] or None
    return None


def apply_config(backend: Any, config: dict[str, Any]) -> None:
    """What transformers does with ``tokenizer_config.json`` on top of the backend (see the module doc)."""
    from tokenizers import AddedToken, processors

    if not isinstance(config, dict):
        raise TokenizerError("tokenizer_config.json should hold a JSON object")
    present = {t.content for t in backend.get_added_tokens_decoder().values()}
    decoder = config.get("added_tokens_decoder") or {}
    if not isinstance(decoder, dict):
        raise TokenizerError("tokenizer_config.json: added_tokens_decoder should be an object")
    new: list[Any] = []
    for key, spec in sorted(decoder.items(), key=lambda kv: str(kv[0])):
        content = _token_text(spec)
        if content is None or content in present:
            continue
        flags = {k: bool(spec.get(k, d)) for k, d in (("lstrip", False), ("rstrip", False), ("normalized", True),
                                                       ("single_word", False), ("special", False))}
        new.append(AddedToken(content, **flags))
        present.add(content)
    extra = config.get("additional_special_tokens") or config.get("extra_special_tokens") or []
    extra = list(extra.values()) if isinstance(extra, dict) else extra if isinstance(extra, list) else []
    for value in [config.get(k) for k in SPECIAL_KEYS] + extra:
        content = _token_text(value)
        if content is not None and content not in present:
            new.append(AddedToken(content, special=True, normalized=False))
            present.add(content)
    if new:
        _guarded(lambda: backend.add_tokens(new), "tokenizer_config.json's added tokens cannot be added")
    explicit = "add_bos_token" in config or "add_eos_token" in config
    if not explicit and backend.post_processor is not None:
        return
    single, specials = "$A:0", []
    for key, flag, before in (("bos_token", "add_bos_token", True), ("eos_token", "add_eos_token", False)):
        content = _token_text(config.get(key))
        token_id = backend.token_to_id(content) if content is not None else None
        if config.get(flag) is True and token_id is not None:
            single = f"{content}:0 {single}" if before else f"{single} {content}:0"
            specials.append((content, token_id))
    pair = single.replace("$A:0", "$A:0 $B:1") if specials else "$A:0 $B:1"
    backend.post_processor = _guarded(lambda: processors.TemplateProcessing(single=single, pair=pair,
                                                                            special_tokens=specials),
                                      "tokenizer_config.json's bos/eos tokens cannot be used")


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
    mask = _token_text((config or {}).get("mask_token"))
    for text in ([mask] if mask else []) + ["[MASK]", "<mask>"]:
        if tokenizer.mask_id is None and tokenizer.backend.token_to_id(text) is not None:
            tokenizer.mask_id = tokenizer.backend.token_to_id(text)
    eos = _token_text((config or {}).get("eos_token")) or ("<|endoftext|>" if tokenizer.style == "byte-level" else None)
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
