"""Mamba-2 (Granite 4 hybrids, Nemotron-H): a selective state-space scan, one state per head.

Each head h keeps a state S [P, N] (P channels of x, N state dimensions). At token t, with its input
x_t [P], its step size dt_t = softplus(dt_raw + dt_bias) (clamped to the configured limits), the head's
A = -exp(A_log) < 0, and B_t, C_t [N] (shared by the heads of a group):

    S_t = exp(A dt_t) S_{t-1} + dt_t x_t B_t^T          y_t = S_t C_t + D x_t

so y_t = sum_{s <= t} M[t, s] x_s with M = L * (C B^T) * dt_s (+ D on the diagonal), L[t, s] =
exp(A (dt_{s+1} + ... + dt_t)): Mamba-2's "attention" (core/mixers/effective.py). The chunked form (a
prompt) computes it in blocks of ``ssm_chunk`` tokens, carrying the state between blocks; the step form
(a cached decode) one token at a time. Before the scan x, B and C pass the short convolution and SiLU
(conv.py); after it y times SiLU(z) is RMS-normed in ``ssm_groups`` groups, then projected out.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from explorer.core.attention import Rec, _no_capture
from explorer.core.config import ModelConfig
from explorer.core.mixers.conv import MixerState, causal_conv, state_norms


class Mamba2(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        H, P, G, N = cfg.ssm_heads, cfg.ssm_d_head, cfg.ssm_groups, cfg.ssm_d_state
        self.inner = H * P
        self.conv_dim = self.inner + 2 * G * N
        self.W_in = nn.Linear(cfg.d_model, self.inner + self.conv_dim + H, bias=cfg.mixer_bias)  # z, xBC, dt
        self.conv = nn.Parameter(torch.zeros(self.conv_dim, cfg.conv_kernel))
        self.conv_b = nn.Parameter(torch.zeros(self.conv_dim)) if cfg.conv_bias else None
        self.dt_bias = nn.Parameter(torch.ones(H))
        self.A_log = nn.Parameter(torch.zeros(H))
        self.D = nn.Parameter(torch.ones(H))
        self.norm = nn.Parameter(torch.ones(self.inner)) if cfg.ssm_norm != "none" else None
        self.norm_at = cfg.ssm_norm
        self.W_out = nn.Linear(self.inner, cfg.d_model, bias=cfg.mixer_bias)
        self.shape = (H, P, G, N)
        self.chunk, self.eps = cfg.ssm_chunk, cfg.norm_eps
        self.dt_limit = (cfg.ssm_dt_min, float("inf") if cfg.ssm_dt_max is None else cfg.ssm_dt_max)


def segment_sums(a: Tensor) -> Tensor:
    """a [..., C] -> [..., C, C]: sum_{r = s+1..t} a_r for s <= t (the log of L), -inf above the diagonal.
    Summed per cell from a masked cumulative sum, as the reference does (no differences of large sums)."""
    C = a.shape[-1]
    grid = a[..., None].expand(*a.shape, C)                            # [..., r, s] = a_r
    grid = grid.masked_fill(~torch.ones(C, C, dtype=torch.bool, device=a.device).tril(-1), 0)
    sums = grid.cumsum(-2)                                             # [t, s] = sum_{s < r <= t} a_r
    return sums.masked_fill(~torch.ones(C, C, dtype=torch.bool, device=a.device).tril(), float("-inf"))


def chunked(x: Tensor, dt: Tensor, A: Tensor, B: Tensor, C: Tensor, chunk: int, state: Tensor | None = None,
            norms: bool = False) -> tuple[Tensor, Tensor, Tensor | None]:
    """The scan over a sequence in blocks (float32). x [Bt, H, n, P], dt [Bt, H, n], A [H], B, C [Bt, H, n, N]
    (per head), ``state`` [Bt, H, P, N] -> (y without the D skip [Bt, H, n, P], final state, norms [Bt, H, n])."""
    Bt, H, n, P = x.shape
    S = x.new_zeros(Bt, H, P, B.shape[-1]) if state is None else state.float()
    y = x.new_empty(Bt, H, n, P)
    norm_out = x.new_empty(Bt, H, n) if norms else None
    a = A[None, :, None] * dt                                           # log of each step's decay
    for c0 in range(0, n, chunk):
        c1 = min(n, c0 + chunk)
        xc, Bc, Cc, ac = x[:, :, c0:c1] * dt[:, :, c0:c1, None], B[:, :, c0:c1], C[:, :, c0:c1], a[:, :, c0:c1]
        L = segment_sums(ac).exp()                                      # decay from s to t: [Bt, H, c, c]
        total = ac.cumsum(-1)                                           # log decay since the chunk's start
        y[:, :, c0:c1] = ((Cc @ Bc.transpose(-1, -2)) * L) @ xc + (Cc @ S.transpose(-1, -2)) * total.exp()[..., None]
        if norm_out is not None:
            norm_out[:, :, c0:c1] = state_norms(S, total.exp(), L, xc, Bc)
        S = S * total[..., -1:, None].exp() + (xc * (total[..., -1:] - total).exp()[..., None]).transpose(-1, -2) @ Bc
    return y, S, norm_out


def step(x: Tensor, dt: Tensor, A: Tensor, B: Tensor, C: Tensor, state: Tensor | None = None,
         norms: bool = False) -> tuple[Tensor, Tensor, Tensor | None]:
    """The same scan one token at a time (a cached decode); arguments and results as ``chunked``."""
    Bt, H, n, P = x.shape
    S = x.new_zeros(Bt, H, P, B.shape[-1]) if state is None else state.float()
    y = torch.empty_like(x)
    norm_out = x.new_empty(Bt, H, n) if norms else None
    for t in range(n):
        S = S * (A[None, :] * dt[:, :, t]).exp()[..., None, None] + \
            (dt[:, :, t, None] * x[:, :, t])[..., None] * B[:, :, t, None, :]
        y[:, :, t] = (S @ C[:, :, t, :, None])[..., 0]
        if norm_out is not None:
            norm_out[:, :, t] = S.pow(2).sum((-1, -2)).sqrt()
    return y, S, norm_out


def mamba2_forward(mix: Mamba2, h: Tensor, rec: Rec, layer: int, state: MixerState | None) -> Tensor:
    """The Mamba-2 sublayer on its normed input h [B, n, d] -> [B, n, d] (``state``: read and updated)."""
    Bt, n, _ = h.shape
    H, P, G, N = mix.shape
    z, xBC, dt = torch.split(mix.W_in(h), [mix.inner, mix.conv_dim, H], dim=-1)
    xBC, conv_state = causal_conv(xBC.transpose(1, 2), mix.conv, mix.conv_b, state.conv if state else None)
    x, B, C = torch.split(F.silu(xBC).transpose(1, 2), [mix.inner, G * N, G * N], dim=-1)
    x = rec("mixer.x", layer, x.reshape(Bt, n, H, P).transpose(1, 2))  # [B, H, n, P]
    B = B.reshape(Bt, n, G, N).transpose(1, 2).float()                  # [B, G, n, N]
    C = C.reshape(Bt, n, G, N).transpose(1, 2).float()
    dt = F.softplus(dt + mix.dt_bias.to(dt.dtype)).clamp(*mix.dt_limit).transpose(1, 2).float()  # [B, H, n]
    A = -mix.A_log.float().exp()
    rec("mixer.B", layer, B)
    rec("mixer.C", layer, C)
    rec("mixer.dt", layer, dt)
    rec("mixer.log_decay", layer, A[None, :, None] * dt)
    norms = rec is not _no_capture and getattr(rec, "records", lambda s, l: True)("mixer.state_norm", layer)
    Bh, Ch = (t.repeat_interleave(H // G, dim=1) for t in (B, C))      # each head's B and C
    start = state.recurrent if state is not None else None
    if state is not None and state.length and n == 1:
        y, final, norm_out = step(x.float(), dt, A, Bh, Ch, start, norms)
    else:
        y, final, norm_out = chunked(x.float(), dt, A, Bh, Ch, mix.chunk, start, norms)
    if norm_out is not None:
        rec("mixer.state_norm", layer, norm_out)
    if state is not None:
        state.conv, state.recurrent, state.length = conv_state, final, state.length + n
    y = y + mix.D.float()[None, :, None, None] * x.float()              # the skip: D x_t
    y = rec("mixer.y", layer, y)                                         # [B, H, n, P]: sum_s M[t, s] x_s
    gate = F.silu(z.reshape(Bt, n, H, P).transpose(1, 2).float())
    rec("mixer.gate", layer, gate)
    if mix.norm_at == "none":                                           # Falcon-H1 without its norm: y * SiLU(z)
        return mix.W_out((y * gate).transpose(1, 2).reshape(Bt, n, -1).to(h.dtype))
    before = mix.norm_at == "before_gate"                               # Falcon-H1's option: norm, then the gate
    grouped = (y if before else y * gate).transpose(1, 2).reshape(Bt, n, G, -1)
    normed = (grouped * torch.rsqrt(grouped.pow(2).mean(-1, keepdim=True) + mix.eps)).reshape(Bt, n, -1) * mix.norm
    if before:
        normed = normed * gate.transpose(1, 2).reshape(Bt, n, -1)
    return mix.W_out(normed.to(h.dtype))                                # (default: gate, then RMSNorm per group)
