"""The tokenizer a GGUF file carries (``tokenizer.ggml.*``) as a ``tokenizers`` pipeline.

The same pipeline ``transformers`` builds from the file (``AutoTokenizer.from_pretrained(dir,
gguf_file=...)``), so the ids are the same:

* ``tokenizer.ggml.model == "gpt2"``: byte-level BPE (Llama 3, Qwen 2/3, GPT-2, Falcon, StableLM 2):
  the tokens (respelled into GPT-2's byte alphabet where a file wrote raw text) and the file's
  merges; text split by the regex of ``tokenizer.ggml.pre`` where it names a known one
  (``llama-bpe``, ``qwen2``, ...), else by GPT-2's;
* ``"llama"``: SentencePiece-style BPE (Llama 2, Mistral, Gemma, Phi-3): byte fallback, a ``▁``
  before the text (Gemma: none; Phi-3: from a normalizer), merges from the file or rebuilt from the
  tokens' scores (Gemma: from their order);
* control tokens (type 3) become special added tokens, user-defined ones (type 4) plain added
  tokens; ``bos``/``eos``/``unk``/``pad`` ids name the special tokens, and
  ``add_bos_token``/``add_eos_token`` (SentencePiece files: a BOS unless the file says otherwise)
  decide the post-processor, as ``tokenizer_config.json`` would (``hf_tokenizer.apply_config``).

Every value is type-checked first; a file without a tokenizer, or with a kind not read here (T5's
Unigram, BERT's WordPiece, RWKV), gets the token-id stand-in and a note saying why.
"""

from __future__ import annotations

from typing import Any

from explorer.core.errors import TokenizerError
from explorer.core.tokenize.base import Tokenizer, _unicode_to_byte
from explorer.core.tokenize.hf_tokenizer import HFTokenizer, apply_config, guarded
from explorer.core.tokenize.huggingface import TokenIdTokenizer

CONTROL, USER_DEFINED = 3, 4
_LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
           r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2 = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
_TEKKEN = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
           r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
           r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_GPT4O = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
          r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
          r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# tokenizer.ggml.pre -> the split regex its merges were learned with (others: GPT-2's byte-level split)
SPLITS = {"llama3": _LLAMA3, "llama-v3": _LLAMA3, "llama-bpe": _LLAMA3, "falcon3": _LLAMA3, "smaug-bpe": _LLAMA3,
          "dbrx": _LLAMA3, "pixtral": _LLAMA3, "qwen2": _QWEN2, "deepseek-r1-qwen": _QWEN2, "megrez": _QWEN2,
          "tekken": _TEKKEN, "gpt-4o": _GPT4O, "llama4": _GPT4O}
_SPECIALS = {"bos_token": "bos_token_id", "eos_token": "eos_token_id", "unk_token": "unknown_token_id",
             "pad_token": "padding_token_id"}


def _list(meta: dict[str, Any], key: str, kind: type, n: int | None = None) -> list[Any] | None:
    value = meta.get(f"tokenizer.ggml.{key}")
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, kind) and not isinstance(v, bool) for v in value):
        raise TokenizerError(f"tokenizer.ggml.{key} should be a list of {kind.__name__} values")
    if n is not None and len(value) != n:
        raise TokenizerError(f"tokenizer.ggml.{key} has {len(value)} entries for {n} tokens")
    return value


def _respelled(tokens: list[str]) -> dict[str, int]:
    """Byte-level tokens as GPT-2's printable alphabet spells them (a file may hold raw text)."""
    spelling = {b: c for c, b in _unicode_to_byte().items()}
    alphabet = set(spelling.values())
    return {t if set(t) <= alphabet else "".join(spelling[b] for b in t.encode("utf-8")): i
            for i, t in enumerate(tokens)}


