"""nanoGPT checkpoints: the ``ckpt.pt`` that Karpathy's nanoGPT ``train.py`` writes.

The file is a pickled dict: ``model`` (the state dict, with ``_orig_mod.`` in front of every name
when the model was ``torch.compile``d), ``model_args`` (n_layer, n_head, n_embd, block_size, bias,
vocab_size, dropout), and training state (optimizer, iter_num, best_val_loss, config). It is read
with ``torch.load(weights_only=True)`` only, so nothing in it can run.

The model is GPT-2's layout with ``nn.Linear`` weights ([out, in], no transpose), exact GELU, LayerNorms
and linear layers without biases when ``bias`` is false, and the un-embedding tied to ``wte``.

Vocabulary: GPT-2's BPE, unless a ``meta.pkl`` lies beside the checkpoint (the character models:
``stoi``/``itos``). ``meta.pkl`` is a pickle too, so it is read by an unpickler that refuses every
class and function: only dicts, lists, tuples, strings, numbers, booleans and None get through.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from explorer.core.checkpoint.convert import Tensors, expected_shapes
from explorer.core.checkpoint.pickles import read_plain_pickle
from explorer.core.checkpoint.safe_io import (
    build_model,
    convert_each,
    finish,
    torch_load,
)
from explorer.core.checkpoint.validate import check_config, check_headers
from explorer.core.checkpoint.validate import current as current_load
from explorer.core.config import ModelConfig
from explorer.core.errors import CheckpointError, TokenizerError
from explorer.core.loaded import LoadedModel
from explorer.core.tokenize.base import Tokenizer, VocabTokenizer, gpt2_tokenizer

SUFFIXES = (".pt", ".ckpt")
COMPILED_PREFIX = "_orig_mod."


def meta_tokenizer(path: Path) -> VocabTokenizer:
    """nanoGPT's character vocabulary from ``meta.pkl`` (``{'vocab_size': V, 'itos': {i: ch}, 'stoi': {ch: i}}``)."""
    meta = read_plain_pickle(path)
    if not isinstance(meta, dict) or not isinstance(meta.get("itos"), dict):
        keys = ", ".join(map(repr, list(meta)[:8])) if isinstance(meta, dict) else type(meta).__name__
        raise CheckpointError(f"{path.name} is not a nanoGPT character vocabulary: expected a dict with "
                              f"'itos' (id -> character), found {keys}")
    itos = meta["itos"]
    n = len(itos)
    if sorted(k for k in itos if isinstance(k, int) and not isinstance(k, bool)) != list(range(n)):
        raise CheckpointError(f"{path.name}: 'itos' should map the ids 0..{n - 1} to characters")
    chars = [itos[i] for i in range(n)]
    if not all(isinstance(c, str) and len(c) == 1 for c in chars):
        bad = next(c for c in chars if not (isinstance(c, str) and len(c) == 1))
        raise CheckpointError(f"{path.name}: token {bad!r} is not a single character; only character "
                              "vocabularies are supported from meta.pkl")
    if "vocab_size" in meta and meta["vocab_size"] != n:
        raise CheckpointError(f"{path.name} says vocab_size {meta['vocab_size']} but lists {n} characters")
    stoi = meta.get("stoi")
    if stoi is not None and (not isinstance(stoi, dict) or any(stoi.get(c) != i for i, c in enumerate(chars))):
        raise CheckpointError(f"{path.name}: 'stoi' and 'itos' disagree")
    try:
        return VocabTokenizer(chars, split="chars", name=f"{path.parent.name} characters")
    except TokenizerError as exc:
        raise CheckpointError(f"{path.name}: {exc}") from None


def read_ckpt(path: Path) -> dict[str, Any]:
    data = torch_load(path)
    if not isinstance(data, dict) or "model" not in data or "model_args" not in data:
        found = ", ".join(map(repr, list(data)[:8])) if isinstance(data, dict) else type(data).__name__
        raise CheckpointError(f"{path.name} is not a nanoGPT checkpoint: expected a dict with 'model' and "
                              f"'model_args' (found {found:.200})")
    return data


def nanogpt_config(args: Any, state: dict[str, torch.Tensor], source: str) -> ModelConfig:
    if not isinstance(args, dict):
        raise CheckpointError(f"{source}: 'model_args' should be a dict")

    def number(key: str) -> int:
        value = args.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise CheckpointError(f"{source}: model_args[{key!r}] should be a positive integer (got {value!r})")
        return value

    d, n_head = number("n_embd"), number("n_head")
    if d % n_head:
        raise CheckpointError(f"{source}: n_embd ({d}) is not a multiple of n_head ({n_head})")
    has_bias = "transformer.h.0.attn.c_attn.bias" in state
    bias = args.get("bias", has_bias)  # checkpoints older than the flag always had biases
    wte, head = state.get("transformer.wte.weight"), state.get("lm_head.weight")
    tied = head is None or wte is None or head is wte or (head.shape == wte.shape and torch.equal(head, wte))
    return ModelConfig(arch="nanogpt", vocab_size=number("vocab_size"), n_ctx=number("block_size"), d_model=d,
                       n_layers=number("n_layer"), n_heads=n_head, d_head=d // n_head, d_ff=4 * d,
                       norm="layernorm", norm_placement="pre", norm_eps=1e-5, positions="learned",
                       activation="gelu", attn_bias=bool(bias), mlp_bias=bool(bias), tie_embeddings=tied)


