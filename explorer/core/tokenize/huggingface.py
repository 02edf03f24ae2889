"""Tokenizers found next to a Hugging Face checkpoint, read from local files only.

Supported: a ``tokenizer.json`` whose model is a **byte-level BPE** (GPT-2, Pythia/GPT-NeoX,
SmolLM, Llama-3 style), or a GPT-2-format ``vocab.json`` + ``merges.txt`` pair. It becomes a
tiktoken ``Encoding``: tiktoken's token ids are its merge ranks, so the checkpoint's ids must grow
in the order of its merges (they do for tokenizers trained by BPE; a file where they do not is
refused with the reason). What runs around the BPE is reproduced in Python, as ``tokenizers`` does
it: added/special tokens are cut out first (leftmost-longest), the normalizer (none or NFC), the
pre-tokenizer stages (``Split`` with a regex, ``Digits``, and ``ByteLevel``, whose regex tiktoken
runs), and a ``TemplateProcessing`` post-processor's special tokens (Llama-3's
``<|begin_of_text|>``) are added like ``tokenizer(text)`` adds them.

Not supported: SentencePiece-style tokenizers (Llama-2, Mistral, TinyLlama: ``tokenizer.model``,
or a ``tokenizer.json`` with ``Metaspace``/``byte_fallback``), Unigram and WordPiece models. For
those, ``tokenizer_for_checkpoint`` returns a ``TokenIdTokenizer`` with a note saying why: the model
still loads and runs, and a prompt is typed as token ids.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tiktoken

try:  # tiktoken depends on `regex`; \p{L} needs it
    import regex as re
except ImportError:  # pragma: no cover
    import re  # type: ignore[no-redef]

from explorer.core.tokenize.bpe import GPT2_PATTERN
from explorer.core.errors import TokenizerError
from explorer.core.tokenize.base import TiktokenTokenizer, Tokenizer, _unicode_to_byte

SUPPORTED = ("tokenizer.json with a byte-level BPE model (GPT-2, Pythia/GPT-NeoX, SmolLM, Llama-3 style), "
             "or GPT-2-format vocab.json + merges.txt")
_WHOLE = r"[\s\S]+"  # a tiktoken pattern that leaves a piece whole


class UnsupportedTokenizer(TokenizerError):
    """The files are readable but describe a tokenizer this module does not reproduce exactly."""


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


# --- byte-level BPE from tokenizer.json ---------------------------------------------------------

class ByteLevelBPETokenizer(TiktokenTokenizer):
    """A ``tokenizers`` byte-level BPE run as tiktoken, with its added tokens, normalizer and pre-tokenizer."""

    def __init__(self, encoding: tiktoken.Encoding, description: dict[str, Any], *,
                 added: list[dict[str, Any]], nfc: bool, stages: list[Callable[[str], list[str]]],
                 prefix_space: bool, prefix_ids: list[int], suffix_ids: list[int]) -> None:
        super().__init__(encoding, description)
        self._nfc, self._stages, self._prefix_space = nfc, stages, prefix_space
        self.prefix_ids, self.suffix_ids = list(prefix_ids), list(suffix_ids)
        self._raw_added = _added_matcher([a for a in added if not a.get("normalized", False)])
        self._norm_added = _added_matcher([a for a in added if a.get("normalized", False)])

    def encode(self, text: str) -> list[int]:
        """Like ``tokenizers``' ``encode(text)`` with its default ``add_special_tokens=True``."""
        ids: list[int] = []
        for piece, special in _split_added(text, self._raw_added):
            if special is not None:
                ids.append(special)
                continue
            if self._nfc:
                piece = unicodedata.normalize("NFC", piece)
            for sub, special2 in _split_added(piece, self._norm_added):
                if special2 is not None:
                    ids.append(special2)
                else:
                    ids.extend(self.encode_plain(sub))
        return self.prefix_ids + ids + self.suffix_ids

    def encode_plain(self, text: str) -> list[int]:
        """Pre-tokenizer stages, then byte-level BPE; no added tokens, normalizer or template."""
        pieces = [text] if text else []
        for stage in self._stages:
            pieces = [p for piece in pieces for p in stage(piece)]
        out: list[int] = []
        for piece in pieces:
            if self._prefix_space and not piece.startswith(" "):
                piece = " " + piece
            out.extend(self.encoding.encode_ordinary(piece))
        return out


