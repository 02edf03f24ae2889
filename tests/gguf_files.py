"""Writing tiny GGUF files at test time, as llama.cpp's ``convert_hf_to_gguf.py`` lays them out.

``write_model`` takes a ``transformers`` model and writes its configuration as ``{arch}.*``
metadata and its tensors under GGUF names (``gguf``'s name map), changed as llama.cpp changes them:
Llama's q/k rows permuted, Gemma's norm weights stored as 1 + w, GPT-2's Conv1D weights
transposed; 2-D weights in the chosen type (F32, F16, BF16, Q8_0, Q5_0, Q4_0, MXFP4; a K-quant or IQ4 type as
random blocks of the tensor's shape, which gguf cannot quantise into), 1-D ones in F32.
``tokenizer_fields`` adds a ``tokenizer.ggml.*`` vocabulary.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gguf
import numpy as np
import torch
from gguf import GGMLQuantizationType as Q

LLAMA_PERMUTED = ("llama",)
GEMMA = ("gemma2", "gemma3")
TOKEN_TYPES = {"normal": 1, "unknown": 2, "control": 3, "user": 4, "byte": 6}


def _falcon_qkv(w: np.ndarray, c: Any) -> np.ndarray:
    """llama.cpp's FalconModel: each K/V group's q heads, k and v -> every q head, then every k, then every v."""
    heads, kv = c.num_attention_heads, (c.num_kv_heads if c.new_decoder_architecture else 1)
    dh = c.hidden_size // heads
    qkv = w.reshape(kv, heads // kv + 2, dh, *w.shape[1:])
    q = qkv[:, :-2].reshape(heads * dh, *w.shape[1:])
    return np.concatenate([q, qkv[:, -2].reshape(kv * dh, *w.shape[1:]), qkv[:, -1].reshape(kv * dh, *w.shape[1:])])


def _permute(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's LlamaModel.permute: each head's rotary halves interleaved row-wise."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _arch_id(arch: str) -> Any:
    return next(k for k, v in gguf.MODEL_ARCH_NAMES.items() if v == arch)


def metadata(w: gguf.GGUFWriter, arch: str, c: Any) -> None:
    w.add_name(f"tiny-{arch}")
    if arch == "gpt2":
        w.add_context_length(c.n_positions)
        w.add_embedding_length(c.n_embd)
        w.add_feed_forward_length(c.n_inner or 4 * c.n_embd)
        w.add_block_count(c.n_layer)
        w.add_head_count(c.n_head)
        w.add_layer_norm_eps(c.layer_norm_epsilon)
        w.add_vocab_size(c.vocab_size)
        return
    if arch == "falcon":
        w.add_context_length(c.max_position_embeddings)
        w.add_embedding_length(c.hidden_size)
        w.add_feed_forward_length(c.ffn_hidden_size or 4 * c.hidden_size)
        w.add_block_count(c.num_hidden_layers)
        w.add_head_count(c.num_attention_heads)
        w.add_head_count_kv(c.num_kv_heads if c.new_decoder_architecture else 1)
        w.add_layer_norm_eps(c.layer_norm_epsilon)
        w.add_vocab_size(c.vocab_size)
        return
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_block_count(c.num_hidden_layers)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(getattr(c, "num_key_value_heads", None) or c.num_attention_heads)
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    theta = (getattr(c, "rope_parameters", None) or {}).get("rope_theta") or getattr(c, "rope_theta", 10000.0)
    w.add_rope_freq_base(float(theta))
    w.add_vocab_size(c.vocab_size)
    if arch == "stablelm":
        w.add_layer_norm_eps(c.layer_norm_eps)
        partial = (getattr(c, "rope_parameters", None) or {}).get("partial_rotary_factor") or c.partial_rotary_factor
        w.add_rope_dimension_count(int(partial * head_dim))
        return
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_rope_dimension_count(head_dim)
    scaling = getattr(c, "rope_parameters", None) or {}
    if scaling.get("rope_type") in ("linear", "yarn"):
        w.add_rope_scaling_type(gguf.RopeScalingType(scaling["rope_type"]))
        w.add_rope_scaling_factor(scaling["factor"])
        if scaling.get("original_max_position_embeddings"):
            w.add_rope_scaling_orig_ctx_len(scaling["original_max_position_embeddings"])
    if arch == "phi3" and scaling.get("rope_type") == "longrope":
        w.add_uint32("phi3.rope.scaling.original_context_length", c.original_max_position_embeddings)
    if arch == "phi3" and getattr(c, "sliding_window", None):
        w.add_sliding_window(c.sliding_window)
    if arch in ("qwen3", "gemma2", "gemma3") or head_dim != c.hidden_size // c.num_attention_heads:
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    if arch in GEMMA:
        if getattr(c, "sliding_window", None):
            w.add_sliding_window(c.sliding_window)
        if arch == "gemma2":
            w.add_attn_logit_softcapping(c.attn_logit_softcapping)
            w.add_final_logit_softcapping(c.final_logit_softcapping)


# byte offsets of the float16 scales in a block of the types gguf cannot write (random_blocks sets them)
F16_SCALES = {"Q2_K": (80, 82), "Q3_K": (108,), "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,), "IQ4_NL": (0,),
              "IQ4_XS": (0,)}


def random_blocks(shape: tuple[int, ...], qtype: str, seed: int, scale: float = 1e-3) -> np.ndarray:
    """Random blocks of a type gguf cannot quantise into, their float16 scales small ordinary numbers
    (the weights they hold are random: a file to compare two ways of loading it, not a model)."""
    block, nbytes = gguf.GGML_QUANT_SIZES[Q[qtype]]
    n = int(np.prod(shape)) // block
    gen = np.random.default_rng(seed)
    raw = gen.integers(0, 256, size=(n, nbytes), dtype=np.uint8)
    for at in F16_SCALES[qtype]:
        raw[:, at:at + 2] = (np.abs(gen.standard_normal(n)) * scale + scale / 4).astype(np.float16).view(
            np.uint8).reshape(n, 2)
    return raw.reshape(*shape[:-1], shape[-1] // block * nbytes)


def _stored(w: gguf.GGUFWriter, name: str, data: np.ndarray, qtype: str) -> None:
    data = np.ascontiguousarray(data, dtype=np.float32)
    kind = Q[qtype] if data.ndim == 2 and not name.endswith("norm.weight") else Q.F32
    if kind == Q.F32:
        w.add_tensor(name, data)
    elif kind == Q.F16:
        w.add_tensor(name, data.astype(np.float16))
    elif qtype in F16_SCALES:  # a K-quant: random blocks of the tensor's shape (gguf cannot quantise into it)
        w.add_tensor(name, random_blocks(data.shape, qtype, len(name) * 7 + data.size), raw_dtype=kind)
    else:
        w.add_tensor(name, gguf.quants.quantize(data, kind), raw_dtype=kind)


def write_model(model: Any, path: Path, arch: str, qtype: str = "F32",
                tokenizer: dict[str, Any] | None = None, extra: dict[str, Any] | None = None,
                extra_tensors: dict[str, np.ndarray] | None = None) -> Path:
    """``model`` (transformers) as a GGUF file at ``path``."""
    c = model.config
    w = gguf.GGUFWriter(str(path), arch)
    metadata(w, arch, c)
    tok = tokenizer or byte_vocabulary(c.vocab_size)
    pad = getattr(c, "pad_token_id", None)
    if tokenizer is None and isinstance(pad, int) and pad < c.vocab_size:
        tok["pad"] = pad  # transformers reads the config's pad id from here
    tokenizer_fields(w, tok)
    for key, value in (extra or {}).items():
        w.add_key_value(key, value[0], value[1])
    layers = c.n_layer if arch == "gpt2" else c.num_hidden_layers
    names = gguf.get_tensor_name_map(_arch_id(arch), layers)
    heads = c.n_head if arch == "gpt2" else c.num_attention_heads
    kv = heads if arch == "gpt2" else getattr(c, "num_key_value_heads", None) or heads
    for hf_name, t in model.state_dict().items():
        if hf_name == "lm_head.weight" and getattr(c, "tie_word_embeddings", False):
            continue  # a tied head is not written
        if hf_name.endswith((".attn.bias", ".attn.masked_bias", "rotary_emb.inv_freq")):
            continue
        base, _, kind = hf_name.rpartition(".")
        gguf_name = names.get_name(base)
        assert gguf_name is not None, hf_name
        data = t.detach().float().numpy()
        if arch in LLAMA_PERMUTED and gguf_name.endswith((".attn_q", ".attn_k")):
            data = _permute(data, heads if gguf_name.endswith(".attn_q") else kv)
        if arch == "falcon" and gguf_name.endswith("attn_qkv"):
            data = _falcon_qkv(data, c)
        if arch in GEMMA and gguf_name.endswith("norm"):
            data = data + 1.0
        if arch == "gpt2" and kind == "weight" and gguf_name.endswith(("attn_qkv", "attn_output", "ffn_up", "ffn_down")):
            data = data.T
        _stored(w, f"{gguf_name}.{kind}", data, qtype)
    for name, data in (extra_tensors or {}).items():
        w.add_tensor(name, np.ascontiguousarray(data, dtype=np.float32))
    if arch == "gpt2" and "lm_head.weight" not in model.state_dict():
        _stored(w, "output.weight", model.state_dict()["transformer.wte.weight"].numpy(), qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def llama3_rope_freqs(head_dim: int, base: float, factor: float, low: float = 1.0, high: float = 4.0,
                      context: int = 8192) -> np.ndarray:
    """The ``rope_freqs`` tensor llama.cpp's converter writes for Llama 3.1+ (its loop, as written there)."""
    import math

    out = []
    for i in range(0, head_dim, 2):
        freq = 1.0 / base ** (i / head_dim)
        wavelen = 2 * math.pi / freq
        if wavelen < context / high:
            out.append(1.0)
        elif wavelen > context / low:
            out.append(factor)
        else:
            smooth = (context / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def byte_vocabulary(n: int) -> dict[str, Any]:
    """A GPT-2-style vocabulary of ``n`` single characters of GPT-2's byte alphabet (no merges)."""
    alphabet = [chr(c) for c in range(ord("!"), ord("~") + 1)] + [chr(c) for c in range(0xA1, 0xAD)] + \
        [chr(c) for c in range(0x100, 0x143)]
    tokens = alphabet[:n - 1] + ["<|endoftext|>"]
    return {"model": "gpt2", "pre": "default", "tokens": tokens, "merges": [],
            "types": [1] * (n - 1) + [3], "bos": n - 1, "eos": n - 1}


def tokenizer_fields(w: gguf.GGUFWriter, tok: dict[str, Any]) -> None:
    w.add_tokenizer_model(tok["model"])
    if tok.get("pre"):
        w.add_tokenizer_pre(tok["pre"])
    w.add_token_list(tok["tokens"])
    if tok.get("types") is not None:
        w.add_token_types(tok["types"])
    if tok.get("scores") is not None:
        w.add_token_scores(tok["scores"])
    if tok.get("merges"):
        w.add_token_merges(tok["merges"])
    for key, add in (("bos", w.add_bos_token_id), ("eos", w.add_eos_token_id), ("unk", w.add_unk_token_id),
                     ("pad", w.add_pad_token_id)):
        if tok.get(key) is not None:
            add(tok[key])
    if tok.get("add_bos") is not None:
        w.add_add_bos_token(tok["add_bos"])


def from_transformers(path: Path, model_dir: Path, gguf_file: str) -> Any:
    """transformers' own GGUF loading of the file (the reference)."""
    import transformers

    return transformers.AutoModelForCausalLM.from_pretrained(model_dir, gguf_file=gguf_file,
                                                             attn_implementation="eager",
                                                             dtype=torch.float32).eval()
