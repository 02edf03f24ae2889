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

Mixtures of experts (Mixtral, gpt-oss) add, for each MoE layer, the router module's output
``{layers}[l].{router}.output``: (router logits [n, E], the chosen experts' weights [n, k], the chosen
experts [n, k], best first) -> ``blocks.{l}.moe.router_logits``, ``.weights``, ``.experts``; the router's
scores over every expert (``moe.probs``) follow from the logits by the family's rule (core/moe.py). gpt-oss's
sinks are the eager call's ``s_aux`` keyword (``blocks.{l}.attn.sinks``), so its patterns derive with them.
What nnsight cannot reach there is said in one line (``Family.unavailable``): transformers runs every expert
of a layer in one fused module behind a dispatcher, so each chosen expert's own output (``moe.expert_out``)
and the FFN's neurons (``mlp.post``) have no module or operation to read; trace locally for them.
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
    mlp_out: str | None  # the FFN's output projection inside a block: its input is mlp.post (None: experts)
    unembed: str = "lm_head"
    router: str | None = None  # a mixture of experts' router inside a block: (logits, weights, experts)
    sinks: bool = False        # the eager call's s_aux keyword holds each head's sink logit (gpt-oss)
    unavailable: str = ""      # what this family's Trace cannot get through nnsight, in one line


_EXPERTS = ("through nnsight: the router's logits, each token's experts and their weights; not each chosen "
            "expert's output nor the FFN's neurons (transformers runs the experts in one fused module): trace "
            "locally for those")
_DECODER = Family(layers="model.layers", attention="self_attn", attention_op="attention_interface_1",
                  final_norm="model.norm", mlp_out="mlp.down_proj")

FAMILIES: dict[str, Family] = {
    "llama": _DECODER,
    "mistral": _DECODER,
    "qwen2": _DECODER,
    "qwen3": _DECODER,
    "gemma2": _DECODER,
    "mixtral": Family(layers="model.layers", attention="self_attn", attention_op="attention_interface_1",
                      final_norm="model.norm", mlp_out=None, router="mlp.gate", unavailable=_EXPERTS),
    "gpt_oss": Family(layers="model.layers", attention="self_attn", attention_op="attention_interface_1",
                      final_norm="model.norm", mlp_out=None, router="mlp.router", sinks=True, unavailable=_EXPERTS),
    "gpt2": Family(layers="transformer.h", attention="attn", attention_op="attention_interface_1",
                   final_norm="transformer.ln_f", mlp_out="mlp.c_proj"),
}


def our_config(model_type: str, hf: dict):
    """This project's ModelConfig for a Hugging Face config.json (the model-less Trace needs it to derive patterns)."""
    from explorer.core.checkpoint.families import FAMILIES

    return FAMILIES[model_type].config(hf)[0]
