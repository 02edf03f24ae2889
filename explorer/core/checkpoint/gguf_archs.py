"""Each GGUF ``general.architecture`` read here, as the Hugging Face family it was converted from.

An ``Arch`` names the family's Hugging Face ``model_type``, the Hugging Face tensor names inside a block
and at the top (mapped to GGUF names through ``gguf``'s own name map, ``gguf_config.name_map``) and what
llama.cpp changed when converting (q/k rows permuted, Gemma's norms stored as 1 + w). ``architecture``
picks the record for a file: a Llama file whose tensors include expert banks (``ffn_gate_exps``) is a
Mixtral-style mixture of experts, a Falcon file with ``attn_norm_2`` the Falcon-40B/180B decoder.

The mixtures of experts (qwen2moe, qwen3moe, olmoe, gpt-oss, Llama files with experts) store each
layer's experts as three 3-D banks, ``ffn_gate_exps`` and ``ffn_up_exps`` [experts, d_expert, d_model]
and ``ffn_down_exps`` [experts, d_model, d_expert], named here as Hugging Face's stacked
``mlp.experts.gate_proj`` / ``up_proj`` / ``down_proj`` (``checkpoint/experts.py`` takes them as they
are, so a bank kept quantised stays one ``Packed`` tensor). Their metadata is read in ``gguf_moe``.

A new GGUF family is one record here (and its metadata keys in ``gguf_config``/``gguf_moe``). ``LATER``
lists the architectures known to come with other work (gemma4 and qwen35 with the hybrid families), so
such a file is refused with that reason rather than as unknown.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from explorer.core.checkpoint.gguf_validate import Header
from explorer.core.errors import CheckpointError

LLAMA_LAYER = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
               "mlp.up_proj", "mlp.down_proj", "input_layernorm", "post_attention_layernorm")
QK_NORM = ("self_attn.q_norm", "self_attn.k_norm")
SANDWICH = ("pre_feedforward_layernorm", "post_feedforward_layernorm")
LLAMA_TOP = ("model.embed_tokens", "model.norm", "lm_head")
# a mixture of experts as llama.cpp stores it: the router and three stacked banks (gate, up, down)
MOE = ("mlp.gate", "mlp.experts.gate_proj", "mlp.experts.up_proj", "mlp.experts.down_proj")
SHARED = ("mlp.shared_expert.gate_proj", "mlp.shared_expert.up_proj", "mlp.shared_expert.down_proj",
          "mlp.shared_expert_gate")
GPT_OSS_LAYER = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "self_attn.sinks",
                 "input_layernorm", "post_attention_layernorm", "mlp.router", *MOE[1:])


@dataclass(frozen=True)
class Arch:
    """How one GGUF ``general.architecture`` maps onto a Hugging Face family."""

    model_type: str
    layer: tuple[str, ...] = LLAMA_LAYER  # Hugging Face names inside block i (without .weight/.bias)
    top: tuple[str, ...] = LLAMA_TOP
    prefix: str = "model.layers.{i}."
    permuted_qk: bool = False  # llama.cpp interleaved the rotary halves of q and k rows
    norm_plus_one: bool = False  # llama.cpp stored Gemma's norm weights as 1 + w
    extra: dict[str, Any] = field(default_factory=dict)  # config.json values the metadata does not carry
    bare: tuple[str, ...] = ()  # Hugging Face names that are a tensor themselves (no .weight): gpt-oss's sinks
    moe: bool = False  # its blocks hold expert banks (metadata read by gguf_moe.moe_config)


ARCHS: dict[str, Arch] = {
    "llama": Arch("llama", permuted_qk=True),
    "qwen2": Arch("qwen2", extra={"use_sliding_window": False}),
    "qwen3": Arch("qwen3", LLAMA_LAYER + QK_NORM, extra={"use_sliding_window": False}),
    "gemma2": Arch("gemma2", LLAMA_LAYER + SANDWICH, ("model.embed_tokens", "model.norm"), norm_plus_one=True),
    "gemma3": Arch("gemma3_text", LLAMA_LAYER + SANDWICH + QK_NORM, ("model.embed_tokens", "model.norm"),
                   norm_plus_one=True),
    "phi3": Arch("phi3", ("self_attn.qkv_proj", "self_attn.o_proj", "mlp.gate_up_proj", "mlp.down_proj",
                          "input_layernorm", "post_attention_layernorm")),
    "stablelm": Arch("stablelm"),
    "falcon": Arch("falcon", ("input_layernorm", "self_attention.query_key_value", "self_attention.dense",
                              "mlp.dense_h_to_4h", "mlp.dense_4h_to_h"),
                   ("transformer.word_embeddings", "transformer.ln_f", "lm_head"), "transformer.h.{i}.",
                   extra={"parallel_attn": True, "alibi": False}),
    "gpt2": Arch("gpt2", ("ln_1", "attn.c_attn", "attn.c_proj", "ln_2", "mlp.c_fc", "mlp.c_proj"),
                 ("transformer.wte", "transformer.wpe", "transformer.ln_f", "lm_head"), "transformer.h.{i}.",
                 extra={"activation_function": "gelu_new"}),
    # mixtures of experts (metadata: gguf_moe); dense layers of a mostly-MoE model keep Llama's FFN names
    "qwen2moe": Arch("qwen2_moe", LLAMA_LAYER + MOE + SHARED, extra={"use_sliding_window": False}, moe=True),
    "qwen3moe": Arch("qwen3_moe", LLAMA_LAYER + QK_NORM + MOE, extra={"use_sliding_window": False}, moe=True),
    "olmoe": Arch("olmoe", LLAMA_LAYER + QK_NORM + MOE, moe=True),
    "gpt-oss": Arch("gpt_oss", GPT_OSS_LAYER, bare=("self_attn.sinks",), moe=True),
}

FALCON_NEW = Arch("falcon", ("ln_attn", "ln_mlp", *ARCHS["falcon"].layer[1:]), ARCHS["falcon"].top,
                  ARCHS["falcon"].prefix, extra={**ARCHS["falcon"].extra, "new_decoder_architecture": True})
# a Llama file with expert banks: Mixtral (llama.cpp writes Mixtral and its fine-tunes as "llama")
MIXTRAL = Arch("mixtral", LLAMA_LAYER + MOE, permuted_qk=True, moe=True)

# architectures that other work adds (the hook: a record in ARCHS, its metadata in gguf_config/gguf_moe)
LATER = {"gemma4": "Gemma 4 (with the hybrid families: sliding/global layers and its MoE)",
         "qwen35": "Qwen3.5 (with the hybrid families: gated DeltaNet layers)",
         "qwen35moe": "Qwen3.5-MoE (with the hybrid families: gated DeltaNet layers)"}


def meta(header: Header, key: str, kind: type, default: Any = None) -> Any:
    """A metadata value, type-checked (named by its GGUF key when wrong); ``default`` when absent."""
    value = header.metadata.get(key, default)
    if value is None:
        return None
    ok = (isinstance(value, int) and not isinstance(value, bool)) if kind is int else \
        (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)) if kind is float \
        else isinstance(value, kind)
    if not ok:
        what = "an integer" if kind is int else "a finite number" if kind is float else "text"
        raise CheckpointError(f"{header.path}: GGUF metadata {key} should be {what} (got {value!r:.60})")
    return float(value) if kind is float else value


def architecture(header: Header) -> tuple[str, Arch]:
    arch = meta(header, "general.architecture", str)
    if arch is None:
        raise CheckpointError(f"{header.path}: the GGUF file names no general.architecture")
    if arch in LATER:
        raise CheckpointError(f"{header.path}: GGUF architecture {arch!r} is not read yet: {LATER[arch]} "
                              "comes with a later version")
    if arch not in ARCHS:
        raise CheckpointError(f"{header.path}: GGUF architecture {arch!r:.60} is not supported; supported: "
                              + ", ".join(ARCHS))
    names = {t.name for t in header.tensors}
    if arch == "falcon" and "blk.0.attn_norm_2.weight" in names:
        return arch, FALCON_NEW  # Falcon-40B/180B's decoder: a norm for attention and one for the MLP
    if arch == "llama" and any(name.endswith(".ffn_gate_exps.weight") for name in names):
        return arch, MIXTRAL
    return arch, ARCHS[arch]