def _added_matcher(added: list[dict[str, Any]]) -> tuple[Any, dict[str, int]] | None:
    """One regex over the added tokens, longest first (``tokenizers`` matches leftmost-longest)."""
    if not added:
        return None
    parts = []
    for a in sorted(added, key=lambda a: -len(a["content"])):
        part = "(" + re.escape(a["content"]) + ")"
        if a.get("lstrip"):
            part = r"\s*" + part
        if a.get("rstrip"):
            part = part + r"\s*"
        parts.append(part)
    ids = {a["content"]: int(a["id"]) for a in added}
    return re.compile("|".join(parts)), ids


def _split_added(text: str, matcher: tuple[Any, dict[str, int]] | None) -> list[tuple[str, int | None]]:
    if matcher is None:
        return [(text, None)] if text else []
    pattern, ids = matcher
    out: list[tuple[str, int | None]] = []
    pos = 0
    for m in pattern.finditer(text):
        if m.start() > pos:
            out.append((text[pos:m.start()], None))
        content = next(g for g in m.groups() if g is not None)
        out.append((content, ids[content]))
        pos = m.end()
    if pos < len(text):
        out.append((text[pos:], None))
    return out


def _isolated_split(pattern: Any) -> Callable[[str], list[str]]:
    """``Split(behavior="Isolated")``: every match is a piece, and so is every stretch between matches."""
    def split(text: str) -> list[str]:
        out, pos = [], 0
        for m in pattern.finditer(text):
            if m.start() == m.end():
                continue
            if m.start() > pos:
                out.append(text[pos:m.start()])
            out.append(m.group(0))
            pos = m.end()
        if pos < len(text):
            out.append(text[pos:])
        return out
    return split


def _flatten(node: dict[str, Any] | None, key: str) -> list[dict[str, Any]]:
    if node is None:
        return []
    if node.get("type") == "Sequence":
        return [s for child in node.get(key, []) for s in _flatten(child, key)]
    return [node]


def _sentencepiece_style(data: dict[str, Any]) -> bool:
    nodes = (_flatten(data.get("pre_tokenizer"), "pretokenizers") + _flatten(data.get("decoder"), "decoders")
             + _flatten(data.get("normalizer"), "normalizers"))
    if any(n.get("type") in ("Metaspace", "ByteFallback", "Prepend") for n in nodes):
        return True
    return bool((data.get("model") or {}).get("byte_fallback"))


def _stages(pre: dict[str, Any] | None) -> tuple[list[Callable[[str], list[str]]], str, bool]:
    """Python stages before the last regex, the regex tiktoken runs, and ByteLevel's add_prefix_space."""
    nodes = _flatten(pre, "pretokenizers")
    if not nodes or nodes[-1].get("type") != "ByteLevel" or any(n.get("type") == "ByteLevel" for n in nodes[:-1]):
        raise UnsupportedTokenizer("its pre-tokenizer does not end in ByteLevel, so it is not a byte-level BPE")
    byte_level = nodes[-1]
    prefix_space = bool(byte_level.get("add_prefix_space", False))
    stages: list[Callable[[str], list[str]]] = []
    regexes: list[str | None] = []  # per stage: its regex if it is an Isolated regex split
    for node in nodes[:-1]:
        kind = node.get("type")
        if kind == "Split":
            pattern = node.get("pattern") or {}
            if node.get("invert") or node.get("behavior", "Isolated") != "Isolated":
                raise UnsupportedTokenizer("its Split pre-tokenizer is not an 'Isolated', non-inverted split")
            if "Regex" in pattern:
                source = pattern["Regex"]
            elif "String" in pattern:
                source = re.escape(pattern["String"])
            else:
                raise UnsupportedTokenizer("its Split pre-tokenizer has no pattern")
            try:
                stages.append(_isolated_split(re.compile(source)))
            except re.error as exc:
                raise UnsupportedTokenizer(f"its Split regex does not compile here ({exc})") from None
            regexes.append(source)
        elif kind == "Digits":
            stages.append(_isolated_split(re.compile(r"\p{N}" if node.get("individual_digits") else r"\p{N}+")))
            regexes.append(None)
        else:
            raise UnsupportedTokenizer(f"its pre-tokenizer {kind!r} is not supported (Split, Digits, ByteLevel are)")
    if byte_level.get("use_regex", True):
        return stages, GPT2_PATTERN, prefix_space
    if stages and regexes[-1] is not None and not prefix_space:
        # the last Split's regex can run inside tiktoken; the regexes used by byte-level BPEs cover
        # every character, so tiktoken (which keeps matches only) and Isolated (which also keeps
        # the stretches between them) cut the same pieces.
        return stages[:-1], regexes[-1], prefix_space
    return stages, _WHOLE, prefix_space


