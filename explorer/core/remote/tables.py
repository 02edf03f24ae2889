"""Per-family tables: where each Trace key of the compact set lives in a ``transformers`` model.

nnsight reaches a value two ways: a module's input or output (``model.layers[3].input`` is the
residual stream entering block 3), and an operation inside a module's ``forward`` through
``.source`` (print ``module.source`` to list them). The operation names come from each family's
transformers source, so they are pinned to the transformers version the tests run
(``PINNED_TRANSFORMERS``); ``tests/core/test_remote.py`` checks every row against this project's own
forward pass. In every family below the eager attention call is
``attention_interface(self, query_states, key_states, value_states, attention_mask, ...)``:
its inputs are q and k after the rotary turn and v, per head, as this project records them.

| Trace key | where |
|---|---|
| ``blocks.{l}.resid_pre`` | ``{layers}[l].input`` |
| ``blocks.{l}.attn.q``, ``.k``, ``.v`` | ``{layers}[l].{attention}.source.{attention_op}.inputs`` (args 1, 2, 3) |
| ``resid_final`` | ``{final_norm}.input`` |
| last position's logits | the model's output ``.logits[0, -1]`` (after Gemma 2's soft cap) |
| on demand: ``blocks.{l}.mlp.post`` | ``{layers}[l].{mlp_out}.input`` (the FFN's down projection's input) |
| on demand: the lens at block l | ``{unembed}({final_norm}({layers}[l].input))``, top k on the server |
"""

from __future__ import annotations

from dataclasses import dataclass

PINNED_TRANSFORMERS = "5.23"  # the version whose source the operation names were read from


@dataclass(frozen=True)
class Family:
    layers: str          # the list of blocks, as attributes from the nnsight model
    attention: str       # the attention module inside a block
    attention_op: str    # the eager attention call inside the attention module's forward (.source)
    final_norm: str      # the norm after the last block: its input is resid_final
    mlp_out: str         # the FFN's output projection inside a block: its input is mlp.post
    unembed: str = "lm_head"


_DECODER = Family(layers="model.layers", attention="self_attn", attention_op="attention_interface_1",
                  final_norm="model.norm", mlp_out="mlp.down_proj")

FAMILIES: dict[str, Family] = {
    "llama": _DECODER,
    "mistral": _DECODER,
    "qwen2": _DECODER,
    "qwen3": _DECODER,
    "gemma2": _DECODER,
    "gpt2": Family(layers="transformer.h", attention="attn", attention_op="attention_interface_1",
                   final_norm="transformer.ln_f", mlp_out="mlp.c_proj"),
}


def our_config(model_type: str, hf: dict):
    """This project's ModelConfig for a Hugging Face config.json (the model-less Trace needs it to derive patterns)."""
    from explorer.core.checkpoint.families import FAMILIES

    return FAMILIES[model_type].config(hf)[0]
