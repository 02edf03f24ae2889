"""One record per model family: how a ``config.json`` and its tensors become our ``Transformer``.

A ``Family`` holds the three things a Hugging Face ``model_type`` needs, used the same way by a
directory (``loader.load_family``) and by a ``transformers`` model held in memory
(``in_memory.from_transformers``):

* ``config``: the config.json dict -> (``ModelConfig``, notes the app shows);
* ``convert``: their state dict (names and layouts) -> ours, given the config (and the config.json
  dict, for the few families whose tensor layout depends on a key the config does not keep);
* optional hooks: ``text_config`` (a multimodal file: the language model's part of config.json),
  ``from_weights`` (a config switch only the tensors tell: an encoder with or without its head),
  ``tokenizer`` (a directory's tokenizer; the default reads tokenizer.json, tokenizer.model, ...).

A family module defines its records in ``FAMILIES``; ``families.py`` gathers them (one line per module).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from explorer.core.config import ModelConfig
from explorer.core.errors import CheckpointError, TokenizerError
from explorer.core.tokenize.base import Tokenizer
from explorer.core.tokenize.huggingface import tokenizer_for_checkpoint

HFConfig = dict[str, Any]  # a config.json as read (or transformers' config.to_dict())
Weights = dict[str, torch.Tensor]
ConfigFn = Callable[[HFConfig], "tuple[ModelConfig, list[str]]"]
ConvertFn = Callable[[Weights, ModelConfig, HFConfig], Weights]
FromWeightsFn = Callable[[ModelConfig, list[str], Weights], "tuple[ModelConfig, list[str]]"]
TokenizerFn = Callable[[Path, ModelConfig, HFConfig], "tuple[Tokenizer, list[str]]"]


def directory_tokenizer(directory: Path, cfg: ModelConfig, hf: HFConfig) -> tuple[Tokenizer, list[str]]:
    """The directory's own tokenizer (tokenizer.json, tokenizer.model, vocab.json + merges.txt, vocab.txt),
    or the token-id stand-in with a note saying why."""
    try:
        return tokenizer_for_checkpoint(directory, cfg.vocab_size, hf.get("eos_token_id"))
    except TokenizerError as exc:
        raise CheckpointError(str(exc)) from None


def layout_only(convert: Callable[[Weights, ModelConfig], Weights]) -> ConvertFn:
    """A converter that needs only the tensors and the config (most families)."""
    return lambda weights, cfg, hf: convert(weights, cfg)


@dataclass(frozen=True)
class Family:
    """How one ``model_type`` becomes ours (see the module docstring)."""

    model_type: str   # config.json's model_type
    arch: str         # the LoadedModel's architecture name, as the app shows it
    config: ConfigFn
    convert: ConvertFn
    text_config: Callable[[HFConfig], HFConfig] | None = None
    from_weights: FromWeightsFn | None = None
    tokenizer: TokenizerFn = directory_tokenizer
