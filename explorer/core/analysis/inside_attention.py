"""Inside one attention layer, for learners: the matrices the textbook writes, read from a trace (no Qt).

* ``head_qkv``: the selected head's queries, keys and values as matrices over the prompt (rows = tokens,
  columns = the head's dimensions), the keys and values those of the K/V head it shares (grouped-query
  attention), and its scores Q K^T * scale recomputed from them by the forward pass's own rule
  (``layer_scores``: the scale, ALiBi, the mask, a soft cap), so the learner can check one cell by hand.
* ``heads_to_output``: every head's output z_h (pattern @ V) side by side, the concatenation [n, H*dv],
  and its product with W_O (the model's own output projection, bias included), which is what the layer
  adds to the stream where the family puts nothing after it (``matches``; else an output norm follows).
* ``kv_cache_at``: what a generation's KV cache holds while it produces generated token t: the keys and
  values of every position before it (the prompt, then the tokens generated so far), which positions this
  step computed (the whole prompt at step 0, one token after) and which it reused, and the cache's size.
  Nothing at a position sees a later one, so the keys a cache holds are the whole sequence's trace's rows
  (``tests/core/test_inside_attention.py`` checks them against a real cache filled step by step).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from explorer.core.trace import Trace


def _attention_layer(trace: Trace, layer: int) -> None:
    cfg = trace.config
    if not 0 <= layer < cfg.n_layers:
        raise ValueError(f"layer {layer} is not one of this model's {cfg.n_layers}")
    if not cfg.layer(layer).is_attention:
        raise ValueError(f"layer {layer} is not an attention layer (it keeps a recurrent state, not keys and values)")


def kv_head_of(trace: Trace, layer: int, head: int) -> int:
    """The K/V head that query head ``head`` reads (grouped-query attention: H / Hkv query heads share one)."""
    H = int(trace[f"blocks.{layer}.attn.q"].shape[0])
    Hkv = int(trace[f"blocks.{layer}.attn.k"].shape[0])
    return head // max(1, H // Hkv)


@dataclass(frozen=True, eq=False)
class HeadQKV:
    """One head's Q [n, dk], K [n, dk], V [n, dv] (float32; q and k after rotary, as the scores use them), the
    K/V head it reads, and its scores [n, n] (masked entries -inf) from ``layer_scores``."""

    layer: int
    head: int
    kv_head: int
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    scores: np.ndarray
    scale: float


def head_qkv(trace: Trace, layer: int, head: int) -> HeadQKV:
    """The head's Q, K and V over the trace's tokens and its scores (``Trace.head``: computed from the stored q
    and k by ``layer_scores``, the forward pass's own rule)."""
    _attention_layer(trace, layer)
    q_all = trace[f"blocks.{layer}.attn.q"]
    if not 0 <= head < q_all.shape[0]:
        raise ValueError(f"head {head} is not one of layer {layer}'s {q_all.shape[0]}")
    g = kv_head_of(trace, layer, head)
    q = np.asarray(q_all[head], dtype=np.float32)
    k = np.asarray(trace[f"blocks.{layer}.attn.k"][g], dtype=np.float32)
    v = np.asarray(trace[f"blocks.{layer}.attn.v"][g], dtype=np.float32)
    cfg = trace.config
    scale = float(cfg.attn_scale) if cfg.attn_scale is not None else 1.0 / float(np.sqrt(q.shape[-1]))
    scores = np.asarray(trace.head(layer, head, "scores"), dtype=np.float32)
    return HeadQKV(layer, head, g, q, k, v, scores, scale)


@dataclass(frozen=True, eq=False)
class HeadsToOutput:
    """Every head's output z_h [H, n, dv], their concatenation [n, H*dv] (head h's columns h*dv .. (h+1)*dv - 1),
    W_O's shape (d, H*dv), the product concat @ W_O^T + b_O [n, d] (float32), and whether it is the stored
    ``attn.out`` (``matches``, with the largest difference ``max_diff``; False where an output norm or scale follows)."""

    layer: int
    z: np.ndarray
    concat: np.ndarray
    w_o_shape: tuple[int, int]
    out: np.ndarray
    matches: bool
    max_diff: float


def heads_to_output(trace: Trace, layer: int) -> HeadsToOutput:
    """The heads concatenated and projected by the layer's own W_O (see the module)."""
    import torch

    from explorer.core.placement import model_dtype, weights_of

    _attention_layer(trace, layer)
    model = getattr(trace, "_model", None)
    if model is None:
        raise ValueError("the heads' projection needs the model: this trace was loaded without it")
    z = np.asarray(trace[f"blocks.{layer}.attn.z"], dtype=np.float32)  # [H, n, dv] (after any output gate)
    H, n, dv = z.shape
    concat = np.ascontiguousarray(z.transpose(1, 0, 2).reshape(n, H * dv))
    W_O = model.blocks[layer].attn.W_O
    with torch.inference_mode(), weights_of(W_O) as proj:
        weight = getattr(proj, "weight", None)
        device = weight.device if weight is not None else torch.device("cpu")
        out = proj(torch.as_tensor(concat, device=device).to(model_dtype(model))[None])[0].float().cpu().numpy()
        shape = (int(out.shape[-1]), H * dv)
    stored = np.asarray(trace[f"blocks.{layer}.attn.out"], dtype=np.float32)
    diff = float(np.max(np.abs(out - stored))) if out.size else 0.0
    scale = float(np.max(np.abs(stored))) if stored.size else 0.0
    return HeadsToOutput(layer, z, concat, shape, out, bool(diff <= 1e-4 * max(1.0, scale)), diff)


@dataclass(frozen=True, eq=False)
class KVCacheStep:
    """The KV cache while generated token ``step`` is produced (``n_prompt`` prompt tokens before it): the keys
    and values of the selected layer's K/V head at positions 0 .. ``length`` - 1 (float32 [length, dk], [length, dv]),
    ``new`` [length] bool (computed by this step's forward pass; the others were read back from the cache), and
    the bytes the whole cache holds (every attention layer, K and V) in the model's dtype."""

    layer: int
    kv_head: int
    step: int
    n_prompt: int
    length: int
    keys: np.ndarray
    values: np.ndarray
    new: np.ndarray
    nbytes: int
    bytes_per_token: int

    @property
    def reused(self) -> int:
        return int(self.length - self.new.sum())


def cache_bytes_per_token(trace: Trace, itemsize: int) -> int:
    """Bytes one position adds to a KV cache: every attention layer's K/V heads, keys and values."""
    total = 0
    for layer in range(trace.config.n_layers):
        if not trace.config.layer(layer).is_attention or f"blocks.{layer}.attn.k" not in trace:
            continue
        k, v = trace[f"blocks.{layer}.attn.k"], trace[f"blocks.{layer}.attn.v"]
        total += (k.shape[0] * k.shape[-1] + v.shape[0] * v.shape[-1]) * itemsize
    return int(total)


def kv_cache_at(trace: Trace, n_prompt: int, step: int, layer: int, kv_head: int = 0, itemsize: int = 4) -> KVCacheStep:
    """The cache of a generation from ``trace`` (the prompt and at least ``step`` generated tokens) while it produces
    generated token ``step``: step 0 runs the whole prompt (every position new); step t > 0 runs one position,
    n_prompt + t - 1 (the token generated last), and reuses the n_prompt + t - 1 before it."""
    _attention_layer(trace, layer)
    n = trace.n_tokens
    if not 0 < n_prompt <= n:
        raise ValueError(f"a prompt of 1..{n} tokens, not {n_prompt}")
    if not 0 <= step <= n - n_prompt:
        raise ValueError(f"step {step} is not in this trace ({n - n_prompt} generated tokens)")
    length = n_prompt + step  # positions whose keys and values exist while generated token ``step`` is produced
    k_all, v_all = trace[f"blocks.{layer}.attn.k"], trace[f"blocks.{layer}.attn.v"]
    if not 0 <= kv_head < k_all.shape[0]:
        raise ValueError(f"K/V head {kv_head} is not one of layer {layer}'s {k_all.shape[0]}")
    new = np.zeros(length, dtype=bool)
    new[:n_prompt] = step == 0
    if step > 0:
        new[length - 1] = True
    per_token = cache_bytes_per_token(trace, itemsize)
    return KVCacheStep(layer, kv_head, step, n_prompt, length, np.asarray(k_all[kv_head, :length], dtype=np.float32),
                       np.asarray(v_all[kv_head, :length], dtype=np.float32), new, per_token * length, per_token)