def scored_merges(vocab: dict[str, int], scores: dict[str, float] | None) -> list[tuple[str, str]]:
    """Merges a SentencePiece vocabulary implies: each split of a token into two tokens, best score first
    (by id when there are no scores), as ``transformers.generate_merges`` orders them."""
    source = scores if scores is not None else vocab
    merges: list[tuple[str, str, float]] = []
    for piece, score in source.items():
        local = [(piece[:i], piece[i:], score) for i in range(1, len(piece))
                 if piece[:i] in vocab and piece[i:] in vocab]
        merges.extend(sorted(local, key=lambda x: (vocab[x[0]], vocab[x[1]])))
    merges.sort(key=lambda m: (m[2], len(m[0]), len(m[1])), reverse=scores is not None)
    return [(a, b) for a, b, _ in merges]


def _backend(meta: dict[str, Any], kind: str, arch: str, tokens: list[str]) -> Any:
    from tokenizers import Regex, Tokenizer as Backend, decoders, normalizers, pre_tokenizers
    from tokenizers.models import BPE

    merges = _list(meta, "merges", str)
    pairs = [tuple(m.split(" ", 1)) for m in merges] if merges is not None else None
    if pairs is not None and any(len(p) != 2 for p in pairs):
        raise TokenizerError("tokenizer.ggml.merges should hold pairs separated by a space")
    if kind == "gpt2":
        backend = Backend(BPE(vocab=_respelled(tokens), merges=pairs or [], dropout=None, continuing_subword_prefix="",
                              end_of_word_suffix="", fuse_unk=False))
        backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        backend.decoder = decoders.ByteLevel()
        split = SPLITS.get(meta.get("tokenizer.ggml.pre"))  # type: ignore[arg-type]
        if split is not None:
            backend.pre_tokenizer = pre_tokenizers.Sequence([
                pre_tokenizers.Split(Regex(split), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        return backend
    gemma = arch in ("gemma", "gemma2", "gemma3")
    if gemma:  # runs of spaces are stored as spaces; their merges are in file order
        tokens = ["▁" * len(t) if " " in t and not t.strip() else t for t in tokens]
    vocab = {t: i for i, t in enumerate(tokens)}
    if pairs is None:
        scores = _list(meta, "scores", float, len(tokens))
        by = {t: -i for i, t in enumerate(tokens)} if gemma else dict(zip(tokens, scores)) if scores else None
        pairs = scored_merges(vocab, by)
    if gemma:  # Gemma's own pipeline: spaces become ▁ in a normalizer, no ▁ before the text
        backend = Backend(BPE(vocab=vocab, merges=pairs, fuse_unk=True, unk_token="<unk>", dropout=None,
                              byte_fallback=True))
        backend.pre_tokenizer = pre_tokenizers.Split(pattern=" ", behavior="merged_with_previous", invert=False)
        backend.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
        backend.normalizer = normalizers.Replace(" ", "▁")
        return backend
    backend = Backend(BPE(vocab=vocab, merges=pairs, fuse_unk=True, byte_fallback=True, dropout=None))
    backend.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
    backend.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                         decoders.Strip(content=" ", left=1)])
    if arch == "phi3":  # the prefix space comes from a normalizer (as Phi-3's tokenizer.json has it)
        backend.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
        backend.pre_tokenizer = None
    return backend


def _declared_wrong(kind: str, tokens: list[str]) -> str | None:
    """Why the vocabulary is not of the kind the file declares, or None. Byte-level BPE spells a leading space
    'Ġ' (tokens like 'Ġthe'), SentencePiece '▁' ('▁the'); read as the other kind, every token would be wrong."""
    bpe = sum(len(t) > 1 and t[0] == "Ġ" for t in tokens)
    spm = sum("▁" in t for t in tokens)
    if kind == "llama" and bpe >= 20 and bpe > 4 * spm:
        return (f"tokenizer.ggml.model says 'llama' (SentencePiece) but the vocabulary is byte-level BPE ({bpe:,} "
                "tokens like 'Ġthe'): it would be read wrongly")
    if kind == "gpt2" and spm >= 20 and spm > 4 * bpe:
        return (f"tokenizer.ggml.model says 'gpt2' (byte-level BPE) but the vocabulary is SentencePiece ({spm:,} "
                "tokens like '▁the'): it would be read wrongly")
    return None


def build(meta: dict[str, Any], arch: str) -> tuple[Any, str]:
    """(the ``tokenizers`` backend, its display style) from the file's ``tokenizer.ggml.*``."""
    from tokenizers import AddedToken

    kind = meta.get("tokenizer.ggml.model")
    tokens = _list(meta, "tokens", str)
    if kind not in ("gpt2", "llama") or not tokens:
        raise TokenizerError(f"the file's tokenizer ({kind!r:.40}) is not read here (gpt2-style byte-level BPE "
                             "and llama-style SentencePiece are)")
    mismatch = _declared_wrong(kind, tokens)
    if mismatch:
        raise TokenizerError(mismatch)
    types = _list(meta, "token_type", int, len(tokens)) or []
    backend = _backend(meta, kind, arch, tokens)
    if kind == "gpt2":
        alphabet = set(_unicode_to_byte())
        control = [t for t, k in zip(tokens, types) if k == CONTROL and set(t) <= alphabet]
    else:
        control = [t for t, k in zip(tokens, types) if k == CONTROL]
    if control:
        backend.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in control])
    vocab = backend.get_vocab()
    user = [AddedToken(t, normalized=False, special=False) for t, k in zip(tokens, types)
            if k == USER_DEFINED and t in vocab]
    if user:
        backend.add_tokens(user)
    config: dict[str, Any] = {}
    for name, key in (("add_bos_token", "add_bos_token"), ("add_eos_token", "add_eos_token")):
        value = meta.get(f"tokenizer.ggml.{key}")
        if value is not None:
            if not isinstance(value, bool):
                raise TokenizerError(f"tokenizer.ggml.{key} should be true or false")
            config[name] = value
    if kind == "llama":
        config.setdefault("add_bos_token", True)  # llama.cpp adds BOS unless the file says otherwise
    for name, key in _SPECIALS.items():
        token_id = meta.get(f"tokenizer.ggml.{key}")
        if token_id is not None:
            if isinstance(token_id, bool) or not isinstance(token_id, int) or not 0 <= token_id < len(tokens):
                raise TokenizerError(f"tokenizer.ggml.{key} ({token_id!r:.20}) is not a token id")
            config[name] = tokens[token_id]
    apply_config(backend, config)
    return backend, "byte-level" if kind == "gpt2" else "sentencepiece"


