"""Mamba-2 hybrids against transformers on tiny random models (float32): Granite 4 (dense and with experts) and
Nemotron-H (Mamba-2, attention and FFN blocks), with hybrid_reference.check_hybrid; and Mamba-2's effective
attention against M = L * C B^T computed by hand from the layer's recorded B, C, dt and A."""

from __future__ import annotations

import numpy as np
import pytest
from decoder_reference import IDS, build, save_and_open
from hybrid_reference import check_hybrid

from explorer.core.checkpoint.in_memory import from_transformers
from explorer.core.mixers.effective import effective_attention
from explorer.core.tokenize.base import VocabTokenizer
from explorer.core.trace import CaptureSpec

pytest.importorskip("transformers")

TOKENS = VocabTokenizer([f"w{i}" for i in range(100)], split="words", name="words")
GRANITE4 = dict(num_hidden_layers=3, num_key_value_heads=2, layer_types=["linear_attention", "full_attention",
                                                                         "linear_attention"],
                mamba_n_heads=8, mamba_d_state=16, mamba_n_groups=2, mamba_chunk_size=8, shared_intermediate_size=48,
                embedding_multiplier=1.5, residual_multiplier=0.7, attention_multiplier=0.2, logits_scaling=2.0,
                position_embedding_type="rope", pad_token_id=0)
NEMOTRON = dict(head_dim=16, num_key_value_heads=2, layers_block_type=["linear_attention", "mlp", "full_attention",
                                                                       "mlp", "linear_attention"],
                mamba_num_heads=8, mamba_head_dim=16, ssm_state_size=16, n_groups=2, chunk_size=8, pad_token_id=0)


def test_granite4_dense_hybrid(tmp_path):
    model = build("GraniteMoeHybridConfig", "GraniteMoeHybridForCausalLM", **GRANITE4, num_local_experts=0)
    loaded = save_and_open(model, tmp_path)
    cfg = loaded.config
    assert [p.mixer for p in cfg.plan] == ["mamba2", "attention", "mamba2"] and not cfg.moe_layers
    assert cfg.ssm_heads == 8 and cfg.ssm_d_head == 16 and cfg.layer(0).d_ff == 48
    check_hybrid(loaded, model)


def test_granite4_hybrid_with_experts(tmp_path):
    from moe_reference import EAGER

    model = build("GraniteMoeHybridConfig", "GraniteMoeHybridForCausalLM", **GRANITE4, num_local_experts=4,
                  num_experts_per_tok=2, intermediate_size=32, **EAGER)
    loaded = save_and_open(model, tmp_path)
    assert loaded.config.moe_layers == (0, 1, 2) and loaded.config.d_shared == 48
    check_hybrid(loaded, model)


def test_nemotron_h_blocks_of_one_piece(tmp_path):
    model = build("NemotronHConfig", "NemotronHForCausalLM", **NEMOTRON)
    loaded = save_and_open(model, tmp_path)
    cfg = loaded.config
    assert [(p.mixer, p.ffn) for p in cfg.plan] == [("mamba2", "none"), ("none", "dense"), ("attention", "none"),
                                                    ("none", "dense"), ("mamba2", "none")]
    assert cfg.positions == "none" and cfg.activation == "relu2" and cfg.ssm_dt_min == 0.001
    check_hybrid(loaded, model)
    check_hybrid(from_transformers(model, TOKENS, device="cpu"), model)  # in memory: model.* names, not backbone.*


def test_mamba2_effective_attention_is_l_times_c_b(tmp_path):
    """M[t, s] = (C_t . B_s) exp(sum_{r=s+1..t} A dt_r) dt_s, plus D on the diagonal, from the recorded values."""
    model = build("GraniteMoeHybridConfig", "GraniteMoeHybridForCausalLM", **GRANITE4, num_local_experts=0)
    loaded = save_and_open(model, tmp_path)
    trace = loaded.trace_ids(IDS, CaptureSpec.full())
    B, C = trace["blocks.0.mixer.B"].astype(np.float64), trace["blocks.0.mixer.C"].astype(np.float64)  # [G, n, N]
    dt = trace["blocks.0.mixer.dt"].astype(np.float64)                                                 # [H, n]
    A = -np.exp(model.model.layers[0].mamba.A_log.detach().double().numpy())                          # [H]
    D = model.model.layers[0].mamba.D.detach().double().numpy()
    n, H, G = len(IDS), 8, 2
    hand = np.zeros((H, n, n))
    for h in range(H):
        g = h // (H // G)
        for t in range(n):
            for s in range(t + 1):
                L = np.exp(A[h] * dt[h, s + 1:t + 1].sum())
                hand[h, t, s] = (C[g, t] @ B[g, s]) * L * dt[h, s] + (D[h] if s == t else 0.0)
    ours = effective_attention(trace, 0)
    assert np.abs(ours - hand).max() <= 1e-5 * max(1.0, np.abs(hand).max())
    assert np.abs(trace["blocks.0.mixer.log_decay"] - A[:, None] * dt).max() < 1e-6  # the decay is exp(A dt)


@pytest.mark.parametrize("norm", [dict(mamba_rms_norm=False), dict(mamba_rms_norm=True, mamba_norm_before_gate=True),
                                  dict(mamba_rms_norm=True, mamba_norm_before_gate=False)])
def test_falcon_h1_attention_and_mamba2_side_by_side(tmp_path, norm):
    from test_in_memory_families import FALCON_H1

    model = build("FalconH1Config", "FalconH1ForCausalLM", **FALCON_H1, **norm, pad_token_id=0)
    loaded = save_and_open(model, tmp_path)
    cfg = loaded.config
    assert all(p.is_attention and p.parallel_ssm for p in cfg.plan) and cfg.embed_scale == 1.3
    check_hybrid(loaded, model)
    trace = loaded.trace_ids(IDS, CaptureSpec.full())
    # what the block adds: the attention's output and the scan's beside it
    attn_only = trace["blocks.1.attn.out"] - trace["blocks.1.mixer.out"]
    z = trace["blocks.1.attn.z"]
    W_O = loaded.model.blocks[1].attn.W_O.weight.detach().numpy()
    assert np.abs(attn_only - z.transpose(1, 0, 2).reshape(len(IDS), -1) @ W_O.T).max() < 1e-4
    check_hybrid(from_transformers(model, TOKENS, device="cpu"), model)