def _post_processor_ids(node: dict[str, Any] | None) -> tuple[list[int], list[int]]:
    prefix: list[int] = []
    suffix: list[int] = []
    for proc in _flatten(node, "processors"):
        kind = proc.get("type")
        if kind == "ByteLevel":
            continue
        if kind != "TemplateProcessing":
            raise UnsupportedTokenizer(f"its post-processor {kind!r} is not supported")
        specials = proc.get("special_tokens", {})
        seen_sequence = False
        for item in proc.get("single", []):
            if "Sequence" in item:
                seen_sequence = True
            elif "SpecialToken" in item:
                name = item["SpecialToken"]["id"]
                if name not in specials:
                    raise UnsupportedTokenizer(f"its template names an unknown special token {name!r}")
                (suffix if seen_sequence else prefix).extend(int(i) for i in specials[name]["ids"])
    return prefix, suffix


def _merge_pairs(merges: list[Any]) -> list[tuple[str, str]]:
    pairs = []
    for m in merges:
        if isinstance(m, str):
            parts = m.split(" ")
            if len(parts) != 2:
                raise UnsupportedTokenizer(f"merge {m!r} is not two tokens separated by a space")
            pairs.append((parts[0], parts[1]))
        elif isinstance(m, list) and len(m) == 2 and all(isinstance(x, str) for x in m):
            pairs.append((m[0], m[1]))
        else:
            raise UnsupportedTokenizer(f"merge {m!r} is neither 'a b' nor [a, b]")
    return pairs


def build_byte_level(vocab: dict[str, int], merges: list[tuple[str, str]],
                     added: list[dict[str, Any]]) -> tuple[dict[bytes, int], dict[str, int]]:
    """Byte-level vocabulary + merges -> tiktoken's mergeable ranks and special tokens, checked for exactness.

    tiktoken merges the adjacent pair whose joined bytes have the lowest rank and outputs ranks as
    ids, so the ids of merge results must rise in merge order.
    """
    u2b = _unicode_to_byte()
    added_contents = {a["content"] for a in added}
    ranks: dict[bytes, int] = {}
    for text, idx in vocab.items():
        if text in added_contents:
            continue
        try:
            ranks[bytes(u2b[c] for c in text)] = int(idx)
        except KeyError:
            raise UnsupportedTokenizer(f"vocabulary entry {text!r} is not written in byte-level characters") from None
    missing = [b for b in range(256) if bytes([b]) not in ranks]
    if missing:
        raise UnsupportedTokenizer(f"{len(missing)} of the 256 single bytes have no token (byte {missing[0]} first)")
    last, last_merge = -1, ""
    done: set[str] = set()
    for a, b in merges:
        joined = a + b
        if joined not in vocab:
            raise UnsupportedTokenizer(f"merge {a!r} + {b!r} makes {joined!r}, which is not in the vocabulary")
        if joined in done:  # a second pair making the same token: tiktoken ranks it by the first
            continue
        done.add(joined)
        idx = int(vocab[joined])
        if idx <= last:
            raise UnsupportedTokenizer(
                f"token ids do not follow the merge order ({joined!r} has id {idx} but is merged after "
                f"{last_merge!r} with id {last}); tiktoken needs ids equal to merge ranks")
        last, last_merge = idx, joined
    if len(set(ranks.values())) != len(ranks):
        raise UnsupportedTokenizer("two vocabulary entries share one id")
    specials = {a["content"]: int(a["id"]) for a in added}
    clash = set(specials.values()) & set(ranks.values())
    if clash:
        raise UnsupportedTokenizer(f"added token id {min(clash)} is also a vocabulary token's id")
    return ranks, specials


