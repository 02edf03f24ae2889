"""The leaf modules every block kind is made of: the activation functions, the norm (LayerNorm, RMSNorm and
their variants) and the dense FFN. ``layers.py`` builds blocks from them, and so do the modules a block may
hold instead of plain attention or a dense FFN (``mla.py``, ``moe.py``): a module of its own so that they
depend on it and not on each other.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from explorer.core.attention import Rec, _no_capture
from explorer.core.config import ModelConfig


def activation(name: str) -> Callable[[Tensor], Tensor]:
    return {
        "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
        "gelu": F.gelu,
        "relu": F.relu,
        "silu": F.silu,
        "relu2": lambda x: F.relu(x).square(),  # Nemotron-H
    }[name]


class Norm(nn.Module):
    """LayerNorm ((x - mean) / sqrt(var + eps) * w + b) or RMSNorm (x / sqrt(mean(x^2) + eps) * w).

    Variants: ``offset`` (Gemma: RMSNorm times (1 + w)), ``affine=False`` (no w, b: OLMo),
    ``heads`` (one weight per head, shape [heads, 1, d]: StableLM's q/k norms), ``bias=False``.
    """

    def __init__(self, kind: str, d: int, eps: float, offset: float = 0.0, affine: bool = True,
                 heads: int | None = None, bias: bool = True) -> None:
        super().__init__()
        self.kind, self.eps, self.offset = kind, eps, offset
        shape = (d,) if heads is None else (heads, 1, d)
        self.weight = nn.Parameter(torch.full(shape, 1.0 - offset)) if affine else None
        self.bias = nn.Parameter(torch.zeros(shape)) if kind == "layernorm" and affine and bias else None

    def forward(self, x: Tensor, rec: Rec = _no_capture, site: str = "", layer: int | None = None) -> Tensor:
        if rec is not _no_capture:  # statistics cost a pass over x: only when someone looks
            if self.kind == "layernorm":
                var, mean = torch.var_mean(x.float(), dim=-1, unbiased=False)
                rec(site + ".mean", layer, mean)
                rec(site + ".var", layer, var)
            else:
                rec(site + ".mean_square", layer, x.float().pow(2).mean(-1))
        if self.kind == "layernorm":
            if self.weight is None or self.weight.dim() == 1:
                return F.layer_norm(x, x.shape[-1:], self.weight, self.bias, self.eps)
            y = F.layer_norm(x, x.shape[-1:], None, None, self.eps) * self.weight  # a weight per head
            return y if self.bias is None else y + self.bias
        variance = x.float().pow(2).mean(-1, keepdim=True)
        if self.weight is None:
            return (x.float() * torch.rsqrt(variance + self.eps)).to(x.dtype)
        if self.offset:  # Gemma: the factor (1 + w) in float32
            return (x.float() * torch.rsqrt(variance + self.eps) * (self.offset + self.weight.float())).to(x.dtype)
        return (x.float() * torch.rsqrt(variance + self.eps)).to(x.dtype) * self.weight


    def gain(self) -> Tensor | None:
        """What the norm multiplies each dimension by after normalising: w, Gemma's (1 + w), or None
        for a norm without weights (OLMo).  [d]"""
        if self.weight is None:
            return None
        return self.weight + self.offset if self.offset else self.weight


def make_norm(cfg: ModelConfig, d: int, heads: int | None = None, bias: bool = True) -> Norm:
    return Norm(cfg.norm, d, cfg.norm_eps, cfg.norm_offset, cfg.norm_affine, heads, bias)


class FFN(nn.Module):
    """A dense FFN: W_in (and W_gate when gated) d -> d_ff, the activation, W_out d_ff -> d."""

    def __init__(self, cfg: ModelConfig, d_ff: int, bias: bool | None = None, gated: bool | None = None) -> None:
        super().__init__()
        bias = cfg.mlp_bias if bias is None else bias
        self.W_in = nn.Linear(cfg.d_model, d_ff, bias=bias)
        self.W_gate = nn.Linear(cfg.d_model, d_ff, bias=bias) if (cfg.gated_ffn if gated is None else gated) else None
        self.W_out = nn.Linear(d_ff, cfg.d_model, bias=bias)
