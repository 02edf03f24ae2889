"""Hugging Face GPT-2 directories (``model_type`` ``gpt2``) -> our ``Transformer``.

GPT-2 is pre-norm LayerNorm with biases, learned absolute positions, a plain GELU (tanh
approximation) FFN and a tied un-embedding. Its ``Conv1D`` layers store weights as [in, out].
The tokenizer is the directory's own ``tokenizer.json`` or ``vocab.json``/``merges.txt`` when present
(read by the ``tokenizers`` library), else GPT-2's packaged BPE.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from explorer.core.checkpoint.convert import get_bool, get_float, get_int, where
from explorer.core.checkpoint.family import Family, layout_only
from explorer.core.config import ModelConfig
from explorer.core.errors import CheckpointError, TokenizerError
from explorer.core.tokenize.base import Tokenizer, gpt2_tokenizer
from explorer.core.tokenize.huggingface import read_directory_tokenizer

_GPT2_ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu", "relu": "relu"}


def gpt2_config(hf: dict[str, Any]) -> ModelConfig:
    family = "GPT-2"
    d, n_head = get_int(hf, family, "n_embd"), get_int(hf, family, "n_head", low=1)
    act = hf.get("activation_function", "gelu_new")
    if not isinstance(act, str) or act not in _GPT2_ACTIVATIONS:
        raise CheckpointError(f"{where(family)}: activation_function {act!r:.60} is not supported "
                              f"({', '.join(_GPT2_ACTIVATIONS)})")
    if hf.get("scale_attn_by_inverse_layer_idx") or hf.get("scale_attn_weights") is False:
        raise CheckpointError("this GPT-2 variant scales attention differently; not supported")
    if d % n_head:
        raise CheckpointError(f"{where(family)}: n_embd ({d}) is not a multiple of n_head ({n_head})")
    n_ctx = get_int(hf, family, "n_positions", None) if hf.get("n_positions") is not None else \
        get_int(hf, family, "n_ctx", 1024)
    d_ff = get_int(hf, family, "n_inner", None) if hf.get("n_inner") is not None else 4 * d
    return ModelConfig(arch="gpt2", vocab_size=get_int(hf, family, "vocab_size"), n_ctx=n_ctx,
                       d_model=d, n_layers=get_int(hf, family, "n_layer"), n_heads=n_head, d_head=d // n_head,
                       d_ff=d_ff, norm="layernorm", norm_placement="pre",
                       norm_eps=get_float(hf, family, "layer_norm_epsilon", 1e-5), positions="learned",
                       activation=_GPT2_ACTIVATIONS[act],
                       tie_embeddings=get_bool(hf, family, "tie_word_embeddings", True))


def convert_gpt2(hf: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """Hugging Face GPT-2 tensor names and layout -> ours.

    GPT-2's ``Conv1D`` stores weights as [in, out] (x @ W); ``nn.Linear`` wants [out, in]. The
    layout is read off ``c_attn``'s shape, which differs between the two, and applied to all.
    ``hf`` is consumed (emptied), so that memory is never held twice.
    """
    sd = {k.removeprefix("transformer."): v for k, v in hf.items()
          if not k.endswith((".attn.bias", ".attn.masked_bias"))}  # old causal-mask buffers
    hf.clear()  # consumed: each original is freed as soon as its transposed copy exists (no doubling)
    d = cfg.d_model

    def take(name: str) -> torch.Tensor:
        if name not in sd:
            raise CheckpointError(f"GPT-2 checkpoint lacks tensor {name}")
        return sd.pop(name)

    first = sd.get("h.0.attn.c_attn.weight")
    conv1d = first is None or tuple(first.shape) == (d, 3 * d)

    def linear(name: str) -> torch.Tensor:
        w = take(name)
        return w.t().contiguous() if conv1d else w

    out = {"embed.weight": take("wte.weight"), "pos_embed.weight": take("wpe.weight")}
    for i in range(cfg.n_layers):
        p, q = f"h.{i}.", f"blocks.{i}."
        for ours, theirs in (("ln1", "ln_1"), ("ln2", "ln_2")):
            out[q + ours + ".weight"] = take(p + theirs + ".weight")
            out[q + ours + ".bias"] = take(p + theirs + ".bias")
        w_qkv, b_qkv = linear(p + "attn.c_attn.weight"), take(p + "attn.c_attn.bias")
        if tuple(w_qkv.shape) != (3 * d, d):
            raise CheckpointError(f"tensor h.{i}.attn.c_attn.weight has shape {tuple(w_qkv.shape)}, "
                                  f"the config implies {(d, 3 * d)}")
        for j, name in enumerate(("W_Q", "W_K", "W_V")):
            out[q + f"attn.{name}.weight"] = w_qkv[j * d:(j + 1) * d]
            out[q + f"attn.{name}.bias"] = b_qkv[j * d:(j + 1) * d]
        out[q + "attn.W_O.weight"] = linear(p + "attn.c_proj.weight")
        out[q + "attn.W_O.bias"] = take(p + "attn.c_proj.bias")
        out[q + "mlp.W_in.weight"] = linear(p + "mlp.c_fc.weight")
        out[q + "mlp.W_in.bias"] = take(p + "mlp.c_fc.bias")
        out[q + "mlp.W_out.weight"] = linear(p + "mlp.c_proj.weight")
        out[q + "mlp.W_out.bias"] = take(p + "mlp.c_proj.bias")
    out["ln_final.weight"] = take("ln_f.weight")
    out["ln_final.bias"] = take("ln_f.bias")
    lm_head = sd.pop("lm_head.weight", None)
    out["unembed.weight"] = lm_head if lm_head is not None else out["embed.weight"]
    if sd:
        raise CheckpointError(f"GPT-2 checkpoint has unexpected tensors: {', '.join(sorted(sd)[:6])}")
    return out


def hf_tokenizer(directory: Path, vocab_size: int) -> Tokenizer:
    """The directory's own tokenizer.json or vocab.json + merges.txt; GPT-2's packaged BPE only when it has none."""
    try:
        own = read_directory_tokenizer(directory, f"{directory.name} tokenizer")
    except TokenizerError as exc:
        raise CheckpointError(str(exc)) from None
    if own is not None:
        if own.vocab_size > vocab_size:
            raise CheckpointError(f"the tokenizer in {directory} has {own.vocab_size} tokens but the model "
                                  f"only {vocab_size}")
        return own
    if vocab_size >= 50257:
        return gpt2_tokenizer()
    raise CheckpointError(f"{directory} has no vocab.json and its vocabulary ({vocab_size}) is not GPT-2's")


def gpt2_directory_tokenizer(directory: Path, cfg: ModelConfig, hf: dict[str, Any]) -> tuple[Tokenizer, list[str]]:
    return hf_tokenizer(directory, cfg.vocab_size), []


FAMILIES = (Family("gpt2", "gpt2", lambda hf: (gpt2_config(hf), []), layout_only(convert_gpt2),
                   tokenizer=gpt2_directory_tokenizer),)
