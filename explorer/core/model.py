"""The instrumented transformer: one readable forward pass, close to the math of the seed articles.

Shapes in comments: B batch, n new tokens, m keys (n plus cached tokens), d = d_model,
H query heads, Hkv key/value heads, dh = d_head, f = d_ff, V = vocabulary.

Capture: every interesting tensor passes through ``rec(site, layer, tensor)``. With no capture,
``rec`` is a function that does nothing, so the plain forward pays one no-op call per site.
Interventions: at the sites a user can change (the residual stream, each head's output z, the
attention and FFN outputs, the neurons) the forward pass goes on with what ``rec`` returns
(``x = rec(...)``); the no-op returns its input unchanged (explorer/core/interventions/).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from explorer.core.config import ModelConfig
from explorer.core.errors import PromptError
from explorer.core.placement import block_device, is_placed, tail_device, weights_of
from explorer.core.rope import inverse_frequencies

Rec = Callable[[str, "int | None", Tensor], "Tensor | None"]


def _no_capture(site: str, layer: int | None, tensor: Tensor) -> Tensor:
    return tensor


# --- the small pieces of math, shared by the forward pass and by the Trace's on-demand views ----

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


def visible_keys(n_queries: int, n_keys: int, queries, window: int | None = None):
    """The keys each query may look at, [lo, hi) (the queries are the last n of the m positions): up to
    itself, and with a sliding ``window`` W only the W last (itself included); ``lo`` may be negative
    (nothing cut). ``queries``: a query index, or a tensor of them (then ``lo`` and ``hi`` are tensors).
    The one causal rule: ``causal_mask`` and the numpy row of ``analysis.attention_tiles`` read it."""
    at = queries + (n_keys - n_queries)
    return (at - window + 1 if window is not None else at - n_keys), at + 1


def causal_mask(n_queries: int, n_keys: int, device: torch.device | str = "cpu",
                window: int | None = None, rows: Window | None = None, cols: Window | None = None) -> Tensor:
    """True where a query may NOT look (``visible_keys``: keys after the query's own position and, with a
    sliding ``window`` W, keys W or more positions before it).  [n, m], or [r, c] for queries ``rows`` x
    keys ``cols`` of them."""
    r0, r1 = rows if rows is not None else (0, n_queries)
    c0, c1 = cols if cols is not None else (0, n_keys)
    lo, hi = visible_keys(n_queries, n_keys, torch.arange(r0, r1, device=device), window)
    j = torch.arange(c0, c1, device=device)[None, :]
    mask = j >= hi[:, None]
    if window is not None:
        mask |= j < lo[:, None]
    return mask


def layer_mask(cfg: ModelConfig, layer: int, n_queries: int, n_keys: int, device: torch.device | str = "cpu",
               rows: Window | None = None, cols: Window | None = None) -> Tensor | None:
    """The layer's mask (``causal_mask`` with its sliding window; None for an encoder, which sees every key)
    of queries ``rows`` x keys ``cols`` (default: all).  [r, c]"""
    if not cfg.causal:
        return None
    return causal_mask(n_queries, n_keys, device, layer_window(cfg, layer), rows, cols)


def layer_window(cfg: ModelConfig, layer: int) -> int | None:
    """The sliding window of a layer (Gemma 2/3, Mistral, Phi-3, GPT-Neo's local layers), None where it sees every earlier key."""
    return cfg.sliding_window if layer in cfg.sliding_layers else None


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
    whole head's); ``layer``: the mask is that layer's (``layer_mask``: causal, its sliding window), made
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


def attention_pattern(scores: Tensor) -> Tensor:
    """Softmax over keys, one row per query: each row sums to 1."""
    return torch.softmax(scores, dim=-1)


def weighted_values(pattern: Tensor, v: Tensor) -> Tensor:
    """Each head's output: its pattern times its values.  [..., H, n, m] @ [..., Hkv, m, dh] -> [..., H, n, dh]"""
    if v.shape[-3] != pattern.shape[-3]:
        v = v.repeat_interleave(pattern.shape[-3] // v.shape[-3], dim=-3)
    return pattern @ v


# Config switches (attribute names on ModelConfig) the fused kernel cannot express: with any of them
# on, the explicit math runs. An architecture that adds one lists its attribute here.
UNFUSABLE_ATTENTION = ("attn_softcap", "attn_logit_softcapping", "attn_logit_softcap", "alibi")  # alibi: a bias


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


def activation(name: str) -> Callable[[Tensor], Tensor]:
    return {
        "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
        "gelu": F.gelu,
        "relu": F.relu,
        "silu": F.silu,
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


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        H, Hkv, dh, d = cfg.n_heads, cfg.kv_heads, cfg.d_head, cfg.d_model
        self.W_Q = nn.Linear(d, H * dh, bias=cfg.attn_bias)
        self.W_K = nn.Linear(d, Hkv * dh, bias=cfg.attn_bias)
        self.W_V = nn.Linear(d, Hkv * dh, bias=cfg.attn_bias)
        self.W_O = nn.Linear(H * dh, d, bias=cfg.attn_bias if cfg.attn_out_bias is None else cfg.attn_out_bias)
        self.q_norm = self.k_norm = None
        if cfg.qk_norm in ("head", "per_head"):  # over each head's d_head numbers
            per = cfg.qk_norm == "per_head"
            self.q_norm = make_norm(cfg, dh, H if per else None, bias=not per)
            self.k_norm = make_norm(cfg, dh, Hkv if per else None, bias=not per)
        elif cfg.qk_norm == "full":  # over all heads' numbers at once
            self.q_norm, self.k_norm = make_norm(cfg, H * dh), make_norm(cfg, Hkv * dh)


class FFN(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.W_in = nn.Linear(cfg.d_model, cfg.d_ff, bias=cfg.mlp_bias)
        self.W_gate = nn.Linear(cfg.d_model, cfg.d_ff, bias=cfg.mlp_bias) if cfg.gated_ffn else None
        self.W_out = nn.Linear(cfg.d_ff, cfg.d_model, bias=cfg.mlp_bias)


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        has_norm = cfg.norm != "none"
        norm_in = has_norm and cfg.norm_placement != "output"  # pre-, post- or sandwich norms
        norm_out = has_norm and cfg.norm_placement in ("sandwich", "output")  # on each sublayer's output
        self.ln1 = make_norm(cfg, cfg.d_model) if norm_in else None
        self.attn = Attention(cfg)
        self.ln2 = make_norm(cfg, cfg.d_model) if norm_in and cfg.has_ffn and not cfg.shared_norm else None
        self.mlp = FFN(cfg) if cfg.has_ffn else None
        self.ln1_out = make_norm(cfg, cfg.d_model) if norm_out else None
        self.ln2_out = make_norm(cfg, cfg.d_model) if norm_out and cfg.has_ffn else None


class MLMHead(nn.Module):
    """BERT's masked-LM head before the un-embedding: dense d -> d, activation, norm; and the output bias."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(cfg.d_model, cfg.d_model)
        self.norm = make_norm(cfg, cfg.d_model)
        self.bias = nn.Parameter(torch.zeros(cfg.vocab_size))


class KVCache:
    """Keys and values of the tokens seen so far, per layer, so each new token costs one position."""

    def __init__(self, n_layers: int) -> None:
        self.keys: list[Tensor | None] = [None] * n_layers
        self.values: list[Tensor | None] = [None] * n_layers

    @property
    def length(self) -> int:
        return 0 if self.keys[0] is None else self.keys[0].shape[-2]

    def extend(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        if self.keys[layer] is not None:
            k = torch.cat([self.keys[layer], k], dim=-2)
            v = torch.cat([self.values[layer], v], dim=-2)
        self.keys[layer], self.values[layer] = k, v
        return k, v


def output_logits(cfg: ModelConfig, logits: Tensor) -> Tensor:
    """The un-embedding's output as the model reports it: Granite scales it, Gemma 2 soft-caps it."""
    if cfg.logit_scale != 1.0:
        logits = logits * cfg.logit_scale
    if cfg.final_softcap is not None:
        logits = soft_cap(logits, cfg.final_softcap)
    return logits


class Transformer(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        d_embed = cfg.d_embed or cfg.d_model
        self.embed = nn.Embedding(cfg.vocab_size, d_embed)
        # OPT-350m: token embeddings narrower than the residual stream, projected in and back out
        self.project_in = nn.Linear(d_embed, cfg.d_model, bias=False) if d_embed != cfg.d_model else None
        self.project_out = nn.Linear(cfg.d_model, d_embed, bias=False) if d_embed != cfg.d_model else None
        self.pos_embed = nn.Embedding(cfg.n_ctx, cfg.d_model) if cfg.positions == "learned" else None
        if cfg.positions == "sinusoidal":
            self.register_buffer("sinusoid", sinusoidal_positions(cfg.n_ctx, cfg.d_model), persistent=False)
        self.type_embed = nn.Embedding(cfg.token_types, cfg.d_model) if cfg.token_types else None
        self.ln_embed = make_norm(cfg, cfg.d_model) if cfg.embed_norm else None
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.ln_final = make_norm(cfg, cfg.d_model) if cfg.final_norm and cfg.norm != "none" else None
        self.mlm = MLMHead(cfg) if cfg.mlm_head else None
        self.unembed = nn.Linear(d_embed, cfg.vocab_size, bias=cfg.unembed_bias)
        if cfg.tie_embeddings:
            self.unembed.weight = self.embed.weight

    # ------------------------------------------------------------------------------------------
    def forward(self, token_ids: Tensor, rec: Rec = _no_capture, cache: KVCache | None = None,
                last_only: bool = False) -> Tensor:
        """token_ids [B, n] -> logits [B, n, V] for every position ([B, 1, V] with ``last_only``,
        which is all generation needs: un-embedding every prompt position costs n x V)."""
        cfg = self.cfg
        n = token_ids.shape[-1]
        start = cache.length if cache is not None else 0
        if start + n > cfg.n_ctx:
            raise PromptError(f"{start + n} tokens do not fit this model's context of {cfg.n_ctx}")
        if cache is not None and not cfg.causal:
            raise ValueError("a KV cache needs causal attention: an encoder's earlier keys change with new tokens")
        positions = torch.arange(start, start + n, device=token_ids.device)

        x = self.embed(token_ids)                                          # [B, n, d]
        if self.project_in is not None:
            x = self.project_in(x)                                         # [B, n, d_embed] -> [B, n, d]
        rec("embed", None, x)
        if cfg.embed_scale != 1.0:                                         # Gemma: times sqrt(d); Granite
            x = x * torch.tensor(cfg.embed_scale, dtype=x.dtype)
        if cfg.positions in ("learned", "sinusoidal"):
            pos = self.pos_embed(positions) if self.pos_embed is not None else self.sinusoid[positions]
            rec("pos_embed", None, pos.unsqueeze(0))                       # [1, n, d]
            x = x + pos
        if self.type_embed is not None:                                    # BERT: segment 0's vector everywhere
            with weights_of(self.type_embed):                              # (real even when offloaded)
                segment = self.type_embed.weight[0].to(x.device).expand(1, n, -1)  # [1, n, d]
            rec("type_embed", None, segment)
            x = x + segment
        if self.ln_embed is not None:                                      # BERT, BLOOM: normalise the embeddings
            x = self.ln_embed(x, rec, "ln_embed")

        # a mask per window size (sliding layers see only the last W keys) and rotary angles per
        # kind of layer (Gemma 3's sliding layers turn with their own base)
        # A model placed across devices (core/placement.py): the stream moves to each block's device,
        # and masks and angles are made once per device.
        masks: dict = {}
        rotary: dict = {}
        for layer in range(cfg.n_layers):
            window, device = layer_window(cfg, layer), block_device(self, layer)
            x = x if device is None or x.device == device else x.to(device)
            if (window, x.device) not in masks:
                # one query and no window sees every key: no mask to build, nor to test on the device
                needed = cfg.causal and not (n == 1 and window is None)
                masks[window, x.device] = causal_mask(n, start + n, x.device, window) if needed else None
            if (window is not None, x.device) not in rotary:
                rotary[window is not None, x.device] = self.rotary_at(positions.to(x.device), window is not None)
            x = self.block_forward(layer, x, masks[window, x.device], rotary[window is not None, x.device], rec, cache)

        x = rec("resid_final", None, self.to_tail(x))
        if last_only:
            x = x[:, -1:]
        if self.ln_final is not None:
            x = self.ln_final(x, rec, "ln_final")
        logits = self.unembed_step(x)                                      # [B, n, V]
        rec("logits", None, logits)
        return logits

    def unembed_step(self, x: Tensor) -> Tensor:
        """Residual stream (after the final norm) -> logits; an MLM head transforms it first and adds a bias.
        (Granite's scale and Gemma 2's soft-cap apply to what comes out: ``output_logits``.)"""
        if self.project_out is not None:                                   # OPT-350m: [B, n, d] -> [B, n, d_embed]
            x = self.project_out(x)
        if self.mlm is None:
            return output_logits(self.cfg, self.unembed(x))
        h = self.mlm.norm(activation(self.cfg.activation)(self.mlm.dense(x)))  # dense, act, norm: [B, n, d]
        with weights_of(self.mlm):
            return output_logits(self.cfg, self.unembed(h) + self.mlm.bias.to(h.device))

    def block_forward(self, layer: int, x: Tensor, mask: Tensor | None, rotary: tuple[Tensor, Tensor] | None,
                      rec: Rec = _no_capture, cache: KVCache | None = None) -> Tensor:
        """One block: attention sublayer then FFN sublayer, each added to the residual stream."""
        cfg, blk = self.cfg, self.blocks[layer]
        B, n, _ = x.shape
        H, Hkv, dh = cfg.n_heads, cfg.kv_heads, cfg.d_head
        pre_norm = cfg.norm_placement in ("pre", "sandwich") and blk.ln1 is not None
        x = rec("resid_pre", layer, x)

        # attention: project to per-head queries, keys, values
        h = blk.ln1(x, rec, "ln1", layer) if pre_norm else x
        q, k, v = blk.attn.W_Q(h), blk.attn.W_K(h), blk.attn.W_V(h)        # [B, n, H*dh], [B, n, Hkv*dh] x 2
        if cfg.qkv_clip is not None:                                       # OLMo: clamp to [-clip, clip]
            q, k, v = (t.clamp(-cfg.qkv_clip, cfg.qkv_clip) for t in (q, k, v))
        if cfg.qk_norm == "full":                                          # OLMo 2: norm over all heads at once
            q, k = blk.attn.q_norm(q, rec, "attn.q_norm", layer), blk.attn.k_norm(k, rec, "attn.k_norm", layer)
        q = q.view(B, n, H, dh).transpose(1, 2)                            # [B, H, n, dh]
        k = k.view(B, n, Hkv, dh).transpose(1, 2)                          # [B, Hkv, n, dh]
        v = v.view(B, n, Hkv, dh).transpose(1, 2)                          # [B, Hkv, n, dh]
        if cfg.qk_norm in ("head", "per_head"):                            # Qwen3, Gemma 3: norm each head's q, k
            q, k = blk.attn.q_norm(q, rec, "attn.q_norm", layer), blk.attn.k_norm(k, rec, "attn.k_norm", layer)
        if rotary is not None:  # rotary positions turn q and k by an angle that grows with position
            turn = apply_rotary_interleaved if cfg.rotary_interleaved else apply_rotary
            q, k = turn(q, *rotary), turn(k, *rotary)
        if cache is not None:
            k, v = cache.extend(layer, k, v)                               # [B, Hkv, m, dh]
        rec("attn.q", layer, q)
        rec("attn.k", layer, k)
        rec("attn.v", layer, v)
        if records_attention(rec, layer) or not fusable(cfg):
            scores, precap = layer_scores(cfg, q, k, mask)                 # scale, bias, mask, cap: [B, H, n, m]
            if precap is not None:                                         # Gemma 2: the scores before the cap
                rec("attn.scores_precap", layer, precap)
                del precap
            rec("attn.scores", layer, scores)                              # what enters the softmax
            pattern = attention_pattern(scores)                            # softmax per query row
            rec("attn.pattern", layer, pattern)
            z = weighted_values(pattern, v)                                # [B, H, n, dh]
        else:  # nobody looks at the n x m scores: the same math in one fused kernel
            z = fused_attention(q, k, v, mask, cfg.attn_scale)             # [B, H, n, dh]
        z = rec("attn.z", layer, z)
        attn_out = blk.attn.W_O(z.transpose(1, 2).reshape(B, n, H * dh))   # concat heads, W_O: [B, n, d]
        if blk.ln1_out is not None:                                        # Gemma 2/3, OLMo 2: norm the output
            attn_out = blk.ln1_out(attn_out, rec, "ln1_out", layer)
        if cfg.residual_scale != 1.0:                                      # Granite: scaled before it is added
            attn_out = attn_out * cfg.residual_scale
        attn_out = rec("attn.out", layer, attn_out)                        # what is added to the stream

        mid = x + attn_out
        if not pre_norm and blk.ln1 is not None:                           # post-norm: normalise the sum
            mid = blk.ln1(mid, rec, "ln1", layer)
        rec("resid_mid", layer, mid)
        if blk.mlp is None:
            return mid

        # FFN: expand to d_ff, non-linearity, contract back to d
        ffn_in = x if cfg.parallel_residual else mid
        if cfg.shared_norm:                                                # one norm feeds both sublayers
            ffn_in = h
        elif pre_norm or cfg.parallel_residual:
            ffn_in = blk.ln2(ffn_in, rec, "ln2", layer)
        if blk.mlp.W_gate is not None:                                     # gated: act(x W_gate) * (x W_in)
            pre = blk.mlp.W_gate(ffn_in)
            rec("mlp.pre", layer, pre)
            post = activation(cfg.activation)(pre) * blk.mlp.W_in(ffn_in)
        else:
            pre = blk.mlp.W_in(ffn_in)                                     # [B, n, f]
            rec("mlp.pre", layer, pre)
            post = activation(cfg.activation)(pre)
        post = rec("mlp.post", layer, post)
        mlp_out = blk.mlp.W_out(post)                                      # [B, n, d]
        if blk.ln2_out is not None:
            mlp_out = blk.ln2_out(mlp_out, rec, "ln2_out", layer)
        if cfg.residual_scale != 1.0:
            mlp_out = mlp_out * cfg.residual_scale
        mlp_out = rec("mlp.out", layer, mlp_out)

        out = (x + attn_out + mlp_out) if cfg.parallel_residual else (mid + mlp_out)
        if not pre_norm and blk.ln2 is not None:
            out = blk.ln2(out, rec, "ln2", layer)
        return out

    # ------------------------------------------------------------------------------------------
    def to_tail(self, x: Tensor) -> Tensor:
        """``x`` on the device of the final norm and un-embedding (a no-op unless the model was placed)."""
        device = tail_device(self) if is_placed(self) else x.device
        return x if x.device == device else x.to(device)

    def final_logits(self, resid_final: Tensor) -> Tensor:
        """The last two steps of the forward pass: final norm, then un-embedding."""
        resid_final = self.to_tail(resid_final)
        x = self.ln_final(resid_final) if self.ln_final is not None else resid_final
        return self.unembed_step(x)

    def rotary_at(self, positions: Tensor, local: bool = False) -> tuple[Tensor, Tensor] | None:
        """cos, sin for these positions; ``local``: for a sliding layer (Gemma 3 gives those their own base)."""
        cfg = self.cfg
        if cfg.positions != "rotary":
            return None
        if local and cfg.rotary_base_local is not None:
            return rotary_angles(positions, cfg.rotary_dim or cfg.d_head, cfg.rotary_base_local)
        return rotary_angles(positions, cfg.rotary_dim or cfg.d_head, cfg.rotary_base, cfg.rope or None)

    def rotary_for(self, n: int, device: torch.device | str, layer: int = 0) -> tuple[Tensor, Tensor] | None:
        """The rotary angles block ``layer`` uses for a sequence of n tokens from position 0."""
        return self.rotary_at(torch.arange(n, device=device), layer_window(self.cfg, layer) is not None)

    def num_parameters(self) -> int:
        seen, total = set(), 0
        for p in self.parameters():
            if id(p) not in seen:
                seen.add(id(p))
                total += p.numel()
        return total
