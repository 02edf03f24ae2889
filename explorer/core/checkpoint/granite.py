"""Hugging Face Granite (IBM Granite 3.x) checkpoints -> our ``Transformer``.

Llama's layout with four multipliers from config.json: the embedding rows times
``embedding_multiplier`` (``embed_scale``), scores q.k times ``attention_multiplier`` instead of
1/sqrt(d_head) (``attn_scale``), each sublayer's output times ``residual_multiplier`` before it is
added to the residual stream (``residual_scale``), and the logits divided by ``logits_scaling``
(``logit_scale`` = its inverse).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from explorer.core.checkpoint.convert import get_bool, number
from explorer.core.checkpoint.llama import llama_config, llama_family
from explorer.core.config import ModelConfig


def granite_config(hf: dict[str, Any], family: str = "granite") -> tuple[ModelConfig, list[str]]:
    base, notes = llama_config(hf, family)
    cfg = dataclasses.replace(
        base, arch=family, attn_bias=get_bool(hf, family, "attention_bias", False), mlp_bias=get_bool(hf, family, "mlp_bias", False),
        embed_scale=number(hf, family, "embedding_multiplier", 1.0),
        attn_scale=number(hf, family, "attention_multiplier", 1.0),
        residual_scale=number(hf, family, "residual_multiplier", 1.0),
        logit_scale=1.0 / number(hf, family, "logits_scaling", 1.0))
    return cfg, notes


FAMILIES = (llama_family("granite", granite_config),)
