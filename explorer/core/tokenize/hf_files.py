"""Reading a Hugging Face directory's tokenizer files as hostile input.

Every file is read from a regular file only (not a FIFO or a device) and under a size cap; a
``tokenizer.json`` is checked field by field before the ``tokenizers`` library sees it (token ids
and merge ranks are integers in range, every pipeline stage is a JSON object, added tokens have a
string content and an id), so a broken file is one ``TokenizerError`` line rather than a Rust panic
or a traceback.

Regular expressions are the one part of a tokenizer file that can hang: ``tokenizers`` runs a
``Split`` pre-tokenizer's (or a ``Replace`` normalizer's) regex with a backtracking engine, and a
pattern like ``(a+)+$`` takes exponential time on a long run of ``a``. The patterns of the known
families (GPT-2, Llama-3/cl100k, Qwen2, o200k) are accepted as they are; any other is first run,
in a separate process with a time limit, on adversarial strings, and refused if it does not finish.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

from explorer.core.errors import TokenizerError
from explorer.core.tokenize.bpe import GPT2_PATTERN

MAX_TOKENIZER_JSON = 128 * 2**20  # Gemma-3's tokenizer.json is 33 MB
MAX_SMALL_FILE = 64 * 2**20  # vocab.json, merges.txt, vocab.txt, tokenizer.model, tokenizer_config.json
MAX_ID = 2**24  # token ids: real vocabularies stay below 300k
REGEX_SECONDS = 3.0

KNOWN_PATTERNS = frozenset({
    GPT2_PATTERN,
    # cl100k_base, and Llama-3's tokenizer.json
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
    # Qwen2 / Qwen2.5 / Qwen3
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
    # o200k_base
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
    # BLOOM, Falcon-style digit and punctuation splits
    r" ?[^(\s|[.,!?…。，、।۔،])]+",
    r"[0-9][0-9][0-9]",
})


def read_bytes(path: Path, limit: int = MAX_SMALL_FILE) -> bytes:
    """The file's bytes: a regular file no larger than ``limit``, else one ``TokenizerError`` line."""
    path = Path(path)
    try:
        info = os.stat(path)
    except OSError as exc:
        raise TokenizerError(f"cannot read {path}: {exc.strerror}") from None
    if not stat.S_ISREG(info.st_mode):
        raise TokenizerError(f"{path} is not a regular file")
    if info.st_size > limit:
        raise TokenizerError(f"{path} is {info.st_size / 2**20:.0f} MB, more than the {limit // 2**20} MB "
                             "a tokenizer file may have")
    try:
        with open(path, "rb") as handle:
            data = handle.read(limit + 1)
    except OSError as exc:
        raise TokenizerError(f"cannot read {path}: {exc.strerror}") from None
    if len(data) > limit:
        raise TokenizerError(f"{path} grew past {limit // 2**20} MB while being read")
    return data


def read_json(path: Path, limit: int = MAX_SMALL_FILE) -> Any:
    raw = read_bytes(path, limit)
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise TokenizerError(f"{path} is not valid JSON: {exc}") from None
    except RecursionError:
        raise TokenizerError(f"{path} is nested too deeply to be a tokenizer file") from None


def read_text(path: Path, limit: int = MAX_SMALL_FILE) -> str:
    try:
        return read_bytes(path, limit).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TokenizerError(f"{path} is not UTF-8 text: {exc}") from None


def check_id(value: Any, where: str) -> int:
    """A token id: an integer (not a bool, a float or a string) in 0..2^24."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TokenizerError(f"{where}: token id {value!r} is not an integer")
    if not 0 <= value < MAX_ID:
        raise TokenizerError(f"{where}: token id {value} is outside 0..{MAX_ID - 1}")
    return value


def _check_stage(node: Any, where: str, children: str) -> None:
    """A pipeline stage is null or an object with a string "type"; a Sequence's children likewise."""
    if node is None:
        return
    if not isinstance(node, dict):
        raise TokenizerError(f"{where} is a {type(node).__name__}, not a JSON object")
    kind = node.get("type")
    if not isinstance(kind, str):
        raise TokenizerError(f"{where} has no type")
    if kind == "Sequence":
        items = node.get(children)
        if not isinstance(items, list):
            raise TokenizerError(f"{where} is a Sequence without a list of {children}")
        for i, child in enumerate(items):
            _check_stage(child, f"{where}[{i}]", children)


def regexes(node: Any) -> list[str]:
    """Every ``{"Regex": ...}`` pattern inside a pipeline stage (Split, Replace), in order."""
    found: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "Regex":
                if not isinstance(value, str):
                    raise TokenizerError(f"a Regex pattern is a {type(value).__name__}, not a string")
                found.append(value)
            else:
                found.extend(regexes(value))
    elif isinstance(node, list):
        for value in node:
            found.extend(regexes(value))
    return found