def tokenizer_from_json(path: Path, name: str | None = None) -> ByteLevelBPETokenizer:
    """A byte-level BPE ``tokenizer.json`` as a tiktoken-backed tokenizer; ``UnsupportedTokenizer`` otherwise."""
    path = Path(path)
    name = name or f"{path.parent.name} BPE"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TokenizerError(f"{path} is not readable JSON: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("model"), dict):
        raise TokenizerError(f"{path} has no tokenizer model")
    model = data["model"]
    if _sentencepiece_style(data):
        raise UnsupportedTokenizer("it is a SentencePiece-style tokenizer (Metaspace / byte fallback, as in "
                                   "Llama-2 and Mistral), which is not supported")
    if model.get("type", "BPE") != "BPE":
        raise UnsupportedTokenizer(f"its model is {model.get('type')!r}, not a byte-level BPE")
    if model.get("continuing_subword_prefix") or model.get("end_of_word_suffix") or model.get("dropout"):
        raise UnsupportedTokenizer("its BPE uses subword prefixes/suffixes or dropout")
    normalizers = _flatten(data.get("normalizer"), "normalizers")
    if any(n.get("type") != "NFC" for n in normalizers):
        kinds = ", ".join(str(n.get("type")) for n in normalizers)
        raise UnsupportedTokenizer(f"its normalizer ({kinds}) is not supported (none or NFC are)")
    stages, pattern, prefix_space = _stages(data.get("pre_tokenizer"))
    prefix_ids, suffix_ids = _post_processor_ids(data.get("post_processor"))
    added = [a for a in data.get("added_tokens") or [] if isinstance(a, dict) and "content" in a and "id" in a]
    vocab = model.get("vocab")
    if not isinstance(vocab, dict):
        raise TokenizerError(f"{path} has no vocabulary")
    ranks, specials = build_byte_level(vocab, _merge_pairs(model.get("merges") or []), added)
    encoding = tiktoken.Encoding(name=name, pat_str=pattern, mergeable_ranks=ranks, special_tokens=specials)
    contents = [a["content"] for a in added]
    plain_tiktoken = not (stages or normalizers or prefix_space or prefix_ids or suffix_ids) and not any(
        a.get("lstrip") or a.get("rstrip") for a in added) and not any(
        x != y and y.startswith(x) for x in contents for y in contents)
    # a plain tiktoken encoding is saved as one by save_native; anything more is described, not rebuilt
    description = {"type": "tiktoken", "name": name} if plain_tiktoken else \
        {"type": "hf-tokenizer-json", "name": name, "file": path.name}
    return ByteLevelBPETokenizer(encoding, description,
                                 added=added, nfc=bool(normalizers), stages=stages, prefix_space=prefix_space,
                                 prefix_ids=prefix_ids, suffix_ids=suffix_ids)


def tokenizer_from_vocab_merges(vocab_json: Path, merges_txt: Path, name: str) -> ByteLevelBPETokenizer:
    """GPT-2-format ``vocab.json`` + ``merges.txt`` (GPT-2's pre-tokenizer; ``<|...|>`` entries are special)."""
    try:
        vocab = json.loads(Path(vocab_json).read_text(encoding="utf-8"))
        lines = Path(merges_txt).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TokenizerError(f"cannot read {vocab_json.name} / {merges_txt.name}: {exc}") from None
    if not isinstance(vocab, dict):
        raise TokenizerError(f"{vocab_json} should hold a JSON object")
    merges = _merge_pairs([line for line in lines if line and not line.startswith("#version")])
    added = [{"content": t, "id": i} for t, i in vocab.items() if t.startswith("<|") and t.endswith("|>")]
    ranks, specials = build_byte_level(vocab, merges, added)
    encoding = tiktoken.Encoding(name=name, pat_str=GPT2_PATTERN, mergeable_ranks=ranks, special_tokens=specials)
    return ByteLevelBPETokenizer(encoding, {"type": "hf-vocab-merges", "name": name}, added=added, nfc=False,
                                 stages=[], prefix_space=False, prefix_ids=[], suffix_ids=[])


def tokenizer_for_checkpoint(directory: Path, model_vocab_size: int,
                             eos_token_id: Any = None) -> tuple[Tokenizer, list[str]]:
    """The checkpoint's own tokenizer, or the token-id stand-in and a note saying why.

    Files tried: ``tokenizer.json``, then ``vocab.json`` + ``merges.txt``. A tokenizer whose
    vocabulary is larger than the model's is an error (the ids would not fit the embedding).
    """
    directory = Path(directory)
    name = f"{directory.name} BPE"
    reason = ""
    tokenizer: Tokenizer | None = None
    try:
        if (directory / "tokenizer.json").is_file():
            tokenizer = tokenizer_from_json(directory / "tokenizer.json", name)
        elif (directory / "vocab.json").is_file() and (directory / "merges.txt").is_file():
            tokenizer = tokenizer_from_vocab_merges(directory / "vocab.json", directory / "merges.txt", name)
        elif (directory / "tokenizer.model").is_file():
            reason = ("its tokenizer is a SentencePiece tokenizer.model (Llama-2 / Mistral style), "
                      "which is not supported")
        else:
            reason = "there are no tokenizer files (tokenizer.json, or vocab.json + merges.txt)"
    except TokenizerError as exc:
        file = "tokenizer.json" if (directory / "tokenizer.json").is_file() else "vocab.json/merges.txt"
        reason = f"its {file} cannot be used: {exc}"
    eos = eos_token_id[0] if isinstance(eos_token_id, list) and eos_token_id else eos_token_id
    eos = eos if isinstance(eos, int) and 0 <= eos < model_vocab_size else None
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
