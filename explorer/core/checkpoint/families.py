"""The family registry: ``model_type`` -> ``Family``, one line per family module.

Both ways of opening a Hugging Face model read it: a directory (``load_checkpoint`` through
``loader.load_family``) and a ``transformers`` model in memory (``in_memory.from_transformers``),
so every model type that opens from disk opens from a notebook too. A new family is one module
that defines ``FAMILIES`` (its ``Family`` records) and one line below.
"""

from __future__ import annotations

from explorer.core.checkpoint import (
    bert,
    bloom,
    deepseek,
    dense2026,
    falcon,
    falcon_h1,
    gemma,
    gemma4,
    gpt2,
    gpt_neo,
    gpt_oss,
    gptj,
    granite,
    lfm2,
    llama,
    llama4,
    mamba_hybrids,
    mixtral,
    neox,
    olmo,
    opt,
    phi,
    phi3,
    qwen,
    qwen35,
    qwen_moe,
    stablelm,
)
from explorer.core.checkpoint.family import Family

_MODULES = (
    gpt2,      # GPT-2
    llama,     # Llama, Mistral
    neox,      # GPT-NeoX (Pythia)
    qwen,      # Qwen2, Qwen3
    gemma,     # Gemma, Gemma 2, Gemma 3 (text and multimodal)
    olmo,      # OLMo, OLMo 2
    stablelm,  # StableLM
    granite,   # Granite
    bert,      # BERT, RoBERTa, DistilBERT
    phi,       # Phi-1/1.5/2
    phi3,      # Phi-3
    gpt_neo,   # GPT-Neo
    opt,       # OPT
    bloom,     # BLOOM
    falcon,    # Falcon
    gptj,      # GPT-J
    mixtral,   # mixtures of experts: Mixtral, PhiMoE, GraniteMoE
    qwen_moe,  # Qwen2-MoE, Qwen3-MoE, OLMoE
    gpt_oss,   # gpt-oss (attention sinks, experts)
    deepseek,  # DeepSeek-V2, DeepSeek-V3 / R1 (latent attention, experts), GLM-4.5 (experts)
    llama4,    # Llama 4 (experts between dense layers, chunked and NoPE layers)
    qwen35,    # Qwen3.5 / 3.6, Qwen3-Next (Gated DeltaNet layers beside gated attention)
    dense2026,  # SmolLM3, OLMo 3, EXAONE 4, Mistral Small 3 (mistral3)
    gemma4,    # Gemma 4 (sliding/global heads, KV sharing, K = V, per-layer embeddings, layer scalars)
    lfm2,      # LFM2 (short gated convolutions beside attention)
    mamba_hybrids,  # Granite 4 hybrids, Nemotron-H (Mamba-2 layers beside attention)
    falcon_h1,  # Falcon-H1 (attention and Mamba-2 side by side in every block)
)

FAMILIES: dict[str, Family] = {family.model_type: family for module in _MODULES for family in module.FAMILIES}
