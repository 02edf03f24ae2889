"""``HFTokenizer``: a ``tokenizers.Tokenizer`` as the explorer's ``Tokenizer``, and what transformers
does on top of one with ``tokenizer_config.json`` (``apply_config``).

``encode`` is ``tokenizer(text)["input_ids"]`` of transformers. ``token_bytes`` is honest about what a
token stands for: a byte-level token is its bytes, a SentencePiece ``▁`` a space and a ``<0xNN>`` piece
the byte NN (so a split character shows as partial UTF-8), a WordPiece token its vocabulary text
(``##ing``). Every call into the Rust library goes through ``guarded``: its errors, and its panics
(which Python sees as BaseException), become one ``TokenizerError`` line.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from explorer.core.errors import TokenizerError
from explorer.core.tokenize.base import Tokenizer, _unicode_to_byte

SPECIAL_KEYS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
STYLES = ("byte-level", "sentencepiece", "wordpiece", "plain")
_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def _backend_error(exc: BaseException, what: str) -> TokenizerError:
    line = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
    return TokenizerError(f"{what}: {line}")


def guarded(call: Any, what: str) -> Any:
    """Run a ``tokenizers`` call; its errors (and Rust panics, which are BaseExceptions) become TokenizerError."""
    try:
        return call()
    except (KeyboardInterrupt, SystemExit, MemoryError):
        raise
    except TokenizerError:
        raise
    except BaseException as exc:  # noqa: BLE001 - pyo3's PanicException derives from BaseException
        raise _backend_error(exc, what) from None


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

    @property
    def added_ids(self) -> frozenset[int]:
        """Ids of the added tokens (special or not: ``<|im_end|>``, ``<think>``), matched whole before the model."""
        return frozenset(self._added)

    def encode(self, text: str) -> list[int]:
        if not isinstance(text, str):
            raise TokenizerError(f"a prompt is text, not {type(text).__name__}")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise TokenizerError("the text contains a lone surrogate (half of a UTF-16 pair), which is not a "
                                 "character and cannot be tokenized") from None
        return list(guarded(lambda: self.backend.encode(text, add_special_tokens=True).ids,
                             f"{self.name} cannot encode this text"))

    def encode_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """Ids and character offsets of ``text`` without the special tokens the pipeline adds (what transformers'
        ``apply_chat_template`` encodes a rendered conversation with: ``add_special_tokens=False``)."""
        if not isinstance(text, str):
            raise TokenizerError(f"a prompt is text, not {type(text).__name__}")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise TokenizerError("the text contains a lone surrogate, which cannot be tokenized") from None
        done = guarded(lambda: self.backend.encode(text, add_special_tokens=False), f"{self.name} cannot encode this text")
        return list(done.ids), [(int(a), int(b)) for a, b in done.offsets]

    def decode(self, ids: list[int]) -> str:
        ids = [int(i) for i in ids]
        return guarded(lambda: self.backend.decode(ids, skip_special_tokens=False), f"{self.name} cannot decode")

    def token_bytes(self, token_id: int) -> bytes:
        token_id = int(token_id)
        if token_id not in self._bytes:
            self._bytes[token_id] = self._compute_bytes(token_id)
        return self._bytes[token_id]

    def _compute_bytes(self, token_id: int) -> bytes:
        if not 0 <= token_id < 2**32:
            raise TokenizerError(f"token id {token_id} is not in the {self.name} vocabulary")
        token = self.backend.id_to_token(token_id)
        if token is None:  # a row of a padded embedding (Pythia, Qwen) that no text maps to: shown as its id
            return f"[{token_id}]".encode()
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


def token_text(value: Any) -> str | None:
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
        content = token_text(spec)
        if content is None or content in present:
            continue
        flags = {k: bool(spec.get(k, d)) for k, d in (("lstrip", False), ("rstrip", False), ("normalized", True),
                                                       ("single_word", False), ("special", False))}
        new.append(AddedToken(content, **flags))
        present.add(content)
    extra = config.get("additional_special_tokens") or config.get("extra_special_tokens") or []
    extra = list(extra.values()) if isinstance(extra, dict) else extra if isinstance(extra, list) else []
    for value in [config.get(k) for k in SPECIAL_KEYS] + extra:
        content = token_text(value)
        if content is not None and content not in present:
            new.append(AddedToken(content, special=True, normalized=False))
            present.add(content)
    if new:
        guarded(lambda: backend.add_tokens(new), "tokenizer_config.json's added tokens cannot be added")
    explicit = "add_bos_token" in config or "add_eos_token" in config
    if not explicit and backend.post_processor is not None:
        return
    single, specials = "$A:0", []
    for key, flag, before in (("bos_token", "add_bos_token", True), ("eos_token", "add_eos_token", False)):
        content = token_text(config.get(key))
        token_id = backend.token_to_id(content) if content is not None else None
        if config.get(flag) is True and token_id is not None:
            single = f"{content}:0 {single}" if before else f"{single} {content}:0"
            specials.append((content, token_id))
    pair = single.replace("$A:0", "$A:0 $B:1") if specials else "$A:0 $B:1"
    backend.post_processor = guarded(lambda: processors.TemplateProcessing(single=single, pair=pair,
                                                                            special_tokens=specials),
                                      "tokenizer_config.json's bos/eos tokens cannot be used")
