"""Rotary position frequencies, plain and with the scaling variants real checkpoints use.

Rotary positions turn each pair of a head's dimensions (i, i + r/2) by the angle
``position * inv_freq[i]``, with ``inv_freq[i] = base^(-2i/r)``. Long-context checkpoints change
these frequencies ("RoPE scaling"); the variants below compute them with the same arithmetic
(float32, same order of operations) as ``transformers``' ``modeling_rope_utils``, so that the
angles agree to the last bit or two:

* ``linear`` (position interpolation): every frequency divided by ``factor``;
* ``dynamic`` (dynamic NTK): when the sequence is longer than ``max_position_embeddings``, the
  base grows with its length (``seq_len``), so the angles depend on how long the sequence is;
* ``llama3`` (Llama 3.1/3.2): low frequencies (long wavelengths) divided by ``factor``, high ones
  kept, the band between blended smoothly;
* ``yarn``: a per-frequency blend of interpolated and original frequencies, and an
  ``attention_factor`` that scales cos and sin (and so the attention scores);
* ``proportional`` (Gemma 4's global layers): the plain frequencies of the whole head for its first
  ``proportion`` of the pairs, zero (no turn) for the others;
* ``longrope`` (Phi-3/3.5/4-mini): a factor per frequency, short or long by the sequence length,
  and an attention factor like YaRN's (PhiMoE: the short factors at every length, and its own
  ``short_mscale`` / ``long_mscale`` by the sequence length, as its transformers code computes them).

``scaling`` is a plain mapping with the checkpoint's keys (``rope_type``, ``factor``,
``low_freq_factor``, ``original_max_position_embeddings``, ``beta_fast``, ...), plus
``max_position_embeddings`` where the variant needs the model's context length.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from explorer.core.config import ROPE_SCALING_KEYS

SCALING_TYPES = tuple(ROPE_SCALING_KEYS)


def _plain(rotary_dim: int, base: float | Tensor) -> Tensor:
    """base^(-2i/r) for i < r/2, in float32.  [r/2]"""
    return 1.0 / (base ** (torch.arange(0, rotary_dim, 2, dtype=torch.int64).float() / rotary_dim))


def _llama3(inv_freq: Tensor, s: Mapping[str, Any]) -> Tensor:
    factor, low, high = s["factor"], s["low_freq_factor"], s["high_freq_factor"]
    old_context = s["original_max_position_embeddings"]
    low_freq_wavelen, high_freq_wavelen = old_context / low, old_context / high
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)    # long wavelengths: / factor
    smooth = (old_context / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled                      # the band in between
    medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(medium, smoothed, scaled)


def _yarn(rotary_dim: int, base: float, s: Mapping[str, Any]) -> tuple[Tensor, float]:
    original = s["original_max_position_embeddings"]
    factor = s.get("factor")
    if factor is None:
        factor = s["max_position_embeddings"] / original

    def mscale(scale: float, m: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    attention_factor = s.get("attention_factor")
    if attention_factor is None:
        if s.get("mscale") and s.get("mscale_all_dim"):
            attention_factor = float(mscale(factor, s["mscale"]) / mscale(factor, s["mscale_all_dim"]))
        else:
            attention_factor = mscale(factor)
    beta_fast, beta_slow = s.get("beta_fast") or 32, s.get("beta_slow") or 1

    def correction_dim(rotations: float) -> float:  # the dimension that turns `rotations` times over the context
        return (rotary_dim * math.log(original / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if s.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, rotary_dim - 1)
    if low == high:
        high += 0.001  # no division by zero
    ramp = torch.clamp((torch.arange(rotary_dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
    pos_freqs = base ** (torch.arange(0, rotary_dim, 2).float() / rotary_dim)
    extrapolation = 1 - ramp  # 1: keep the original frequency, 0: interpolate it
    inv_freq = (1.0 / (factor * pos_freqs)) * (1 - extrapolation) + (1.0 / pos_freqs) * extrapolation
    return inv_freq, float(attention_factor)


def _longrope(rotary_dim: int, base: float, s: Mapping[str, Any], seq_len: int | None) -> tuple[Tensor, float]:
    """LongRoPE (Phi-3-128k, Phi-3.5, Phi-4-mini): each frequency divided by its own factor, the short
    factors within the original context, the long ones beyond it (the sequence length decides, so with a
    cache a token keeps the rotation it got when computed, as in transformers); cos and sin are scaled by
    sqrt(1 + ln(factor) / ln(original context)) unless the config gives ``attention_factor``."""
    original = s["original_max_position_embeddings"]
    exponents = torch.arange(0, rotary_dim, 2, dtype=torch.int64).float() / rotary_dim
    if "short_mscale" in s and "long_mscale" in s:  # PhiMoE: the short factors always, its own scale by length
        scale = s["long_mscale"] if seq_len and seq_len > original else s["short_mscale"]
        return 1.0 / (torch.tensor(s["short_factor"], dtype=torch.float32) * base ** exponents), float(scale)
    factor = s.get("factor") or s["max_position_embeddings"] / original
    attention_factor = s.get("attention_factor")
    if attention_factor is None:
        attention_factor = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(original))
    ext = torch.tensor(s["long_factor"] if seq_len and seq_len > original else s["short_factor"], dtype=torch.float32)
    return 1.0 / (ext * base ** exponents), float(attention_factor)


def inverse_frequencies(rotary_dim: int, base: float, scaling: Mapping[str, Any] | None = None,
                        seq_len: int | None = None) -> tuple[Tensor, float]:
    """(inv_freq [r/2] float32, attention factor that multiplies cos and sin).

    ``seq_len`` (the number of positions up to and including the last one in this forward pass)
    matters only for ``dynamic`` scaling.
    """
    kind = (scaling or {}).get("rope_type", "default")
    s = scaling or {}
    if kind == "default":
        return _plain(rotary_dim, base), 1.0
    if kind == "linear":
        return _plain(rotary_dim, base) / s["factor"], 1.0
    if kind == "llama3":
        return _llama3(_plain(rotary_dim, base), s), 1.0
    if kind == "yarn":
        return _yarn(rotary_dim, base, s)
    if kind == "dynamic":
        context = s["max_position_embeddings"]
        if seq_len is None or seq_len <= context:  # within the trained context: the plain frequencies
            return _plain(rotary_dim, base), 1.0
        length = torch.tensor(seq_len)  # an integer tensor, as transformers computes it
        grown = base * ((s["factor"] * length / context) - (s["factor"] - 1)) ** (rotary_dim / (rotary_dim - 2))
        return _plain(rotary_dim, grown), 1.0
    if kind == "longrope":
        return _longrope(rotary_dim, base, s, seq_len)
    if kind == "proportional":  # Gemma 4: the first int(p x r // 2) frequencies of the whole head, the rest 0
        turning = int(s["proportion"] * rotary_dim // 2)  # (pairs (i, i + r/2) that do not turn: angle 0)
        inv_freq = torch.cat([_plain(rotary_dim, base)[:turning], torch.zeros(rotary_dim // 2 - turning)])
        return inv_freq / s.get("factor", 1.0), 1.0
    raise ValueError(f"unknown RoPE scaling type {kind!r}; known: {', '.join(SCALING_TYPES)}")