def tokenizer_from_gguf(header: Any, model_vocab_size: int) -> tuple[Tokenizer, list[str]]:
    """The file's tokenizer, or the token-id stand-in and a note saying why."""
    meta, arch = header.metadata, str(header.metadata.get("general.architecture"))
    name = f"{header.path.name} tokenizer"
    eos = meta.get("tokenizer.ggml.eos_token_id")
    eos = eos if isinstance(eos, int) and not isinstance(eos, bool) and 0 <= eos < model_vocab_size else None
    try:
        backend, style = guarded(lambda: build(meta, arch), "the GGUF tokenizer cannot be built")
    except TokenizerError as exc:
        reason = f"its tokenizer cannot be used: {exc}"
        note = (f"No tokenizer: {reason}. The model runs on token ids: type the prompt as ids separated by "
                "spaces; tokens are shown as [id].")
        return TokenIdTokenizer(model_vocab_size, f"This GGUF file has no supported tokenizer ({reason})", eos), [note]
    tokenizer = HFTokenizer(backend, name, style, {"type": "hf-tokenizer-json", "name": name,
                                                   "file": "tokenizer.json", "style": style,
                                                   "from": f"GGUF {header.path.name}"})
    if tokenizer.vocab_size > model_vocab_size:
        raise TokenizerError(f"the file's tokenizer has {tokenizer.vocab_size} tokens but the model only "
                             f"{model_vocab_size}")
    tokenizer.eos_id = eos
    return tokenizer, []
