"""A ``transformers`` model held in memory -> a ``LoadedModel``, through the same converters as the files.

``from_transformers(model, tokenizer)`` takes ``model.config.to_dict()`` (what ``config.json`` would
hold) and ``model.state_dict()`` (what the weights files would hold) and runs them through the
family's own config and convert functions, the very ones ``load_checkpoint`` uses for a directory,
then checks every tensor by name and shape (``assign_weights``). Nothing is written to disk and the
``transformers`` model is not changed: its tensors are copied into ours.

The families are the directory loader's own (``families.FAMILIES``): every model type that opens
from a directory opens from memory too. The tokenizer object is wrapped as it is
(``TransformersTokenizer``): ``tokenizer(text)`` gives the ids, so the app's prompt is encoded the
way the notebook encodes it.
"""

from __future__ import annotations

import json
from typing import Any

import torch

from explorer.core.checkpoint.families import FAMILIES
from explorer.core.checkpoint.loader import configure, convert
from explorer.core.checkpoint.safe_io import assign_weights, finish
from explorer.core.errors import CheckpointError, TokenizerError
from explorer.core.loaded import LoadedModel
from explorer.core.model import Transformer
from explorer.core.tokenize.base import Tokenizer, _unicode_to_byte


def _is_transformers_model(obj: Any) -> bool:
    return hasattr(obj, "config") and hasattr(obj.config, "to_dict") and hasattr(obj, "state_dict")


def from_transformers(model: Any, tokenizer: Any = None, device: str = "auto", dtype: str = "float32",
                      name: str | None = None) -> LoadedModel:
    """Convert an in-memory ``transformers`` model of a registered family (and its tokenizer) without writing files."""
    if not _is_transformers_model(model):
        raise CheckpointError(f"expected a transformers model (with .config and .state_dict()), got {type(model).__name__}")
    hf = model.config.to_dict()
    model_type = hf.get("model_type")
    family = FAMILIES.get(model_type)
    if family is None:
        raise CheckpointError(f"in-memory {type(model).__name__} (model_type {model_type!r}) is not supported; "
                              f"supported: {', '.join(sorted(FAMILIES))}")
    text, cfg, notes = configure(family, hf)
    with torch.no_grad():
        weights = {k: v.detach() for k, v in model.state_dict().items()}
        cfg, notes, converted = convert(family, text, cfg, notes, weights)
        ours = Transformer(cfg)
        assign_weights(ours, converted, f"in-memory {type(model).__name__}")
    label = name or str(hf.get("_name_or_path") or getattr(model.config, "name_or_path", "") or model_type)
    if tokenizer is None:
        raise TokenizerError("pass the model's tokenizer too: explorer.show(model, tokenizer)")
    tok = tokenizer if isinstance(tokenizer, Tokenizer) else TransformersTokenizer(tokenizer)
    if tok.vocab_size > cfg.vocab_size:
        raise TokenizerError(f"the tokenizer has {tok.vocab_size} tokens but the model only {cfg.vocab_size}")
    return LoadedModel(finish(ours, device, dtype), tok, label or "in-memory model", "in-memory transformers model",
                       family.arch, notes=notes)


class TransformersTokenizer(Tokenizer):
    """A ``transformers`` tokenizer object behind our ``Tokenizer`` interface.

    ``encode`` is ``tokenizer(text)["input_ids"]`` (with the special tokens it adds, e.g. a BOS);
    ``token_bytes`` gives each token's honest bytes: byte-level BPE tokens are mapped back from GPT-2's
    printable characters, SentencePiece byte tokens ``<0xNN>`` become that byte and ``▁`` a space.
    """

    def __init__(self, tokenizer: Any) -> None:
        if not callable(getattr(tokenizer, "convert_ids_to_tokens", None)):
            raise TokenizerError(f"expected a transformers tokenizer, got {type(tokenizer).__name__}")
        self.hf = tokenizer
        self.name = f"{getattr(tokenizer, 'name_or_path', '') or type(tokenizer).__name__} (transformers)"
        self.eos_id = getattr(tokenizer, "eos_token_id", None)
        self._byte_level = _decoder_type(tokenizer) == "ByteLevel"
        self._u2b = _unicode_to_byte()

    @property
    def vocab_size(self) -> int:
        return len(self.hf)

    def encode(self, text: str) -> list[int]:
        return [int(i) for i in self.hf(text)["input_ids"]]

    def decode(self, ids: list[int]) -> str:
        return self.hf.decode(list(ids), clean_up_tokenization_spaces=False)

    def token_bytes(self, token_id: int) -> bytes:
        piece = self.hf.convert_ids_to_tokens(int(token_id))
        if piece is None:
            raise TokenizerError(f"token id {token_id} is not in the {self.name} vocabulary")
        if int(token_id) in set(getattr(self.hf, "all_special_ids", []) or []):
            return piece.encode("utf-8")
        if self._byte_level and all(c in self._u2b for c in piece):
            return bytes(self._u2b[c] for c in piece)
        if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
            try:
                return bytes([int(piece[3:5], 16)])
            except ValueError:
                pass
        return piece.replace("\u2581", " ").encode("utf-8")

    def describe(self) -> dict[str, Any]:
        return {"type": "transformers", "name": self.name}


def _decoder_type(tokenizer: Any) -> str | None:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return None
    try:
        decoder = json.loads(backend.to_str()).get("decoder") or {}
    except (ValueError, AttributeError):
        return None
    return decoder.get("type")


# --- in-memory sources, so that the app's loader (and a device change) can open them by name --------

PREFIX = "memory:"
_REGISTERED: dict[str, tuple[Any, Any, str | None]] = {}


def register(model: Any, tokenizer: Any = None, name: str | None = None) -> str:
    """A source string (``memory:N``) that ``load_checkpoint`` opens as this in-memory model.

    The window loads it in its worker like any checkpoint, and loads it again on another device or
    precision. The registry keeps a reference to the objects for as long as the process runs (the
    notebook holds them anyway); a ``LoadedModel`` may be registered too, and is used as it is.
    """
    if not isinstance(model, LoadedModel) and not _is_transformers_model(model):
        raise CheckpointError(f"expected a transformers model or a LoadedModel, got {type(model).__name__}")
    for source, (held, held_tok, _) in _REGISTERED.items():
        if held is model and held_tok is tokenizer:
            return source
    source = f"{PREFIX}{len(_REGISTERED) + 1}"
    _REGISTERED[source] = (model, tokenizer, name)
    return source


def is_in_memory(source: Any) -> bool:
    return isinstance(source, str) and source.startswith(PREFIX)


def load_registered(source: str, device: str = "auto", dtype: str = "float32") -> LoadedModel:
    if source not in _REGISTERED:
        raise CheckpointError(f"{source} is an in-memory model of another session; open it from its notebook again")
    model, tokenizer, name = _REGISTERED[source]
    if isinstance(model, LoadedModel):
        return model
    return from_transformers(model, tokenizer, device, dtype, name)
