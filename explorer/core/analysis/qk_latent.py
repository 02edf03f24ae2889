"""The readers of a latent-attention head's query and key (DeepSeek-V2/V3's MLA, core/mla.py), for the QK split.

In MLA a head's query is [no-rotary part, rotary part] read off the block's normed input x either by W_Q
(``W_Qm``) or through a small latent: q = W_Q_b(q_a_norm(W_Q_a x)). Its key's no-rotary part comes through
the key/value latent, k_pass = W_KV_b(kv_a_norm(latent)) with latent = the first ``kv_lora_rank`` rows of
W_KV_a x, and its rotary part is the last ``rotary_dim`` rows of W_KV_a x itself (one rotary key shared by
every head). The two latent RMSNorms divide by the root mean square of their latent; frozen at the value
it had at this position (computed here from the recorded stream through the block's frozen input norm,
as the forward pass computed it), each is a fixed diagonal map, so every step is linear and the query and
key are readers of x: ``latent_reader`` returns that reader [d, d_head] and the constant the projections'
biases add, and how many leading columns do not turn (the rest turn by the position's rotary angle).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from explorer.core.analysis.frozen import FrozenNorm, freeze, param
from explorer.core.placement import weights_of

if TYPE_CHECKING:
    from explorer.core.model import Transformer


def _bias(linear) -> np.ndarray:
    return param(linear.bias) if linear.bias is not None else np.zeros(linear.weight.shape[0])


def _through_latent(x: np.ndarray, down, norm, rows: slice, what: str) -> tuple[np.ndarray, np.ndarray, FrozenNorm]:
    """(reader [d, r], constant [r], the frozen norm) of a latent norm(down(x)[rows]) as a linear read of x."""
    W, b = param(down.weight)[rows], _bias(down)[rows]                   # [r, d], [r]
    latent = x @ W.T + b
    frozen = freeze(norm, float(np.sqrt(np.mean(latent ** 2) + norm.eps)), what=what)
    return frozen.apply(W.T), frozen.apply(b), frozen                   # norm(W x + b) = x apply(W^T) + apply(b)


def latent_reader(model: Transformer, layer: int, head: int, x: np.ndarray,
                  which: str) -> tuple[np.ndarray, np.ndarray, int]:
    """Head ``head``'s query (``which="q"``), key (``"k"``) or value (``"v"``: the OV circuit's copied embedding)
    in block ``layer`` as a read of the block's normed input ``x`` [d] at one position: (reader [d, d_head],
    constant [d_head], the columns that do not turn)."""
    cfg = model.cfg
    plan = cfg.layer(layer)
    dh, rope, rank = plan.d_head, cfg.rotary_dim, cfg.kv_lora_rank
    nope, dv = dh - rope, plan.d_head_v
    attn = model.blocks[layer].attn
    x = np.asarray(x, dtype=np.float64)
    with weights_of(attn):
        if which == "q":
            rows = slice(head * dh, (head + 1) * dh)
            if cfg.q_lora_rank is None:
                return param(attn.W_Qm.weight)[rows].T, np.zeros(dh), nope
            A, c, _ = _through_latent(x, attn.W_Q_a, attn.q_a_norm, slice(None), "the query latent's norm")
            W_b = param(attn.W_Q_b.weight)[rows]                           # [dh, q_rank]
            return A @ W_b.T, W_b @ c, nope
        A, c, _ = _through_latent(x, attn.W_KV_a, attn.kv_a_norm, slice(0, rank), "the key latent's norm")
        if which == "v":                                                   # the head's value rows, after its key's
            W_v = param(attn.W_KV_b.weight)[head * (nope + dv) + nope:(head + 1) * (nope + dv)]
            return A @ W_v.T, W_v @ c, dv
        W_b = param(attn.W_KV_b.weight)[head * (nope + dv):head * (nope + dv) + nope]   # the head's key rows
        W_rot, b_rot = param(attn.W_KV_a.weight)[rank:rank + rope], _bias(attn.W_KV_a)[rank:rank + rope]
        reader = np.concatenate([A @ W_b.T, W_rot.T], axis=1)              # [d, nope + rope]
        return reader, np.concatenate([W_b @ c, b_rot]), nope
