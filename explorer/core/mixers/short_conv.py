"""LFM2's short gated convolution: each channel mixes the last few tokens, gated before and after.

    B, C, x = in_proj(h)            (three d-wide vectors per token)
    y_t = C_t * sum_{j < K} w[j] * (B * x)_{t - (K - 1) + j}        (per channel; plus a bias b if any)
    out = out_proj(y)

so channel c of y_t is a weighted sum of that channel's x over the last K tokens, with weight
C_t[c] w[c, K - 1 - (t - s)] B_s[c] on token s (core/mixers/effective.py: the band of width K). The cached
decode keeps the last K - 1 values of B * x (conv.py's state).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from explorer.core.attention import Rec, _no_capture
from explorer.core.config import ModelConfig
from explorer.core.mixers.conv import MixerState, causal_conv, conv_state_norms


class ShortConv(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        d = cfg.d_model
        self.W_in = nn.Linear(d, 3 * d, bias=cfg.mixer_bias)          # B, C, x
        self.conv = nn.Parameter(torch.zeros(d, cfg.conv_kernel))
        self.conv_b = nn.Parameter(torch.zeros(d)) if cfg.conv_bias else None
        self.W_out = nn.Linear(d, d, bias=cfg.mixer_bias)


def short_conv_forward(mix: ShortConv, h: Tensor, rec: Rec, layer: int, state: MixerState | None) -> Tensor:
    """The convolution sublayer on its normed input h [B, n, d] -> [B, n, d] (``state``: read and updated)."""
    B, C, x = mix.W_in(h).transpose(-1, -2).chunk(3, dim=-2)           # [B, d, n] each
    rec("mixer.B", layer, B.transpose(1, 2))                            # [B, n, d]
    rec("mixer.C", layer, C.transpose(1, 2))
    x = rec("mixer.x", layer, x.transpose(1, 2)).transpose(1, 2)
    Bx = B * x
    before = state.conv if state is not None else None
    if rec is not _no_capture and getattr(rec, "records", lambda s, l: True)("mixer.state_norm", layer):
        rec("mixer.state_norm", layer, conv_state_norms(Bx, mix.conv.shape[-1], before))  # [B, n]
    mixed, conv_state = causal_conv(Bx, mix.conv, mix.conv_b, before)
    if state is not None:
        state.conv, state.length = conv_state, state.length + h.shape[1]
    y = rec("mixer.y", layer, (C * mixed).transpose(1, 2))              # [B, n, d]
    return mix.W_out(y)