def convert_nanogpt(state: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """nanoGPT names -> ours; ``c_attn`` [3d, d] splits into W_Q, W_K, W_V; missing LayerNorm biases are zeros."""
    shapes = expected_shapes(cfg)
    sd = {k: v for k, v in state.items() if not k.endswith((".attn.bias", ".attn.masked_bias"))}  # causal masks
    t = Tensors(sd, "nanoGPT")
    d = cfg.d_model
    out = {"embed.weight": t.take("transformer.wte.weight", shapes["embed.weight"]),
           "pos_embed.weight": t.take("transformer.wpe.weight", shapes["pos_embed.weight"])}

    def norm(theirs: str, ours: str) -> None:
        out[ours + ".weight"] = t.take(theirs + ".weight", (d,))
        if theirs + ".bias" in t.sd or cfg.attn_bias:
            out[ours + ".bias"] = t.take(theirs + ".bias", (d,))
        else:  # LayerNorm(bias=False) is LayerNorm with a zero bias
            out[ours + ".bias"] = torch.zeros(d, dtype=out[ours + ".weight"].dtype)

    for i in range(cfg.n_layers):
        p, q = f"transformer.h.{i}.", f"blocks.{i}."
        norm(p + "ln_1", q + "ln1")
        norm(p + "ln_2", q + "ln2")
        w = t.take(p + "attn.c_attn.weight", (3 * d, d))
        b = t.take(p + "attn.c_attn.bias", (3 * d,)) if cfg.attn_bias else None
        for j, name in enumerate(("W_Q", "W_K", "W_V")):
            out[q + f"attn.{name}.weight"] = w[j * d:(j + 1) * d]
            if b is not None:
                out[q + f"attn.{name}.bias"] = b[j * d:(j + 1) * d]
        for theirs, ours in (("attn.c_proj", "attn.W_O"), ("mlp.c_fc", "mlp.W_in"), ("mlp.c_proj", "mlp.W_out")):
            out[q + ours + ".weight"] = t.take(p + theirs + ".weight", shapes[q + ours + ".weight"])
            if q + ours + ".bias" in shapes:
                out[q + ours + ".bias"] = t.take(p + theirs + ".bias", shapes[q + ours + ".bias"])
    norm("transformer.ln_f", "ln_final")
    out["unembed.weight"] = t.unembedding(out, cfg, shapes)
    t.finish()
    return out


def nanogpt_tokenizer(path: Path, vocab_size: int) -> tuple[Tokenizer, list[str]]:
    meta = path.parent / "meta.pkl"
    if meta.exists() or meta.is_symlink():  # read_plain_pickle refuses what is not a regular file
        tokenizer: Tokenizer = meta_tokenizer(meta)
        notes = [f"Vocabulary: the {tokenizer.vocab_size} characters in {meta.name}."]
    elif vocab_size >= 50257:
        tokenizer, notes = gpt2_tokenizer(), []
    else:
        raise CheckpointError(f"{path.name} has a {vocab_size}-token vocabulary and no meta.pkl beside it: "
                              "copy the dataset's meta.pkl (nanoGPT's data/<dataset>/meta.pkl) next to it")
    if tokenizer.vocab_size > vocab_size:
        raise CheckpointError(f"the vocabulary has {tokenizer.vocab_size} tokens but the model only {vocab_size}")
    return tokenizer, notes


def load_nanogpt(path: Path, device: str = "auto", dtype: str = "float32") -> LoadedModel:
    """A nanoGPT ``ckpt.pt`` as a ``LoadedModel`` (arch ``nanogpt``)."""
    path = Path(path)
    ctx = current_load()
    if ctx is not None:
        ctx.config_file = path
    ckpt = read_ckpt(path)
    state = ckpt["model"]
    if not isinstance(state, dict):
        raise CheckpointError(f"{path}: 'model' should be a state dict of tensors")
    state = {str(k).removeprefix(COMPILED_PREFIX): v for k, v in state.items()}
    bad = next((k for k, v in state.items() if not isinstance(v, torch.Tensor)), None)
    if bad is not None:
        raise CheckpointError(f"{path}: model entry {bad} is not a tensor")
    cfg = nanogpt_config(ckpt["model_args"], state, path)
    check_config(cfg)
    tokenizer, notes = nanogpt_tokenizer(path, cfg.vocab_size)
    del ckpt  # the optimizer's state (mapped, never read) goes with it
    check_headers(path, {k: tuple(v.shape) for k, v in state.items()})
    model = build_model(cfg, convert_nanogpt(convert_each(state), cfg), str(path))
    name = path.parent.name if path.stem == "ckpt" else path.stem
    return LoadedModel(finish(model, device, dtype), tokenizer, name, str(path), "nanogpt", notes=notes)
