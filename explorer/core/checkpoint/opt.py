"""Hugging Face OPT checkpoints (``model_type`` ``opt``) -> our ``Transformer``.

LayerNorm with biases, learned absolute positions, a plain ReLU FFN (``fc1``/``fc2``), a tied
un-embedding. Three things to know:

* OPT's position table has two extra rows at the start (``embed_positions`` is ``n_ctx + 2``
  long; position i reads row i + 2): the loader drops those two rows, so our row i is its row i + 2;
* ``do_layer_norm_before`` false (OPT-350m) is post-norm: each sublayer's sum is normalised, and
  there is no final norm;
* ``word_embed_proj_dim`` smaller than ``hidden_size`` (OPT-350m: 512 and 1024): token embeddings
  and the un-embedding live in the narrower space and ``project_in``/``project_out`` (no bias)
  map them to and from the residual stream (our ``d_embed``).
"""

from __future__ import annotations

from typing import Any

import torch

from explorer.core.checkpoint.convert import (
    Tensors,
    activation,
    expected_shapes,
    get_int,
)
from explorer.core.checkpoint.family import Family, layout_only
from explorer.core.config import ModelConfig
from explorer.core.errors import CheckpointError

FAMILY = "opt"
POSITION_OFFSET = 2  # OPT's learned positions start at row 2 of its table


def opt_config(hf: dict[str, Any]) -> tuple[ModelConfig, list[str]]:
    d, n_heads = get_int(hf, FAMILY, "hidden_size"), get_int(hf, FAMILY, "num_attention_heads")
    if n_heads <= 0 or d % n_heads:
        raise CheckpointError(f"{FAMILY}: hidden_size ({d}) is not a multiple of num_attention_heads ({n_heads})")
    if hf.get("layer_norm_elementwise_affine", True) is False:
        raise CheckpointError("this OPT checkpoint's LayerNorms have no weights (layer_norm_elementwise_affine "
                              "false), which is not supported")
    pre = bool(hf.get("do_layer_norm_before", True))
    d_embed = get_int(hf, FAMILY, "word_embed_proj_dim", d) if hf.get("word_embed_proj_dim") is not None else d
    bias = bool(hf.get("enable_bias", True))
    act = activation({"hidden_act": hf.get("activation_function", "relu")}, FAMILY, "relu")
    cfg = ModelConfig(
        arch=FAMILY, vocab_size=get_int(hf, FAMILY, "vocab_size"), n_ctx=get_int(hf, FAMILY, "max_position_embeddings", 2048),
        d_model=d, n_layers=get_int(hf, FAMILY, "num_hidden_layers"), n_heads=n_heads, d_head=d // n_heads,
        d_ff=get_int(hf, FAMILY, "ffn_dim"), norm="layernorm", norm_placement="pre" if pre else "post",
        norm_eps=1e-5, final_norm=pre and not hf.get("_remove_final_layer_norm", False), positions="learned",
        activation=act, attn_bias=bias, mlp_bias=bias,
        tie_embeddings=bool(hf.get("tie_word_embeddings", True)), d_embed=d_embed if d_embed != d else None)
    return cfg, []


def convert_opt(weights: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """OPT names -> ours; the first two rows of the position table are dropped (see the module docstring)."""
    shapes = expected_shapes(cfg)
    # facebook/opt-* files were saved from OPTModel ("decoder. ..."), OPTForCausalLM saves "model.decoder. ..."
    t = Tensors({("model." + k if k.startswith("decoder.") else k): v for k, v in weights.items()}, FAMILY)
    p = "model.decoder."
    out = {"embed.weight": t.take(p + "embed_tokens.weight", shapes["embed.weight"])}
    positions = t.take(p + "embed_positions.weight", (cfg.n_ctx + POSITION_OFFSET, cfg.d_model))
    out["pos_embed.weight"] = positions[POSITION_OFFSET:]
    if cfg.d_embed is not None:
        out["project_in.weight"] = t.take(p + "project_in.weight", shapes["project_in.weight"])
        out["project_out.weight"] = t.take(p + "project_out.weight", shapes["project_out.weight"])
    names = {"self_attn.q_proj": "attn.W_Q", "self_attn.k_proj": "attn.W_K", "self_attn.v_proj": "attn.W_V",
             "self_attn.out_proj": "attn.W_O", "fc1": "mlp.W_in", "fc2": "mlp.W_out",
             "self_attn_layer_norm": "ln1", "final_layer_norm": "ln2"}
    for i in range(cfg.n_layers):
        for theirs, ours in names.items():
            for kind in ("weight", "bias"):
                key = f"blocks.{i}.{ours}.{kind}"
                if key in shapes:
                    out[key] = t.take(p + f"layers.{i}.{theirs}.{kind}", shapes[key])
    if cfg.final_norm:
        for kind in ("weight", "bias"):
            out[f"ln_final.{kind}"] = t.take(p + f"final_layer_norm.{kind}", shapes[f"ln_final.{kind}"])
    out["unembed.weight"] = t.unembedding(out, cfg, shapes)
    t.finish()
    return out


FAMILIES = (Family("opt", FAMILY, opt_config, layout_only(convert_opt)),)
