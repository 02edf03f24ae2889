"""Writing tiny mixture-of-experts GGUF files at test time, as llama.cpp's ``convert_hf_to_gguf.py`` lays them out.

``write_moe_model`` takes a ``transformers`` MoE model (Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE, gpt-oss) and writes
it as llama.cpp's converter does: the shared metadata of ``gguf_files.metadata`` plus ``{arch}.expert_count``,
``expert_used_count``, ``expert_feed_forward_length`` (and the shared expert's); each layer's experts as three
3-D banks ``ffn_gate_exps`` / ``ffn_up_exps`` [E, f, d] and ``ffn_down_exps`` [E, d, f] (transformers' fused
``gate_up_proj`` split, gpt-oss's interleaved and transposed one de-interleaved, as its converter does), the
banks in ``expert_type`` (MXFP4 for gpt-oss as its files hold them; a K-quant as random blocks), the router
(``ffn_gate_inp``), norms, biases and sinks in F32, the other matrices in ``qtype``; Mixtral as a ``llama``
file (its q/k rows permuted); Qwen2-MoE's [1, d] shared-expert gate squeezed to [d].

``settle_experts`` first replaces the model's expert weights with the numbers their blocks will stand for (and
checks that quantising those again gives the same blocks), so the model is the reference for the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gguf
import numpy as np
import torch
from gguf import GGMLQuantizationType as Q
from gguf_files import F16_SCALES, _arch_id, _permute, byte_vocabulary, metadata, random_blocks, tokenizer_fields

ARCH = {"mixtral": "llama", "qwen2_moe": "qwen2moe", "qwen3_moe": "qwen3moe", "olmoe": "olmoe",
        "gpt_oss": "gpt-oss"}
F32_NAMES = (".ffn_gate_inp.weight", ".attn_sinks.weight")  # llama.cpp keeps the router and the sinks in F32


def _gpt_oss(model: Any) -> bool:
    return model.config.model_type == "gpt_oss"


def _round_trip(x: np.ndarray, qtype: str) -> np.ndarray:
    return gguf.quants.dequantize(gguf.quants.quantize(x, Q[qtype]), Q[qtype]).reshape(x.shape)


def settle_experts(model: Any, qtype: str) -> None:
    """The model's expert banks become the numbers their ``qtype`` blocks stand for (the file's weights)."""
    if qtype == "F32" or qtype in F16_SCALES:
        return
    transposed = _gpt_oss(model)  # gpt-oss stores [E, in, out]; the file's rows run along `in`
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("experts.gate_up_proj", "experts.down_proj")):
                x = (p.transpose(1, 2) if transposed else p).detach().contiguous().numpy()
                back = _round_trip(x, qtype)
                assert np.array_equal(_round_trip(back, qtype), back), name  # quantising again: the same blocks
                t = torch.from_numpy(back)
                p.copy_(t.transpose(1, 2) if transposed else t)


def _banks(sd: dict[str, torch.Tensor], model: Any) -> dict[str, np.ndarray]:
    """transformers' fused expert tensors -> llama.cpp's stacked banks, under Hugging Face's stacked names."""
    out: dict[str, np.ndarray] = {}
    gpt_oss = _gpt_oss(model)
    for name in list(sd):
        base, _, leaf = name.rpartition(".")
        if leaf not in ("gate_up_proj", "down_proj", "gate_up_proj_bias", "down_proj_bias") or \
                not base.endswith(".experts"):
            continue
        t = sd.pop(name).detach().float()
        if leaf == "gate_up_proj":
            t = t.transpose(1, 2) if gpt_oss else t                             # -> [E, 2f, d]
            f = t.shape[1] // 2
            gate, up = (t[:, 0::2], t[:, 1::2]) if gpt_oss else (t[:, :f], t[:, f:])
            out[f"{base}.gate_proj.weight"], out[f"{base}.up_proj.weight"] = gate, up
        elif leaf == "down_proj":
            out[f"{base}.down_proj.weight"] = t.transpose(1, 2) if gpt_oss else t  # -> [E, d, f]
        elif leaf == "gate_up_proj_bias":
            out[f"{base}.gate_proj.bias"], out[f"{base}.up_proj.bias"] = t[:, 0::2], t[:, 1::2]
        else:
            out[f"{base}.down_proj.bias"] = t
    return {k: np.ascontiguousarray(v.numpy()) for k, v in out.items()}


