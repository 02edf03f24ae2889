"""Multi-head latent attention (DeepSeek-V2/V3): keys and values through a small latent, rotary on its own slice.

Instead of W_K and W_V, each token's vector is compressed to a latent of ``kv_lora_rank`` numbers (plus one
shared rotary key of ``rotary_dim`` numbers), normalised, then expanded into every head's key (its
no-rotary part) and value. Queries come from W_Q, or through a latent of ``q_lora_rank`` numbers. Each
head's query and key are [no-rotary part, rotary part] (d_head = both); only the rotary part turns, and
the rotary key is the same for every head. Values are ``d_head_v`` wide.

The KV cache holds the expanded keys and values (as for every other attention), so a cached step computes
the same numbers as the whole pass.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from explorer.core.attention import apply_rotary, apply_rotary_interleaved
from explorer.core.modules import Norm

if TYPE_CHECKING:
    from explorer.core.config import ModelConfig
    from explorer.core.plan import LayerPlan

LATENT_EPS = 1e-6  # the latents' RMSNorm epsilon in the families' code (not the config's rms_norm_eps)


def add_latent_projections(attn: nn.Module, cfg: ModelConfig, plan: LayerPlan) -> None:
    """MLA's modules on ``attn``: W_Qm (or W_Q_a, q_a_norm, W_Q_b), W_KV_a, kv_a_norm, W_KV_b."""
    H, dh, dv, d = plan.n_heads, plan.d_head, plan.d_head_v, cfg.d_model
    rank, rope = cfg.kv_lora_rank, cfg.rotary_dim
    if cfg.q_lora_rank is None:
        attn.W_Qm = nn.Linear(d, H * dh, bias=False)
    else:
        attn.W_Q_a = nn.Linear(d, cfg.q_lora_rank, bias=cfg.attn_bias)
        attn.q_a_norm = Norm("rmsnorm", cfg.q_lora_rank, LATENT_EPS)
        attn.W_Q_b = nn.Linear(cfg.q_lora_rank, H * dh, bias=False)
    attn.W_KV_a = nn.Linear(d, rank + rope, bias=cfg.attn_bias)
    attn.kv_a_norm = Norm("rmsnorm", rank, LATENT_EPS)
    attn.W_KV_b = nn.Linear(rank, H * (dh - rope + dv), bias=False)


def latent_qkv(cfg: ModelConfig, attn: nn.Module, h: Tensor,
               rotary: tuple[Tensor, Tensor] | None) -> tuple[Tensor, Tensor, Tensor]:
    """q [B, H, n, dh], k [B, H, n, dh], v [B, H, n, dv] of one block from its normed input h [B, n, d]."""
    B, n, _ = h.shape
    H, dh, rope = cfg.n_heads, cfg.d_head, cfg.rotary_dim
    nope, dv = dh - rope, cfg.d_head_v or dh
    if cfg.q_lora_rank is None:
        q = attn.W_Qm(h)
    else:
        q = attn.W_Q_b(attn.q_a_norm(attn.W_Q_a(h)))                          # through the query latent
    q_pass, q_rot = q.view(B, n, H, dh).transpose(1, 2).split([nope, rope], dim=-1)
    latent, k_rot = attn.W_KV_a(h).split([cfg.kv_lora_rank, rope], dim=-1)  # [B, n, r], [B, n, rope]
    kv = attn.W_KV_b(attn.kv_a_norm(latent)).view(B, n, H, nope + dv).transpose(1, 2)
    k_pass, v = kv.split([nope, dv], dim=-1)                                 # every head's key part and value
    k_rot = k_rot.view(B, 1, n, rope)                                        # one rotary key for every head
    if rotary is not None:
        turn = apply_rotary_interleaved if cfg.rotary_interleaved else apply_rotary
        q_rot, k_rot = turn(q_rot, *rotary), turn(k_rot, *rotary)
    q = torch.cat([q_pass, q_rot], dim=-1)
    k = torch.cat([k_pass, k_rot.expand(B, H, n, rope)], dim=-1)
    return q, k, v.contiguous()
