"""A mixture of experts' configuration from GGUF metadata, as the family's ``config.json`` holds it.

llama.cpp writes a mixture of experts' shape as ``{arch}.expert_count`` (experts per MoE layer),
``expert_used_count`` (k), ``expert_feed_forward_length`` (each expert's width) and
``expert_shared_feed_forward_length`` (the shared expert's); how a family routes is not in the file but
fixed by its graph in llama.cpp (Qwen3-MoE renormalises the chosen experts' weights, Qwen2-MoE and OLMoE
do not, gpt-oss takes a softmax over the chosen logits), so it is the family's rule here too, as its
``transformers`` config defaults say (``expert_weights_norm``, where a file has it, overrides).

Per family (``moe_config`` fills the ``config.json`` keys the family's own config reader expects):

* ``qwen2moe`` / ``qwen3moe``: ``moe_intermediate_size``; Qwen2-MoE's shared expert
  (``shared_expert_intermediate_size``) and its q/k/v biases where the tensors have them; every layer is a
  mixture of experts (llama.cpp's qwen2moe/qwen3moe have no dense FFN tensors);
* ``olmoe``: every layer's experts, of width ``intermediate_size``; ``clip_qkv`` from ``attention.clamp_kqv``;
* a Llama file with expert banks: Mixtral (``num_local_experts``, experts of width ``intermediate_size``);
* ``gpt-oss``: ``num_local_experts``, ``intermediate_size`` (the experts' width), biases where the tensors
  have them, and its YaRN parameters as gpt-oss's config has them (``beta_fast`` 32, ``beta_slow`` 1, not
  truncated) unless the file says otherwise; sliding window on every other layer, from layer 0, as both
  llama.cpp and transformers run it.

``hf_shape``/``as_hf_shape`` undo the one shape llama.cpp squeezes: Qwen2-MoE's shared-expert gate [1, d] stored as [d].
``reference_gap`` says why ``transformers``' own GGUF loading does not give this file's model (``verify``).
"""

from __future__ import annotations

from typing import Any

from explorer.core.checkpoint.gguf_archs import Arch, meta
from explorer.core.checkpoint.gguf_validate import Header
from explorer.core.errors import CheckpointError

EXPERT_COUNT = {"mixtral": "num_local_experts", "gpt_oss": "num_local_experts", "qwen2_moe": "num_experts",
                "qwen3_moe": "num_experts", "olmoe": "num_experts"}
NORM_TOPK = {"mixtral": True, "qwen2_moe": False, "qwen3_moe": True, "olmoe": False}  # llama.cpp's graphs
GPT_OSS_YARN = {"beta_fast": 32.0, "beta_slow": 1.0, "truncate": False}


def moe_config(header: Header, arch: str, spec: Arch, hf: dict[str, Any]) -> None:
    """Add the mixture of experts' ``config.json`` keys to ``hf`` (see the module's description)."""
    family = spec.model_type
    names = {t.name for t in header.tensors}
    count = meta(header, f"{arch}.expert_count", int)
    used = meta(header, f"{arch}.expert_used_count", int)
    if not count or not used:
        raise CheckpointError(f"{header.path}: a {arch} file without {arch}.expert_count and {arch}.expert_used_count "
                              f"(got {count} and {used})")
    hf[EXPERT_COUNT[family]] = count
    hf["num_experts_per_tok"] = used
    width = meta(header, f"{arch}.expert_feed_forward_length", int)
    if family in NORM_TOPK:
        norm = meta(header, f"{arch}.expert_weights_norm", bool)
        hf["norm_topk_prob"] = NORM_TOPK[family] if norm is None else norm
    if family in ("qwen2_moe", "qwen3_moe"):
        if width is None:
            raise CheckpointError(f"{header.path}: a {arch} file without {arch}.expert_feed_forward_length")
        hf["moe_intermediate_size"] = width
        hf["mlp_only_layers"], hf["decoder_sparse_step"] = [], 1  # llama.cpp's qwen2moe/qwen3moe: every layer
    if family == "qwen2_moe":
        hf["shared_expert_intermediate_size"] = meta(header, f"{arch}.expert_shared_feed_forward_length", int, 0)
        hf["qkv_bias"] = "blk.0.attn_q.bias" in names
    if family in ("olmoe", "mixtral", "gpt_oss") and width is not None:
        hf["intermediate_size"] = width  # these families' config names the experts' width intermediate_size
    if family == "olmoe":
        clip = meta(header, f"{arch}.attention.clamp_kqv", float)
        if clip is not None:
            hf["clip_qkv"] = clip
    if family == "gpt_oss":
        hf["attention_bias"] = "blk.0.attn_q.bias" in names
        scaling = hf.get("rope_scaling")
        if scaling is not None and scaling.get("rope_type") == "yarn":
            for key, default in GPT_OSS_YARN.items():
                value = meta(header, f"{arch}.rope.scaling.yarn_{key}", float) if key != "truncate" else None
                scaling[key] = default if value is None else value


def hf_shape(name: str, shape: tuple[int, ...]) -> tuple[int, ...]:
    """A tensor's shape in the Hugging Face checkpoint (llama.cpp squeezes Qwen2-MoE's [1, d] shared-expert gate)."""
    return (1, *shape) if name.endswith(".ffn_gate_inp_shexp.weight") and len(shape) == 1 else tuple(shape)


def as_hf_shape(name: str, tensor: Any) -> Any:
    """``tensor`` in the shape ``hf_shape`` gives."""
    shape = hf_shape(name, tuple(tensor.shape))
    return tensor if shape == tuple(tensor.shape) else tensor.reshape(shape)


def reference_gap(arch: str, spec: Arch, hf: dict[str, Any]) -> str:
    """Why transformers' GGUF loading does not give this mixture of experts' model ("" where it does)."""
    instead = "so its model is not this file's; verify the Hugging Face directory instead"
    if spec.model_type == "mixtral":
        return f"transformers' GGUF loading reads a Llama file with expert banks as a dense Llama, {instead}"
    if spec.model_type == "gpt_oss":
        return ("transformers' GGUF loading does not read llama.cpp's gpt-oss expert banks (ffn_gate_exps, "
                f"ffn_up_exps), {instead}")
    if spec.model_type in ("qwen2_moe", "qwen3_moe"):
        import transformers

        config = getattr(transformers, "Qwen2MoeConfig" if spec.model_type == "qwen2_moe" else "Qwen3MoeConfig")()
        for key in ("moe_intermediate_size", "shared_expert_intermediate_size"):
            if key in hf and hf[key] != getattr(config, key, hf[key]):
                return (f"transformers' GGUF loading does not read the experts' widths ({arch}.expert_feed_forward_"
                        f"length and the shared one): it takes its default {key} {getattr(config, key)} where this "
                        f"file has {hf[key]}, {instead}")
    return ""
