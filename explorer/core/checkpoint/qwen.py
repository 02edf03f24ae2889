"""Hugging Face Qwen2 / Qwen2.5 and Qwen3 checkpoints -> our ``Transformer``.

Llama's layout with:

* Qwen2: biases on the q, k and v projections but none on the output projection (``attn_bias``
  with ``attn_out_bias`` off);
* Qwen3: no projection biases unless ``attention_bias``, and an RMSNorm of each head's q and k over
  its d_head numbers (``q_norm``, ``k_norm``, one weight shared by the heads) before the rotary turn;
* both: an optional sliding window (``use_sliding_window``; off in the released checkpoints) on
  the layers from ``max_window_layers`` on, or as ``layer_types`` says.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from explorer.core.checkpoint.convert import get_bool, get_int, sliding_layers, window
from explorer.core.checkpoint.llama import llama_config, llama_family
from explorer.core.config import ModelConfig


def qwen_config(hf: dict[str, Any], family: str) -> tuple[ModelConfig, list[str]]:
    base, notes = llama_config(hf, family)
    slide = window(hf, family) if hf.get("use_sliding_window", False) else None
    first = get_int(hf, family, "max_window_layers", base.n_layers)
    layers = sliding_layers(hf, family, base.n_layers, lambda i: i >= first) if slide else ()
    if slide and layers:
        notes.append(f"{len(layers)} of {base.n_layers} layers attend within a sliding window of {slide} tokens.")
    if family == "qwen2":
        switches: dict[str, Any] = dict(attn_bias=True, attn_out_bias=False)
    else:
        switches = dict(attn_bias=get_bool(hf, family, "attention_bias", False), qk_norm="head")
    return dataclasses.replace(base, arch=family, sliding_window=slide if layers else None, sliding_layers=layers,
                               **switches), notes


FAMILIES = (llama_family("qwen2", lambda hf: qwen_config(hf, "qwen2")),
            llama_family("qwen3", lambda hf: qwen_config(hf, "qwen3")))