def _add(w: gguf.GGUFWriter, name: str, data: np.ndarray, qtype: str) -> None:
    data = np.ascontiguousarray(data, dtype=np.float32)
    if data.ndim < 2 or name.endswith(F32_NAMES) or name.endswith(".bias") or qtype == "F32":
        w.add_tensor(name, data)
    elif qtype == "F16":
        w.add_tensor(name, data.astype(np.float16))
    elif qtype in F16_SCALES:
        w.add_tensor(name, random_blocks(data.shape, qtype, len(name) * 7 + data.size), raw_dtype=Q[qtype])
    else:
        w.add_tensor(name, gguf.quants.quantize(data, Q[qtype]), raw_dtype=Q[qtype])


def moe_metadata(w: gguf.GGUFWriter, arch: str, c: Any) -> None:
    metadata(w, arch, c)
    family = c.model_type
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    if family in ("qwen3_moe", "gpt_oss") and head_dim == c.hidden_size // c.num_attention_heads:
        w.add_key_length(head_dim)  # llama.cpp's converter writes the configured head_dim
        w.add_value_length(head_dim)
    w.add_expert_count(getattr(c, "num_local_experts", None) or c.num_experts)
    w.add_expert_used_count(c.num_experts_per_tok)
    if family in ("qwen2_moe", "qwen3_moe"):
        w.add_expert_feed_forward_length(c.moe_intermediate_size)
    if family == "qwen2_moe":
        w.add_expert_shared_feed_forward_length(c.shared_expert_intermediate_size)
    if family in ("gpt_oss", "olmoe"):
        w.add_expert_feed_forward_length(c.intermediate_size)
    if family == "gpt_oss":
        w.add_sliding_window(c.sliding_window)
    if family == "olmoe" and getattr(c, "clip_qkv", None):
        w.add_clamp_kqv(c.clip_qkv)


def write_moe_model(model: Any, path: Path, qtype: str = "F32", expert_type: str | None = None,
                    tokenizer: dict[str, Any] | None = None) -> Path:
    """``model`` (a transformers MoE model) as llama.cpp's GGUF file at ``path`` (see the module's description)."""
    c = model.config
    arch = ARCH[c.model_type]
    w = gguf.GGUFWriter(str(path), arch)
    moe_metadata(w, arch, c)
    tokenizer_fields(w, tokenizer or byte_vocabulary(c.vocab_size))
    names = gguf.get_tensor_name_map(_arch_id(arch), c.num_hidden_layers)
    heads, kv = c.num_attention_heads, getattr(c, "num_key_value_heads", None) or c.num_attention_heads
    sd = dict(model.state_dict())
    if getattr(c, "tie_word_embeddings", False):
        sd.pop("lm_head.weight", None)
    banks = _banks(sd, model)  # takes the fused expert tensors out of sd
    tensors = {**{k: v.detach().float().numpy() for k, v in sd.items() if not k.endswith("inv_freq")}, **banks}
    for hf_name, data in tensors.items():
        if not hf_name.endswith((".weight", ".bias")):
            hf_name += ".weight"                                               # gpt-oss's sinks
        base, _, kind = hf_name.rpartition(".")
        gguf_name = names.get_name(base)
        assert gguf_name is not None, hf_name
        if arch == "llama" and gguf_name.endswith((".attn_q", ".attn_k")):
            data = _permute(data, heads if gguf_name.endswith(".attn_q") else kv)
        if gguf_name.endswith(".ffn_gate_inp_shexp"):
            data = data.reshape(-1)                                            # llama.cpp squeezes [1, d]
        banked = gguf_name.endswith("_exps") and kind == "weight"
        _add(w, f"{gguf_name}.{kind}", data, (expert_type or qtype) if banked else qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
