"""The app's own checkpoint format: a directory with ``config.json`` (``"format":
"transformer-explorer"``, the model configuration and a tokenizer description),
``model.safetensors`` and the tokenizer's files. The bundled models are saved in it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from explorer.core.checkpoint.safe_io import build_model, finish, read_weights
from explorer.core.checkpoint.streamed import load_streamed, streams
from explorer.core.checkpoint.validate import check_config, current
from explorer.core.config import ModelConfig
from explorer.core.errors import CheckpointError
from explorer.core.loaded import LoadedModel
from explorer.core.model import Transformer
from explorer.core.tokenize.base import Tokenizer, tokenizer_from_description
from explorer.core.tokenize.bpe import save_ranks
from explorer.core.tokenize.huggingface import tokenizer_from_saved

NATIVE_FORMAT = "transformer-explorer"


def save_native(model: Transformer, tokenizer: Tokenizer, directory: Path, name: str = "",
                extra: dict[str, Any] | None = None) -> None:
    """Write a native checkpoint: config.json, model.safetensors and the tokenizer's files."""
    from safetensors.torch import save_file

    from explorer.core import arguments

    arguments.instance(model, Transformer, "model", "a Transformer (a LoadedModel's .model)")
    arguments.instance(tokenizer, Tokenizer, "tokenizer", "a Tokenizer (a LoadedModel's .tokenizer)")
    directory = arguments.path(directory, "directory")
    directory.mkdir(parents=True, exist_ok=True)
    desc = tokenizer.describe()
    if desc.get("type") == "tiktoken":
        encoding = tokenizer.encoding  # type: ignore[attr-defined]
        save_ranks(encoding._mergeable_ranks, directory / desc.setdefault("ranks_file", "tokenizer.tiktoken"))
        desc["special_tokens"] = dict(encoding._special_tokens)
        desc["pattern"] = encoding._pat_str
    elif desc.get("type") == "hf-tokenizer-json":
        tokenizer.save(directory / desc.setdefault("file", "tokenizer.json"))  # type: ignore[attr-defined]
    config = {"format": NATIVE_FORMAT, "version": 1, "name": name or directory.name,
              "model": model.cfg.to_dict(), "tokenizer": desc, **(extra or {})}
    state = {k: v.detach().to("cpu").contiguous() for k, v in model.state_dict().items()}
    if model.cfg.tie_embeddings:
        state.pop("unembed.weight")  # the same tensor as embed.weight
    save_file(state, str(directory / "model.safetensors"))
    (directory / "config.json").write_text(json.dumps(config, indent=2))


def load_native(directory: Path, config: dict[str, Any], device: str, dtype: str) -> LoadedModel:
    if not isinstance(config.get("model"), dict) or not isinstance(config.get("tokenizer"), dict):
        raise CheckpointError(f"{directory / 'config.json'} lacks its 'model' or 'tokenizer' section (each an object)")
    cfg = ModelConfig.from_dict(config["model"])
    ctx = current()
    if ctx is not None:  # a placed model streams, block by block (streamed.py)
        ctx.streamed = streams(directory, ctx.placement is not None)
    check_config(cfg)
    desc = config["tokenizer"]
    if isinstance(desc, dict) and desc.get("type") == "hf-tokenizer-json":
        tokenizer: Tokenizer = tokenizer_from_saved(desc, directory)
    else:
        tokenizer = tokenizer_from_description(desc, directory)
    if tokenizer.vocab_size > cfg.vocab_size:
        raise CheckpointError(f"the tokenizer has {tokenizer.vocab_size} tokens but the model only {cfg.vocab_size}")
    if ctx is not None and ctx.streamed:
        model = load_streamed(cfg, directory, lambda w: _ours(w, cfg), str(directory / "model.safetensors"))
    else:
        model = finish(build_model(cfg, _ours(read_weights(directory), cfg), str(directory / "model.safetensors")),
                       device, dtype)
    return LoadedModel(model, tokenizer, config.get("name", directory.name), str(directory), cfg.arch)


def _ours(weights: dict[str, Any], cfg: ModelConfig) -> dict[str, Any]:
    """A native checkpoint's tensors are already ours; a tied model's file holds the embedding once."""
    if cfg.tie_embeddings and "unembed.weight" not in weights and "embed.weight" in weights:
        weights["unembed.weight"] = weights["embed.weight"]
    return weights
