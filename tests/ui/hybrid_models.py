"""Tiny random hybrid models for the window tests, built in memory from ``transformers``' own config classes with
GPT-2's vocabulary (so the window's prompt is plain text), and opened the way ``explorer.show(model, tokenizer)``
opens them: registered as a ``memory:N`` source.

* ``qwen35``: Qwen3.5-shaped: three Gated DeltaNet layers (4 value heads) and one gated attention layer (4 heads);
* ``gemma4``: Gemma-4-shaped: sliding and global layers, K/V shared by the last two, per-layer inputs, a soft cap;
* ``lfm2``: LFM2-shaped: short convolutions (32 channels) beside an attention layer;
* ``granite``: a Granite-4 hybrid: a Mamba-2 layer (8 heads) and an attention layer;
* ``nemotron``: Nemotron-H-shaped: Mamba-2, FFN-only and attention blocks;
* ``falcon_h1``: Falcon-H1-shaped: a Mamba-2 scan beside every attention layer.
"""

from __future__ import annotations

import math

import pytest
import torch

VOCAB = 50257  # GPT-2's: the window's prompt is text
BASE = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=4, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=1024, attn_implementation="eager")
MODELS = {
    "qwen35": ("Qwen3_5TextConfig", "Qwen3_5ForCausalLM", dict(
        head_dim=8, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=8)),
    "gemma4": ("Gemma4TextConfig", "Gemma4ForCausalLM", dict(
        num_hidden_layers=6, head_dim=8, global_head_dim=16, num_global_key_value_heads=1, attention_k_eq_v=True,
        num_kv_shared_layers=2, sliding_window=4, vocab_size_per_layer_input=VOCAB, hidden_size_per_layer_input=8,
        use_double_wide_mlp=True, final_logit_softcapping=30.0, pad_token_id=0,
        layer_types=["sliding_attention", "sliding_attention", "full_attention"] * 2)),
    "lfm2": ("Lfm2Config", "Lfm2ForCausalLM", dict(num_hidden_layers=3, pad_token_id=0,
                                                   layer_types=["conv", "full_attention", "conv"])),
    "granite": ("GraniteMoeHybridConfig", "GraniteMoeHybridForCausalLM", dict(
        num_hidden_layers=2, layer_types=["mamba", "attention"], mamba_n_heads=8, mamba_d_state=8, mamba_n_groups=2,
        mamba_chunk_size=8, mamba_d_head=8, num_local_experts=0, shared_intermediate_size=48,
        position_embedding_type="rope", pad_token_id=0)),
    "nemotron": ("NemotronHConfig", "NemotronHForCausalLM", dict(
        head_dim=8, layers_block_type=["mamba", "mlp", "attention", "mlp"], mamba_num_heads=8, mamba_head_dim=8,
        ssm_state_size=8, n_groups=2, chunk_size=8, pad_token_id=0)),
    "falcon_h1": ("FalconH1Config", "FalconH1ForCausalLM", dict(
        num_hidden_layers=2, mamba_d_ssm=32, mamba_n_heads=4, mamba_d_state=8, mamba_n_groups=2, mamba_chunk_size=8,
        mamba_d_head=8)),
}
PROMPT = "the cat sat on the mat and the cat sat on the mat again"


def spread_weights(model: torch.nn.Module, seed: int = 0) -> None:
    """Unit-scale weights (transformers' 0.02 init gives near-uniform maps), norms near 1."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            is_norm = "norm" in name
            if p.dim() == 1 or is_norm:
                centre = 1.0 if is_norm and name.endswith("weight") else 0.0
                p.copy_(centre + 0.1 * torch.randn(p.shape, generator=gen))
            else:
                std = 1.0 if "embed" in name else 1.0 / math.sqrt(p.shape[-1])
                p.copy_(std * torch.randn(p.shape, generator=gen))


def build(name: str):
    """The tiny ``transformers`` model ``name`` (random, seeded)."""
    transformers = pytest.importorskip("transformers")
    config_name, model_name, overrides = MODELS[name]
    torch.manual_seed(0)
    model = getattr(transformers, model_name)(getattr(transformers, config_name)(**{**BASE, **overrides})).eval()
    spread_weights(model)
    return model


def source(name: str) -> str:
    """The ``memory:N`` source of a fresh tiny model ``name`` with GPT-2's tokenizer (what ``explorer.show`` opens)."""
    from explorer.core.checkpoint.in_memory import register
    from explorer.core.tokenize.base import gpt2_tokenizer

    return register(build(name), gpt2_tokenizer())


def open_hybrid(qtbot, make_window, name: str, prompt: str = PROMPT):
    """A shown main window with the tiny model ``name`` loaded and ``prompt`` traced and drawn."""
    window = make_window()
    window.set_prompt(prompt)
    with qtbot.waitSignal(window.trace_applied, timeout=60_000):
        window.open_checkpoint(source(name))
    qtbot.waitUntil(lambda: window.trace is not None and window.trace.n_tokens > 1 and window.presenter.is_idle(),
                    timeout=60_000)
    return window
