"""Labels for rows and columns of what the panels and exports show."""

from __future__ import annotations

from collections.abc import Sequence

from explorer.core.config import ModelConfig


def token_labels(tokens: Sequence[str]) -> list[str]:
    """``position:token`` labels, unique even when a token repeats."""
    return [f"{i}:{t}" for i, t in enumerate(tokens)]


def scores_formula(config: ModelConfig, layer: int) -> str:
    """What a layer's attention scores are, as the scores view titles them: the scale, ALiBi's bias
    (BLOOM, Falcon-RW), a soft cap (Gemma 2) and a sliding window (local layers) differ between models."""
    scale = "q\u00b7k/\u221ad_head" if config.attn_scale is None else (
        "q\u00b7k" if config.attn_scale == 1.0 else f"q\u00b7k\u00d7{config.attn_scale:.3g}")
    text = f"scores {scale}" + (" + ALiBi bias" if config.alibi else "")
    if config.attn_softcap:
        text += f", capped at \u00b1{config.attn_softcap:g}"
    plan = config.layer(layer)
    if plan.attention == "sliding":
        text += f", sliding window {plan.window}"
    elif plan.attention == "chunked":
        text += f", within chunks of {plan.window}"
    if config.attn_sinks:
        text += ", with a sink per head"
    return text
