"""Hugging Face OLMo and OLMo 2 checkpoints -> our ``Transformer``.

Llama's layout (rotary, SwiGLU, grouped-query attention) with:

* OLMo: LayerNorm without weight or bias (``norm_affine`` off, eps 1e-5 as transformers fixes
  it), and, where ``clip_qkv`` is set, q, k and v clamped to [-clip, clip] after projection;
* OLMo 2: RMSNorm *after* each sublayer instead of before (``norm_placement="output"``:
  ``x + norm(attn(x))``, then ``x + norm(mlp(x))``) and an RMSNorm of q and of k over all heads
  at once (``q_norm`` of H * d_head numbers) before they are split into heads.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from explorer.core.checkpoint.convert import get_bool, number
from explorer.core.checkpoint.llama import LLAMA_NAMES, llama_config, llama_family
from explorer.core.config import ModelConfig

OLMO2_NAMES = {**LLAMA_NAMES, "post_attention_layernorm": "ln1_out", "post_feedforward_layernorm": "ln2_out"}


def olmo_config(hf: dict[str, Any], family: str) -> tuple[ModelConfig, list[str]]:
    base, notes = llama_config(hf, family)
    bias = get_bool(hf, family, "attention_bias", False)
    if family == "olmo":
        cfg = dataclasses.replace(base, arch=family, norm="layernorm", norm_affine=False, norm_eps=1e-5,
                                  attn_bias=bias, qkv_clip=number(hf, family, "clip_qkv"))
    else:
        cfg = dataclasses.replace(base, arch=family, norm_placement="output", qk_norm="full", attn_bias=bias)
    return cfg, notes


FAMILIES = (llama_family("olmo", lambda hf: olmo_config(hf, "olmo"), LLAMA_NAMES),
            llama_family("olmo2", lambda hf: olmo_config(hf, "olmo2"), OLMO2_NAMES))
