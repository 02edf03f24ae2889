"""The small pieces of attention math, shared by the forward pass and by the Trace's on-demand views.

Positions (sinusoids, rotary angles and turns), the masks (causal; a sliding window; Llama 4's chunks:
``layer_mask`` is the one mask of a layer), ALiBi's bias, the one scores recipe (``layer_scores``: scale,
bias, mask, cap), the softmax (with gpt-oss's sinks), the weighted values and the fused kernel.
A derived pattern is computed by these same functions, so it is the pattern the model computed.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from explorer.core.config import ModelConfig
from explorer.core.rope import inverse_frequencies

Rec = Callable[[str, "int | None", Tensor], "Tensor | None"]


def _no_capture(site: str, layer: int | None, tensor: Tensor) -> Tensor:
    return tensor


def sinusoidal_positions(n_positions: int, d_model: int) -> Tensor:
    """PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(pos / 10000^(2i/d)).  [n, d]"""
    pos = torch.arange(n_positions, dtype=torch.float64)[:, None]
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)[None, :]
    angle = pos / torch.pow(10000.0, two_i / d_model)
    pe = torch.zeros(n_positions, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)
    return pe.float()


def rotary_angles(positions: Tensor, rotary_dim: int, base: float,
                  scaling: dict | None = None) -> tuple[Tensor, Tensor]:
    """cos and sin of the rotation angles pos * base^(-2i/r), laid out as [n, r] (each frequency twice).

    ``scaling``: a RoPE scaling variant (explorer/core/rope.py) changes the frequencies; YaRN also
    scales cos and sin. Dynamic scaling and LongRoPE depend on the sequence length: the last position + 1.
    """
    dynamic = scaling is not None and scaling.get("rope_type") in ("dynamic", "longrope") and positions.numel()
    seq_len = int(positions.max()) + 1 if dynamic else None  # (reading it waits for the device)
    inv_freq, factor = inverse_frequencies(rotary_dim, base, scaling, seq_len)
    angles = positions.float()[:, None] * inv_freq[None, :].to(positions.device)  # [n, r/2]
    angles = torch.cat([angles, angles], dim=-1)                      # [n, r]
    if factor != 1.0:
        return angles.cos() * factor, angles.sin() * factor
    return angles.cos(), angles.sin()


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate pairs (x_i, x_{i+r/2}) of the first r dimensions of each head by their angle.  x: [B, h, n, dh]"""
    r = cos.shape[-1]
    x_rot, x_pass = x[..., :r], x[..., r:]
    half = r // 2
    rotated_half = torch.cat([-x_rot[..., half:], x_rot[..., :half]], dim=-1)
    x_rot = x_rot * cos.to(x.dtype) + rotated_half * sin.to(x.dtype)
    return torch.cat([x_rot, x_pass], dim=-1) if x_pass.shape[-1] else x_rot


