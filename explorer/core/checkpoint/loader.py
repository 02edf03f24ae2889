"""The one generic loader: a ``Family`` applied to a directory, or to tensors already in memory.

``load_family`` is what every Hugging Face directory goes through: config.json -> ``ModelConfig``
(checked against the machine's memory before anything is allocated: ``validate.check_config``),
the weights read tensor by tensor (their headers checked against that config), converted to our
names and built without a second copy, then the directory's tokenizer. ``configure`` and
``convert`` are the two steps ``in_memory.from_transformers`` shares with it.
"""

from __future__ import annotations

from pathlib import Path

from explorer.core.checkpoint.family import Family, HFConfig, Weights
from explorer.core.checkpoint.safe_io import build_model, finish, read_weights
from explorer.core.checkpoint.streamed import load_streamed, streams
from explorer.core.checkpoint.validate import check_config, current
from explorer.core.config import ModelConfig
from explorer.core.loaded import LoadedModel


def configure(family: Family, hf: HFConfig) -> tuple[HFConfig, ModelConfig, list[str]]:
    """(the language model's config.json dict, its ModelConfig, notes); the config is checked before use."""
    text = family.text_config(hf) if family.text_config is not None else hf
    cfg, notes = family.config(text)
    check_config(cfg)
    return text, cfg, notes


def convert(family: Family, hf: HFConfig, cfg: ModelConfig, notes: list[str],
            weights: Weights) -> tuple[ModelConfig, list[str], Weights]:
    """Their tensors -> ours (the config first completed from the tensors where the family needs it)."""
    if family.from_weights is not None:
        cfg, notes = family.from_weights(cfg, notes, weights)
        check_config(cfg)
    return cfg, notes, family.convert(weights, cfg, hf)


def load_family(family: Family, directory: Path, hf: HFConfig, device: str, dtype: str) -> LoadedModel:
    """Build, convert and check the weights, then read the directory's tokenizer. A placed model whose weights
    are safetensors streams: each block read, converted and put on its device in turn (streamed.py)."""
    ctx = current()
    if ctx is not None and family.from_weights is None:
        ctx.streamed = streams(directory, ctx.placement is not None)
    text, cfg, notes = configure(family, hf)
    if ctx is not None and ctx.streamed:
        model = load_streamed(cfg, directory, lambda weights: family.convert(weights, cfg, text), str(directory))
    else:
        cfg, notes, ours = convert(family, text, cfg, notes, read_weights(directory))
        model = finish(build_model(cfg, ours, str(directory)), device, dtype)
    tokenizer, tok_notes = family.tokenizer(directory, cfg, text)
    from explorer.core.chat.template import found, template_from_directory

    template, problem = found(template_from_directory, directory)
    return LoadedModel(model, tokenizer, directory.name, str(directory), family.arch,
                       notes=notes + tok_notes + ([problem] if problem else []), chat_template=template)