def check_tokenizer_json(data: Any, path: Path) -> None:
    """Types and ranges of what ``tokenizers`` will read; a ``TokenizerError`` naming the first problem."""
    where = path.name
    if not isinstance(data, dict):
        raise TokenizerError(f"{path} should hold a JSON object")
    model = data.get("model")
    if not isinstance(model, dict):
        raise TokenizerError(f"{path} has no tokenizer model")
    kind = model.get("type", "BPE")
    if kind not in ("BPE", "WordPiece", "WordLevel", "Unigram"):
        raise TokenizerError(f"{where}: model type {kind!r} is not one of BPE, WordPiece, WordLevel, Unigram")
    vocab = model.get("vocab")
    if kind == "Unigram":
        if not isinstance(vocab, list) or not vocab:
            raise TokenizerError(f"{where}: a Unigram model needs a list of [piece, score] pairs")
        for entry in vocab:
            if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str)
                    and isinstance(entry[1], (int, float)) and not isinstance(entry[1], bool)):
                raise TokenizerError(f"{where}: Unigram entry {repr(entry)[:60]} is not [piece, score]")
        if len(vocab) >= MAX_ID:
            raise TokenizerError(f"{where}: {len(vocab)} pieces are more than {MAX_ID}")
        unk = model.get("unk_id")
        if unk is not None and check_id(unk, f"{where} unk_id") >= len(vocab):
            raise TokenizerError(f"{where}: unk_id {unk} is not a piece of the vocabulary")
    else:
        if not isinstance(vocab, dict):
            raise TokenizerError(f"{where}: the {kind} model has no vocabulary object")
        for token, idx in vocab.items():
            check_id(idx, f"{where} vocabulary entry {token[:40]!r}")
    if kind == "BPE":
        merges = model.get("merges", [])
        if not isinstance(merges, list):
            raise TokenizerError(f"{where}: merges should be a list")
        for m in merges:
            ok = (isinstance(m, str) and m.count(" ") >= 1) or (
                isinstance(m, list) and len(m) == 2 and all(isinstance(x, str) for x in m))
            if not ok:
                raise TokenizerError(f"{where}: merge {repr(m)[:60]} is neither 'a b' nor [a, b]")
    for key in ("unk_token", "continuing_subword_prefix", "end_of_word_suffix"):
        if model.get(key) is not None and not isinstance(model.get(key), str):
            raise TokenizerError(f"{where}: model.{key} should be a string")
    added = data.get("added_tokens") or []
    if not isinstance(added, list):
        raise TokenizerError(f"{where}: added_tokens should be a list")
    for a in added:
        if not isinstance(a, dict) or not isinstance(a.get("content"), str) or not a["content"]:
            raise TokenizerError(f"{where}: added token {repr(a)[:60]} has no text content")
        check_id(a.get("id"), f"{where} added token {a['content'][:40]!r}")
    _check_stage(data.get("normalizer"), f"{where} normalizer", "normalizers")
    _check_stage(data.get("pre_tokenizer"), f"{where} pre_tokenizer", "pretokenizers")
    _check_stage(data.get("post_processor"), f"{where} post_processor", "processors")
    _check_stage(data.get("decoder"), f"{where} decoder", "decoders")
    for proc in _flatten(data.get("post_processor"), "processors"):
        specials = proc.get("special_tokens", {})
        if proc.get("type") == "TemplateProcessing" and isinstance(specials, dict):
            for name, spec in specials.items():
                ids = spec.get("ids") if isinstance(spec, dict) else None
                if not isinstance(ids, list):
                    raise TokenizerError(f"{where}: template token {name[:40]!r} has no list of ids")
                for i in ids:
                    check_id(i, f"{where} template token {name[:40]!r}")
    for pattern in regexes([data.get("normalizer"), data.get("pre_tokenizer")]):
        check_regex(pattern)


def _flatten(node: Any, key: str) -> list[dict[str, Any]]:
    if not isinstance(node, dict):
        return []
    if node.get("type") == "Sequence":
        return [s for child in node.get(key, []) for s in _flatten(child, key)]
    return [node]


_PROBE = r"""
import sys
from tokenizers import Regex, pre_tokenizers
pattern = sys.stdin.read()
split = pre_tokenizers.Split(Regex(pattern), behavior="isolated")
for text in [c * n + tail for c in ("a", "A", "1", " ", "\n", "'", "!", "\u00e9", "\u65e5", "a1", "a ", " \n")
             for n in (32, 3000) for tail in ("", "!", "\x00", "a")]:
    split.pre_tokenize_str(text)
"""


@lru_cache(maxsize=64)
def check_regex(pattern: str) -> None:
    """Accept a known family's pattern; run any other on adversarial strings in a subprocess with a time limit."""
    if pattern in KNOWN_PATTERNS:
        return
    if getattr(sys, "frozen", False):  # a bundled app: sys.executable is not a Python to run the probe with
        raise TokenizerError(f"the tokenizer's regex {pattern[:60]!r} is not one of the known families' and cannot "
                             "be tested for catastrophic backtracking in this build; refused")
    try:
        done = subprocess.run([sys.executable, "-c", _PROBE], input=pattern.encode("utf-8"), capture_output=True,
                              timeout=REGEX_SECONDS, env={**os.environ, "PYTHONPATH": ""})
    except subprocess.TimeoutExpired:
        raise TokenizerError(f"the tokenizer's regex {pattern[:60]!r} did not finish on a {3000}-character test "
                             f"string within {REGEX_SECONDS:.0f} s (catastrophic backtracking); refused") from None
    except OSError as exc:
        raise TokenizerError(f"cannot test the tokenizer's regex {pattern[:60]!r}: {exc}") from None
    if done.returncode != 0 and b"retry-limit" in done.stderr:
        raise TokenizerError(f"the tokenizer's regex {pattern[:60]!r} backtracks catastrophically on a test string "
                             "(the regex engine gave up); refused")
    if done.returncode != 0:
        lines = [line for line in done.stderr.decode("utf-8", "replace").splitlines() if line.strip()]
        reason = lines[-1][:160] if lines else f"exit status {done.returncode}"
        raise TokenizerError(f"the tokenizer's regex {pattern[:60]!r} is not valid: {reason}")
