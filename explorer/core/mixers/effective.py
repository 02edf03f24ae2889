"""The effective attention of a recurrent or convolutional layer: the weights of the sum over earlier tokens it computes.

Each of these layers' outputs is, per head, a weighted sum of vectors of earlier tokens (its "values"):

* Gated DeltaNet: y_t = sum_{s<=t} A[t, s] v_s with A[t, s] = beta_s q_t^T P(t, s) k_s, P(t, s) the product of
  the decays and delta-rule corrections alpha_r (I - beta_r k_r k_r^T) of the tokens between (r = s+1..t);
* Mamba-2: y_t = sum_{s<=t} M[t, s] x_s with M[t, s] = (C_t . B_s) exp(A (dt_{s+1} + ... + dt_t)) dt_s, plus
  the skip D on the diagonal (M = L * C B^T: "L" the decays, as TransformerLens names it);
* LFM2's short convolution: per channel c, y_t[c] = sum_{t-K<s<=t} C_t[c] w[c, K-1-(t-s)] B_s[c] x_s[c] (a band
  K wide; one "head" per channel), plus C_t[c] b[c] where the convolution has a bias (``mixed_values``' offset).

The weights are derived exactly, on demand, from what the layer recorded (trace keys ``mixer.*``; re-run from
the block's input when not stored), in float64, for any block of query rows x key columns: the memory a call
holds grows with the block asked for, never as n x n for every head (core/analysis/effective_tiles.py tiles
them for long prompts). DeltaNet's block follows the forward pass's chunks of 64 tokens, carrying only the
asked-for key columns through the chunks before the rows (each key's contribution evolves on its own).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from explorer.core.mixers.deltanet import CHUNK
from explorer.core.placement import weights_of

if TYPE_CHECKING:
    from explorer.core.config import ModelConfig
    from explorer.core.trace import Trace

KIND_NAMES = {"deltanet": "Gated DeltaNet", "mamba2": "Mamba-2", "short_conv": "short convolution"}
VALUES = {"deltanet": "mixer.v", "mamba2": "mixer.x", "short_conv": "mixer.x"}  # what the weights mix
ROW_BLOCK = 256  # query rows per step of ``effective_attention``


def effective_kind(cfg: ModelConfig, layer: int) -> str | None:
    """The kind of layer whose effective attention ``layer`` has ("Gated DeltaNet", "Mamba-2", "short
    convolution"); None for an attention layer (its pattern is ``attn.pattern``) or a layer without a mixer."""
    return KIND_NAMES.get(cfg.layer(layer).mixer)


def head_count(cfg: ModelConfig, layer: int) -> int:
    """How many maps the layer has: DeltaNet's value heads, Mamba-2's heads, a convolution's channels (an
    attention layer: its heads)."""
    mixer = cfg.layer(layer).mixer
    return {"deltanet": cfg.delta_v_heads, "mamba2": cfg.ssm_heads, "short_conv": cfg.d_model}.get(
        mixer, cfg.layer(layer).n_heads)


def scan_of(cfg: ModelConfig, layer: int) -> str | None:
    """The recurrent mixer whose effective attention ``layer`` has: its own, or (Falcon-H1) the Mamba-2 scan beside
    its attention (``effective_kind`` is None there: the layer's pattern is its attention's); None without one."""
    plan = cfg.layer(layer)
    return "mamba2" if plan.parallel_ssm else plan.mixer if plan.mixer in KIND_NAMES else None


def scan_heads(cfg: ModelConfig, layer: int) -> int:
    """How many effective-attention maps the layer's scan has."""
    return {"deltanet": cfg.delta_v_heads, "mamba2": cfg.ssm_heads, "short_conv": cfg.d_model}[scan_of(cfg, layer)]


def _f64(trace: Trace, key: str, index: torch.Tensor | None = None, axis: int = 0) -> torch.Tensor:
    """The trace's ``key`` in float64 (a copy: the trace's arrays are read-only), only the ``index`` entries along
    ``axis`` when given (a few heads of many: the others are not copied)."""
    values = np.asarray(trace[key])
    if index is not None:
        values = np.take(values, index.numpy(), axis=axis)
    return torch.from_numpy(np.array(values, dtype=np.float64))


def _heads(trace: Trace, layer: int, heads) -> list[int]:
    count = scan_heads(trace.config, layer)
    chosen = list(range(count))[heads] if isinstance(heads, slice) else [int(h) for h in heads]
    if any(not 0 <= h < count for h in chosen):
        raise ValueError(f"layer {layer} has {count} maps (heads 0..{count - 1})")
    return chosen


def effective_block(trace: Trace, layer: int, heads=slice(None), rows: tuple[int, int] | None = None,
                    cols: tuple[int, int] | None = None) -> np.ndarray:
    """The effective attention of ``heads`` (a list or slice) for query ``rows`` x key ``cols`` (half-open; whole
    sequence by default): float32 [h, r, c], 0 where a key is after the query (or outside a convolution's band)."""
    cfg, n = trace.config, trace.n_tokens
    mixer = scan_of(cfg, layer)
    if mixer is None:
        raise ValueError(f"layer {layer} is an attention layer: its pattern is blocks.{layer}.attn.pattern")
    chosen = _heads(trace, layer, heads)
    r0, r1 = (0, n) if rows is None else (max(0, int(rows[0])), min(n, int(rows[1])))
    c0, c1 = (0, n) if cols is None else (max(0, int(cols[0])), min(n, int(cols[1])))
    if r1 <= r0 or c1 <= c0 or not chosen:
        return np.zeros((len(chosen), max(0, r1 - r0), max(0, c1 - c0)), dtype=np.float32)
    index = torch.tensor(chosen)
    with torch.inference_mode():
        if mixer == "deltanet":
            out = _deltanet(trace, layer, index, (r0, r1), (c0, min(c1, r1)))
        elif mixer == "mamba2":
            out = _mamba2(trace, layer, index, (r0, r1), (c0, c1))
        else:
            out = _short_conv(trace, layer, index, (r0, r1), (c0, c1))
    full = np.zeros((len(chosen), r1 - r0, c1 - c0), dtype=np.float32)
    full[:, :, :out.shape[-1]] = out.float().numpy()
    return full


def effective_attention(trace: Trace, layer: int, heads=slice(None)) -> np.ndarray:
    """The whole [h, n, n] effective attention of ``heads`` (what ``blocks.{l}.mixer.effective_attention``
    holds), computed ``ROW_BLOCK`` query rows at a time."""
    n = trace.n_tokens
    parts = [effective_block(trace, layer, heads, (r0, min(n, r0 + ROW_BLOCK))) for r0 in range(0, n, ROW_BLOCK)]
    return np.concatenate(parts, axis=1) if parts else np.zeros((0, 0, 0), np.float32)


def mixed_values(trace: Trace, layer: int) -> tuple[np.ndarray, np.ndarray | None]:
    """(the vectors the weights mix [H, n, dv], what the layer adds besides them [H, n, dv] or None): the layer's
    ``mixer.y`` is effective_attention @ values (+ offset). A convolution's channels are its heads [d, n, 1]."""
    mixer = scan_of(trace.config, layer)
    values = np.asarray(trace[f"blocks.{layer}.{VALUES[mixer]}"], dtype=np.float32)
    if mixer != "short_conv":
        return values, None
    conv = trace._model.blocks[layer].mixer
    offset = None
    if conv.conv_b is not None:
        with weights_of(conv):
            bias = conv.conv_b.detach().float().cpu().numpy()
        offset = (np.asarray(trace[f"blocks.{layer}.mixer.C"], dtype=np.float32) * bias).T[:, :, None]
    return values.T[:, :, None], offset


def _deltanet(trace: Trace, layer: int, heads: torch.Tensor, rows: tuple[int, int], cols: tuple[int, int]
              ) -> torch.Tensor:
    cfg = trace.config
    group = cfg.delta_v_heads // cfg.delta_k_heads
    key = f"blocks.{layer}.mixer."
    q = _f64(trace, key + "q", heads // group) * cfg.delta_d_k ** -0.5    # [h, n, dk], as the rule scales it
    k = _f64(trace, key + "k", heads // group)
    g, beta = _f64(trace, key + "log_decay", heads), _f64(trace, key + "beta", heads)  # [h, n]
    (r0, r1), (c0, c1) = rows, cols
    h, _, dk = k.shape
    out = torch.zeros(h, r1 - r0, c1 - c0, dtype=torch.float64)
    X = torch.zeros(h, dk, c1 - c0, dtype=torch.float64)  # the memory, by source key: S = X @ values
    for a in range(0, r1, CHUNK):
        b = min(r1, a + CHUNK)
        qc, kc, bc = q[:, a:b], k[:, a:b], beta[:, a:b, None]
        G = g[:, a:b].cumsum(-1)
        lower = torch.ones(b - a, b - a, dtype=torch.bool).tril()
        D = (G[..., :, None] - G[..., None, :]).masked_fill(~lower, float("-inf")).exp()
        T = (((kc * bc) @ kc.transpose(-1, -2)) * D).masked_fill(~lower.tril(-1), 0) + torch.eye(b - a)
        W = torch.linalg.solve_triangular(T, kc * bc * G.exp()[..., None], upper=False, unitriangular=True)
        p1 = min(max(a, c0), c1) - c0                                   # tracked keys before this chunk
        o0, o1 = max(a, c0), min(b, c1)                                 # tracked keys inside it
        V_prev = -W @ X[..., :p1]                                       # [h, C, p1]: corrections of the old keys
        V_own = torch.zeros(h, b - a, max(0, o1 - o0), dtype=torch.float64)
        if o1 > o0:
            eye = torch.zeros(b - a, o1 - o0, dtype=torch.float64)
            eye[torch.arange(o0, o1) - a, torch.arange(o1 - o0)] = 1.0
            V_own = torch.linalg.solve_triangular(T, bc * eye, upper=False, unitriangular=True)
        intra = (qc @ kc.transpose(-1, -2)) * D
        q0, q1 = max(a, r0), min(b, r1)
        if q1 > q0:
            sel = slice(q0 - a, q1 - a)
            out[:, q0 - r0:q1 - r0, :p1] = (qc[:, sel] * G[:, sel].exp()[..., None]) @ X[..., :p1] + \
                intra[:, sel] @ V_prev
            if o1 > o0:
                out[:, q0 - r0:q1 - r0, o0 - c0:o1 - c0] = intra[:, sel] @ V_own
        Kd = (kc * (G[..., -1:] - G).exp()[..., None]).transpose(-1, -2)  # [h, dk, C]
        X[..., :p1] = X[..., :p1] * G[..., -1:, None].exp() + Kd @ V_prev
        if o1 > o0:
            X[..., o0 - c0:o1 - c0] = Kd @ V_own
    return out


def _mamba2(trace: Trace, layer: int, heads: torch.Tensor, rows: tuple[int, int], cols: tuple[int, int]
            ) -> torch.Tensor:
    cfg = trace.config
    group = cfg.ssm_heads // cfg.ssm_groups
    key = f"blocks.{layer}.mixer."
    (r0, r1), (c0, c1) = rows, cols
    B, C = _f64(trace, key + "B", heads // group), _f64(trace, key + "C", heads // group)   # [h, n, N]
    dt, a = _f64(trace, key + "dt", heads), _f64(trace, key + "log_decay", heads)            # [h, n]
    cs = a.cumsum(-1)
    t, s = torch.arange(r0, r1)[:, None], torch.arange(c0, c1)[None, :]
    later = s > t
    L = (cs[:, r0:r1, None] - cs[:, None, c0:c1]).masked_fill(later, float("-inf")).exp()
    M = (C[:, r0:r1] @ B[:, c0:c1].transpose(-1, -2)) * L * dt[:, None, c0:c1]
    mix = trace._model.blocks[layer].mixer
    with weights_of(mix):
        D = mix.D.detach().double().cpu()[heads]
    return M + D[:, None, None] * (s == t).double()


def _short_conv(trace: Trace, layer: int, heads: torch.Tensor, rows: tuple[int, int], cols: tuple[int, int]
                ) -> torch.Tensor:
    key = f"blocks.{layer}.mixer."
    (r0, r1), (c0, c1) = rows, cols
    B, C = _f64(trace, key + "B", heads, axis=1).T, _f64(trace, key + "C", heads, axis=1).T    # [h, n]
    mix = trace._model.blocks[layer].mixer
    with weights_of(mix):
        w = mix.conv.detach().double().cpu()[heads]                                    # [h, K]
    K = w.shape[-1]
    lag = torch.arange(r0, r1)[:, None] - torch.arange(c0, c1)[None, :]               # t - s
    inside = (lag >= 0) & (lag < K)
    taps = w[:, (K - 1 - lag.clamp(0, K - 1))] * inside                              # [h, r, c]
    return C[:, r0:r1, None] * taps * B[:, None, c0:c1]
