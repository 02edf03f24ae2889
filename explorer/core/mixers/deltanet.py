"""Gated DeltaNet (Qwen3.5 / 3.6, Qwen3-Next): linear attention whose memory is corrected token by token.

Each value head keeps a memory S [d_k, d_v]. At token t, with its key k_t and query q_t (both L2-normalised,
q scaled by 1/sqrt(d_k)), its value v_t, its write strength beta_t = sigmoid(b_t) and its decay
alpha_t = exp(g_t), g_t = -exp(A_log) * softplus(a_t + dt_bias) <= 0:

    S_t = alpha_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T        (the delta rule, decayed)
    y_t = S_t^T q_t

so y_t is a weighted sum of the values so far, y_t = sum_{s <= t} A[t, s] v_s (core/mixers/effective.py
derives A). Two forms compute it, as the reference does: ``chunked`` (blocks of 64 tokens, a triangular
solve inside each, the state carried between them: the prompt) and ``recurrent`` (one token at a time: a
cached decode); they agree to float rounding. Before the rule q, k and v pass the short convolution and
SiLU (conv.py); after it each head's y is RMS-normed, times its weight and SiLU(z), then projected out.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from explorer.core.attention import Rec
from explorer.core.config import ModelConfig
from explorer.core.mixers.conv import MixerState, causal_conv, state_norms

CHUNK = 64  # tokens per block of the chunked form (the reference's)


class GatedDeltaNet(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        d, Hk, Hv, dk, dv = cfg.d_model, cfg.delta_k_heads, cfg.delta_v_heads, cfg.delta_d_k, cfg.delta_d_v
        self.conv_dim = 2 * Hk * dk + Hv * dv
        self.W_qkv = nn.Linear(d, self.conv_dim, bias=False)      # q, k, v before the convolution
        self.W_z = nn.Linear(d, Hv * dv, bias=False)              # the output gate
        self.W_b = nn.Linear(d, Hv, bias=False)                   # write strength (beta = sigmoid)
        self.W_a = nn.Linear(d, Hv, bias=False)                   # decay's input
        self.conv = nn.Parameter(torch.zeros(self.conv_dim, cfg.conv_kernel))
        self.dt_bias = nn.Parameter(torch.ones(Hv))
        self.A_log = nn.Parameter(torch.zeros(Hv))
        self.norm = nn.Parameter(torch.ones(dv))                  # the gated RMSNorm's weight (no offset)
        self.W_out = nn.Linear(Hv * dv, d, bias=False)
        self.eps = cfg.norm_eps
        self.shape = (Hk, Hv, dk, dv)


def l2norm(x: Tensor, eps: float = 1e-6) -> Tensor:
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


def gates(mix: GatedDeltaNet, h: Tensor) -> tuple[Tensor, Tensor]:
    """(beta [B, n, Hv] in (0, 1), g [B, n, Hv] <= 0: the log of each token's decay), float32."""
    beta = torch.sigmoid(mix.W_b(h)).float()
    g = -mix.A_log.float().exp() * F.softplus(mix.W_a(h).float() + mix.dt_bias.float())
    return beta, g


def chunked(q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, state: Tensor | None = None,
            norms: bool = False) -> tuple[Tensor, Tensor, Tensor | None]:
    """The delta rule over a whole sequence in blocks of CHUNK tokens (float32).

    q, k [B, H, n, dk] (normalised, q scaled), v [B, H, n, dv], g, beta [B, H, n]; ``state`` [B, H, dk, dv].
    Returns (y [B, H, n, dv], the final state, the state's norm after each token [B, H, n] if ``norms``)."""
    B, H, n, dk = k.shape
    dv = v.shape[-1]
    S = q.new_zeros(B, H, dk, dv) if state is None else state.float()
    y = q.new_empty(B, H, n, dv)
    norm_out = q.new_empty(B, H, n) if norms else None
    for c0 in range(0, n, CHUNK):
        c1 = min(n, c0 + CHUNK)
        qc, kc, vc, bc = q[:, :, c0:c1], k[:, :, c0:c1], v[:, :, c0:c1], beta[:, :, c0:c1, None]
        G = g[:, :, c0:c1].cumsum(-1)                                # log decay since the chunk's start
        lower = torch.ones(c1 - c0, c1 - c0, dtype=torch.bool, device=q.device).tril()
        D = (G[..., :, None] - G[..., None, :]).masked_fill(~lower, float("-inf")).exp()  # decay s -> t
        T = ((kc * bc) @ kc.transpose(-1, -2)) * D                   # the delta rule's triangular system
        T = T.masked_fill(~lower.tril(-1), 0)
        eye = torch.eye(c1 - c0, dtype=q.dtype, device=q.device)
        U = torch.linalg.solve_triangular(T + eye, vc * bc, upper=False, unitriangular=True)
        W = torch.linalg.solve_triangular(T + eye, kc * bc * G.exp()[..., None], upper=False, unitriangular=True)
        V_new = U - W @ S                                            # what each token writes, corrected
        intra = (qc @ kc.transpose(-1, -2)) * D
        y[:, :, c0:c1] = (qc * G.exp()[..., None]) @ S + intra @ V_new
        if norm_out is not None:
            norm_out[:, :, c0:c1] = state_norms(S, G.exp(), D, kc, V_new)
        S = S * G[..., -1:, None].exp() + (kc * (G[..., -1:] - G).exp()[..., None]).transpose(-1, -2) @ V_new
    return y, S, norm_out


def recurrent(q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, state: Tensor | None = None,
              norms: bool = False) -> tuple[Tensor, Tensor, Tensor | None]:
    """The same rule one token at a time (the cached decode's form); arguments and results as ``chunked``."""
    B, H, n, dk = k.shape
    S = q.new_zeros(B, H, dk, v.shape[-1]) if state is None else state.float()
    y = torch.empty_like(v)
    norm_out = q.new_empty(B, H, n) if norms else None
    for t in range(n):
        S = S * g[:, :, t, None, None].exp()
        remembered = (S * k[:, :, t, :, None]).sum(-2)               # S^T k: what the memory says for k_t
        S = S + k[:, :, t, :, None] * ((v[:, :, t] - remembered) * beta[:, :, t, None])[:, :, None, :]
        y[:, :, t] = (S * q[:, :, t, :, None]).sum(-2)
        if norm_out is not None:
            norm_out[:, :, t] = S.pow(2).sum((-1, -2)).sqrt()
    return y, S, norm_out


def deltanet_forward(mix: GatedDeltaNet, h: Tensor, rec: Rec, layer: int, state: MixerState | None) -> Tensor:
    """The DeltaNet sublayer on its normed input h [B, n, d] -> [B, n, d]; ``state`` (a cached decode) is
    read and updated in place."""
    from explorer.core.attention import _no_capture

    B, n, _ = h.shape
    Hk, Hv, dk, dv = mix.shape
    qkv, conv_state = causal_conv(mix.W_qkv(h).transpose(1, 2), mix.conv, None, state.conv if state else None)
    qkv = F.silu(qkv).transpose(1, 2)                                 # [B, n, conv_dim]
    q, k, v = torch.split(qkv, [Hk * dk, Hk * dk, Hv * dv], dim=-1)
    q = l2norm(q.reshape(B, n, Hk, dk).transpose(1, 2).float())       # [B, Hk, n, dk]
    k = l2norm(k.reshape(B, n, Hk, dk).transpose(1, 2).float())
    v = v.reshape(B, n, Hv, dv).transpose(1, 2)                       # [B, Hv, n, dv]
    beta, g = gates(mix, h)
    beta, g = beta.transpose(1, 2), g.transpose(1, 2)                 # [B, Hv, n]
    rec("mixer.q", layer, q)
    rec("mixer.k", layer, k)
    v = rec("mixer.v", layer, v)
    rec("mixer.beta", layer, beta)
    rec("mixer.log_decay", layer, g)
    group = Hv // Hk                                                  # each q/k head serves `group` v heads
    qv, kv = (t.repeat_interleave(group, dim=1) if group > 1 else t for t in (q * dk ** -0.5, k))
    norms = rec is not _no_capture and getattr(rec, "records", lambda s, l: True)("mixer.state_norm", layer)
    start = state.recurrent if state is not None else None
    rule = recurrent if state is not None and state.length and n == 1 else chunked
    y, final, norm_out = rule(qv, kv, v.float(), g, beta, start, norms)
    if norm_out is not None:
        rec("mixer.state_norm", layer, norm_out)
    if state is not None:
        state.conv, state.recurrent, state.length = conv_state, final, state.length + n
    y = rec("mixer.y", layer, y.to(h.dtype))                          # [B, Hv, n, dv]: sum_s A[t, s] v_s
    z = F.silu(mix.W_z(h).reshape(B, n, Hv, dv).transpose(1, 2).float())
    rec("mixer.gate", layer, z)
    normed = y.float() * torch.rsqrt(y.float().pow(2).mean(-1, keepdim=True) + mix.eps)
    out = ((mix.norm * normed.to(h.dtype)) * z).to(h.dtype)           # RMSNorm, then the gate (as the reference)
    return mix.W_out(out.transpose(1, 2).reshape(B, n, Hv * dv))