def apply_rotary_interleaved(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """GPT-J's rotary: rotate adjacent pairs (x_2i, x_2i+1) of the first r dimensions.  x: [B, h, n, dh]

    The same angles as ``apply_rotary`` (cos, sin: [n, r], each frequency twice), laid out pairwise."""
    r = cos.shape[-1]
    cos = cos[..., : r // 2].repeat_interleave(2, dim=-1).to(x.dtype)   # [n, r]: c0 c0 c1 c1 ...
    sin = sin[..., : r // 2].repeat_interleave(2, dim=-1).to(x.dtype)
    x_rot, x_pass = x[..., :r], x[..., r:]
    even, odd = x_rot[..., 0::2], x_rot[..., 1::2]
    turned = torch.stack([-odd, even], dim=-1).flatten(-2)              # (x0, x1) -> (-x1, x0) per pair
    x_rot = x_rot * cos + turned * sin
    return torch.cat([x_rot, x_pass], dim=-1) if x_pass.shape[-1] else x_rot


Window = tuple[int, int]  # a half-open range of positions: (start, stop)


def visible_keys(n_queries: int, n_keys: int, queries, window: int | None = None, chunk: int | None = None):
    """The keys each query may look at, [lo, hi) (the queries are the last n of the m positions): up to
    itself; with a sliding ``window`` W only the W last (itself included); with a ``chunk`` C (Llama 4) only
    those of its own block of C positions. ``lo`` may be negative (nothing cut). ``queries``: a query index,
    or a tensor or array of them (then ``lo`` and ``hi`` are too). The one causal rule: ``causal_mask`` and
    the numpy row of ``analysis.attention_tiles`` read it."""
    at = queries + (n_keys - n_queries)
    if chunk is not None:
        return at - at % chunk, at + 1
    return (at - window + 1 if window is not None else at - n_keys), at + 1


def causal_mask(n_queries: int, n_keys: int, device: torch.device | str = "cpu", window: int | None = None,
                chunk: int | None = None, rows: Window | None = None, cols: Window | None = None) -> Tensor:
    """True where a query may NOT look (``visible_keys``: keys after the query's own position; with a sliding
    ``window`` W, keys W or more positions before it; with a ``chunk`` C, keys outside its block of C
    positions).  [n, m], or [r, c] for queries ``rows`` x keys ``cols`` of them."""
    r0, r1 = rows if rows is not None else (0, n_queries)
    c0, c1 = cols if cols is not None else (0, n_keys)
    lo, hi = visible_keys(n_queries, n_keys, torch.arange(r0, r1, device=device), window, chunk)
    j = torch.arange(c0, c1, device=device)[None, :]
    return (j >= hi[:, None]) | (j < lo[:, None])


def layer_reach(cfg: ModelConfig, layer: int) -> tuple[int | None, int | None]:
    """(sliding window, chunk) of block ``layer``'s attention, from its plan: at most one is set."""
    plan = cfg.layer(layer)
    return (plan.window if plan.attention == "sliding" else None,
            plan.window if plan.attention == "chunked" else None)


def layer_mask(cfg: ModelConfig, layer: int, n_queries: int, n_keys: int, device: torch.device | str = "cpu",
               rows: Window | None = None, cols: Window | None = None) -> Tensor | None:
    """The mask of block ``layer`` (its plan's attention kind: full, sliding window, chunked) of queries
    ``rows`` x keys ``cols`` (default: all), None for an encoder (no mask at all). The forward pass, the
    Trace's derived scores and the long-prompt tiles all use it."""
    if not cfg.causal:
        return None
    window, chunk = layer_reach(cfg, layer)
    return causal_mask(n_queries, n_keys, device, window, chunk, rows, cols)


def layer_window(cfg: ModelConfig, layer: int) -> int | None:
    """The sliding window of a layer (Gemma 2/3, Mistral, Phi-3, GPT-Neo's local layers, gpt-oss), None where
    it sees every earlier key or attends within chunks (``layer_mask`` has every kind)."""
    plan = cfg.layer(layer)
    return plan.window if plan.attention == "sliding" else None


def query_temperature(positions: Tensor, scale: float, floor: float) -> Tensor:
    """Llama 4's temperature on its NoPE layers: q times 1 + scale * log(1 + floor((pos + 1) / floor)),
    larger for later positions (the attention sharpens over long contexts).  [n]"""
    return torch.log1p(torch.floor((positions.float() + 1.0) / floor)) * scale + 1.0


def alibi_slopes(n_heads: int) -> Tensor:
    """ALiBi's per-head slopes m_h: a geometric sequence 2^(-8/H'), 2^(-16/H'), ... (H' = the power of two
    at or below H; the remaining heads take every other slope of the sequence for 2H').  [H]"""
    def geometric(count: int) -> list[float]:
        start = 2.0 ** (-(2.0 ** -(math.log2(count) - 3)))
        return [start ** (i + 1) for i in range(count)]

    p = 2 ** math.floor(math.log2(n_heads))
    slopes = geometric(p) + geometric(2 * p)[0::2][: n_heads - p]
    return torch.tensor(slopes, dtype=torch.float32)


def alibi_bias(n_heads: int, n_queries: int, n_keys: int, device: torch.device | str = "cpu",
               heads: slice | list[int] = slice(None), rows: Window | None = None,
               cols: Window | None = None) -> Tensor:
    """ALiBi: -m_h * (i - j), the penalty head h adds to a query at i looking back at key j.  [H, n, m]
    (``heads``: only those heads' rows, for a view of one head; ``rows`` x ``cols``: a window of it)."""
    r0, r1 = rows if rows is not None else (0, n_queries)
    c0, c1 = cols if cols is not None else (0, n_keys)
    offset = n_keys - n_queries
    distance = (torch.arange(r0, r1, device=device)[:, None] + offset
                - torch.arange(c0, c1, device=device)[None, :])            # i - j: [n, m]
    return -alibi_slopes(n_heads)[heads].to(device)[:, None, None] * distance.float()


def score_bias(cfg: ModelConfig, n_queries: int, n_keys: int, device: torch.device | str = "cpu",
               heads: slice | list[int] = slice(None), rows: Window | None = None,
               cols: Window | None = None) -> Tensor | None:
    """What a layer adds to its scaled scores: ALiBi's bias (BLOOM), scaled along with q.k where the
    model adds it before the scale (Falcon-RW); None for every other model.  [H, n, m] (or its window)"""
    if not cfg.alibi:
        return None
    bias = alibi_bias(cfg.n_heads, n_queries, n_keys, device, heads, rows, cols)
    if cfg.alibi_before_scale:
        bias = bias * (1.0 / math.sqrt(cfg.d_head) if cfg.attn_scale is None else cfg.attn_scale)
    return bias


def attention_scores(q: Tensor, k: Tensor, mask: Tensor | None, scale: float | None = None,
                     bias: Tensor | None = None) -> Tensor:
    """Scaled dot products of every query with every key (q.k * scale + bias), masked entries -inf.

    q: [..., H, n, dh], k: [..., Hkv, m, dh] (K/V heads are shared by H/Hkv query heads);
    ``scale`` defaults to 1/sqrt(dh); some families set their own (Gemma 2, Granite, GPT-Neo).
    ``bias``: [H, n, m] (ALiBi) or None. Returns [..., H, n, m].
    """
    if k.shape[-3] != q.shape[-3]:
        k = k.repeat_interleave(q.shape[-3] // k.shape[-3], dim=-3)
    # scaling q (n x dh numbers) instead of the scores (n x m) is the same math and cheaper; the
    # fresh product can be masked in place
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = (q * scale) @ k.transpose(-1, -2)
    if bias is not None:
        scores.add_(bias.to(scores.dtype))
    if mask is not None:
        scores.masked_fill_(mask, float("-inf"))
    return scores


def soft_cap(x: Tensor, cap: float, mask: Tensor | None = None) -> Tensor:
    """cap * tanh(x / cap): close to x for small values, never beyond +-cap (Gemma 2's scores and
    logits). Masked entries stay -inf (tanh would turn them into -cap)."""
    capped = torch.tanh(x / cap) * cap
    if mask is not None:
        capped.masked_fill_(mask, float("-inf"))
    return capped


def layer_scores(cfg: ModelConfig, q: Tensor, k: Tensor, mask: Tensor | None = None,
                 heads: slice | list[int] = slice(None), *, layer: int | None = None,
                 rows: Window | None = None, cols: Window | None = None) -> tuple[Tensor, Tensor | None]:
    """The one scores recipe, used by the forward pass, the Trace's derived scores and patterns, and the
    long-prompt tiles (``analysis.attention_tiles``): q.k x scale + bias (ALiBi), masked (-inf), then
    soft-capped where the model caps (Gemma 2).

    q: [..., H', n, dh] for the query ``heads`` H' (all by default), k: [..., Hkv', m, dh].
    ``rows`` x ``cols``: only that window of the n queries x m keys is computed (q and k are still the
    whole head's); ``layer``: the mask is that layer's (``layer_mask``: causal, its window or chunk), made
    for the window, instead of ``mask``.
    Returns (scores [..., H', r, c] = what enters the softmax, the scores before the cap or None)."""
    n, m = q.shape[-2], k.shape[-2]
    if layer is not None:
        mask = layer_mask(cfg, layer, n, m, q.device, rows, cols)
    if rows is not None:
        q = q[..., rows[0]:rows[1], :]
    if cols is not None:
        k = k[..., cols[0]:cols[1], :]
    bias = score_bias(cfg, n, m, q.device, heads, rows, cols)          # ALiBi (BLOOM): [H', r, c] or None
    scores = attention_scores(q, k, mask, cfg.attn_scale, bias)        # q.k / sqrt(dh) (+ bias), masked
    if cfg.attn_softcap is None:
        return scores, None
    return soft_cap(scores, cfg.attn_softcap, mask), scores            # Gemma 2: squash into (-cap, cap)


def attention_pattern(scores: Tensor, sinks: Tensor | None = None) -> Tensor:
    """Softmax over keys, one row per query: each row sums to 1 (with ``sinks``, to 1 less the sink's share)."""
    if sinks is None:
        return torch.softmax(scores, dim=-1)
    return pattern_and_sink(scores, sinks)[0]


def pattern_and_sink(scores: Tensor, sinks: Tensor) -> tuple[Tensor, Tensor]:
    """gpt-oss: each head's learned sink logit joins every row of its scores in the softmax, then is dropped,
    so a row of the pattern sums to 1 less the sink's weight. ``sinks``: [H'] for the scores' heads.
    Returns (pattern [..., H', n, m], the sink's weight [..., H', n])."""
    column = sinks.to(scores.dtype)[:, None, None].expand(*scores.shape[:-1], 1)
    logits = torch.cat([scores, column], dim=-1)
    logits = logits - logits.max(dim=-1, keepdim=True).values      # as the family computes it
    probs = torch.softmax(logits, dim=-1)
    return probs[..., :-1], probs[..., -1]


def weighted_values(pattern: Tensor, v: Tensor) -> Tensor:
    """Each head's output: its pattern times its values.  [..., H, n, m] @ [..., Hkv, m, dh] -> [..., H, n, dh]"""
    if v.shape[-3] != pattern.shape[-3]:
        v = v.repeat_interleave(pattern.shape[-3] // v.shape[-3], dim=-3)
    return pattern @ v


# Config switches (attribute names on ModelConfig) the fused kernel cannot express: with any of them
# on, the explicit math runs. An architecture that adds one lists its attribute here.
UNFUSABLE_ATTENTION = ("attn_softcap", "attn_logit_softcapping", "attn_logit_softcap", "alibi",  # alibi: a bias
                       "attn_sinks")  # sinks: a column the kernel has no place for


def records_attention(rec: Rec, layer: int) -> bool:
    """Whether ``rec`` stores this layer's scores or pattern (then they must be computed explicitly).
    A recorder says so through ``records(site, layer)``; any other callable is assumed to want them."""
    if rec is _no_capture:
        return False
    records = getattr(rec, "records", None)
    if records is None:
        return True
    return bool(records("attn.scores", layer) or records("attn.pattern", layer))


def fusable(cfg: ModelConfig) -> bool:
    """Whether scaled_dot_product_attention can compute this model's attention exactly as
    ``attention_scores`` -> ``attention_pattern`` -> ``weighted_values`` do."""
    return not any(getattr(cfg, name, None) for name in UNFUSABLE_ATTENTION)


def fused_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, scale: float | None = None) -> Tensor:
    """softmax(q k^T x scale, masked) v through the fused kernel, without materialising the scores
    (``scale`` defaults to 1/sqrt(dh), as in ``attention_scores``).

    q: [B, H, n, dh], k, v: [B, Hkv, m, dh]; ``mask`` True where a query may NOT look (as
    ``causal_mask``), or a float bias added to the scores. Returns [B, H, n, dh], the same numbers
    as the explicit path up to float rounding (tests/core/test_fused_attention.py).
    """
    n, m = q.shape[-2], k.shape[-2]
    if k.shape[-3] != q.shape[-3]:  # grouped K/V heads
        group = q.shape[-3] // k.shape[-3]
        k, v = k.repeat_interleave(group, dim=-3), v.repeat_interleave(group, dim=-3)
    if mask is None or mask.dtype != torch.bool:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    if n == m and _is_causal(mask):                                    # the kernel's own causal path
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
    if n == 1 and not bool(mask.any()):                                # one new token sees every key
        return F.scaled_dot_product_attention(q, k, v, scale=scale)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=~mask, scale=scale)  # a sliding window, a cache


def _is_causal(mask: Tensor) -> bool:
    n = mask.shape[-1]
    return mask.shape[-2] == n and mask.dim() == 2 and bool(torch.equal(mask, causal_mask(n, n, mask.device)))
