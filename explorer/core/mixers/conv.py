"""The short causal convolution every hybrid mixer starts with, and the state a cached decode keeps.

A depthwise convolution of width K along the tokens: each channel c of the output at position t is
sum_j w[c, j] x[c, t - (K - 1) + j] (+ b[c]), the positions before the first being zeros. Gated DeltaNet
runs it over q, k and v, Mamba-2 over x, B and C (both then apply SiLU), LFM2's layer over B * x.

Generation keeps, per layer, the last K - 1 inputs (``MixerState.conv``) and, for the recurrent mixers,
the recurrent state (``MixerState.recurrent``: DeltaNet's [H, d_k, d_v] memory, Mamba-2's [H, P, N]);
a new token then costs one step, as a KV cache makes attention cost one position.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor


@dataclass
class MixerState:
    """What a recurrent or convolutional layer carries from one decoding step to the next."""

    conv: Tensor | None = None        # [B, C, K - 1]: the convolution's last K - 1 inputs
    recurrent: Tensor | None = None   # [B, H, a, b]: the scan's state after the last token
    length: int = 0                   # tokens seen


def causal_conv(x: Tensor, weight: Tensor, bias: Tensor | None, state: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """x [B, C, n] (channels first), weight [C, K] -> (output [B, C, n], the last K - 1 inputs [B, C, K - 1]).

    ``state``: the inputs before x (a cached decode); None: zeros before the first token."""
    K = weight.shape[-1]
    before = x.new_zeros(*x.shape[:-1], K - 1) if state is None else state.to(x.dtype)
    padded = torch.cat([before, x], dim=-1)                           # [B, C, K - 1 + n]
    out = F.conv1d(padded, weight[:, None, :].to(x.dtype), None if bias is None else bias.to(x.dtype),
                   groups=x.shape[1])
    return out, padded[..., padded.shape[-1] - (K - 1):]


def conv_state_norms(inputs: Tensor, K: int, state: Tensor | None = None) -> Tensor:
    """The norm of what the convolution holds after each token (its last K - 1 inputs, all channels):
    inputs [B, C, n] -> [B, n]."""
    before = inputs.new_zeros(*inputs.shape[:-1], K - 1) if state is None else state.to(inputs.dtype)
    padded = torch.cat([before, inputs], dim=-1).float().pow(2).sum(1)  # [B, K - 1 + n]
    windows = padded.unfold(-1, K - 1, 1)[:, 1:] if K > 1 else padded[:, :, None] * 0
    return windows.sum(-1).sqrt()                                       # [B, n]


def state_norms(start: Tensor, decay: Tensor, within: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """||S_t|| (Frobenius) for the states of one chunk of a linear recurrence, without building them:

        S_t = start_decay_t * S_0 + sum_{s <= t} within[t, s] * k_s v_s^T

    start: S_0 [..., a, b]; decay: start_decay [..., C]; within [..., C, C] (0 above the diagonal);
    k [..., C, a], v [..., C, b] -> [..., C]. The square expands into S_0's norm, a cross term and the Gram
    matrices of k and v (C x C numbers instead of C x a x b)."""
    gram = (k @ k.transpose(-1, -2)) * (v @ v.transpose(-1, -2))        # [..., C, C]
    inner = ((within @ gram) * within).sum(-1)                           # sum_{s,s'} w_ts w_ts' (k.k')(v.v')
    cross = ((k @ start) * v).sum(-1)                                    # k_s^T S_0 v_s: [..., C]
    square = (decay ** 2 * start.pow(2).sum((-1, -2))[..., None] + 2 * decay * (within @ cross[..., None])[..., 0]
              + inner)
    return square.clamp_min(0).sqrt()
