"""Pure functions behind a Features panel: they read feature activations (``SAE.activations(trace)``,
float32 [n_tokens, d_sae]) and the SAE's weights, never run the model.

* ``trace_activations``: an SAE's activations over a Trace, memoised with it (the panel's first read;
  ``SAE.activations(trace, rows=...)`` computes only the visible rows, for a progressive view);
* ``top_features``: the strongest features of one token (highest first, ties by lower id);
* ``strongest_features``: the features with the largest activation anywhere in the prompt and their
  columns, a tokens x features view (``rows`` limits the work to the visible tokens first);
* ``feature_along``: one feature's activation at every position;
* ``feature_vocab_effect``: what a feature writes, read directly: its decoder row carried into the
  residual stream (through W_O for an attn.hook_z SAE, W_out for an mlp.hook_post one), times the
  final norm's weight, through the un-embedding: the tokens it promotes and suppresses. As for
  neurons (``analysis/neurons.py``), the norm's centring and division and every later layer are
  ignored: a hint, not a proof;
* ``reconstruction_error``: at each token, how much of the activation the SAE does not explain
  (``|x - x_hat|``, relative to ``|x|``, and the fraction of variance unexplained), so a poor SAE is
  not read as the model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from explorer.core.analysis.ranking import top_k_ids
from explorer.core.features.sae import SAE, check_feature


def trace_activations(trace: Any, sae: SAE) -> np.ndarray:
    """``sae.activations(trace)`` computed once per trace and SAE and kept with the trace (``Trace.memo``), so
    a panel's worker computes it and the GUI thread reads it without waiting (``Trace.memo_get``)."""
    return trace.memo(("features", id(sae)), lambda: sae.activations(trace))


def top_features(acts: np.ndarray, token: int, k: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` most active features at position ``token``: (ids int64, activations float32), only
    features that fire (activation > 0)."""
    row = np.asarray(acts[int(token)], dtype=np.float32)
    ids = top_k_ids(row, k)
    ids = ids[row[ids] > 0]
    return ids, row[ids]


def strongest_features(acts: np.ndarray, k: int = 32, rows: slice | np.ndarray | None = None,
                       ) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` features with the largest activation on any token (of ``rows``, when given: the visible
    ones first), and their columns over those tokens: (ids int64 [<= k], float32 [n_rows, len(ids)])."""
    view = np.asarray(acts, dtype=np.float32)
    if rows is not None:
        view = view[rows]
    if view.shape[0] == 0:
        return np.zeros(0, dtype=np.int64), np.zeros((0, 0), dtype=np.float32)
    peak = view.max(axis=0)
    ids = top_k_ids(peak, k)
    ids = ids[peak[ids] > 0]
    return ids, view[:, ids]


def feature_along(acts: np.ndarray, feature: int) -> np.ndarray:
    """Feature ``feature``'s activation at every position: float32 [n_tokens]."""
    if not 0 <= int(feature) < acts.shape[1]:
        raise IndexError(f"feature {feature} is outside 0-{acts.shape[1] - 1}")
    return np.asarray(acts[:, int(feature)], dtype=np.float32).copy()


def residual_direction(sae: SAE, model: Any, feature: int) -> np.ndarray:
    """What one unit of ``feature`` adds to the residual stream: float32 [d_model]."""
    check_feature(sae, feature)
    hook = sae.hook_out or sae.hook
    with torch.inference_mode():
        row = sae.decoder_rows()[int(feature)].float()
        if hook.site == "attn.z":                 # the heads' outputs, flattened head-major, through W_O
            row = model.blocks[hook.layer].attn.W_O.weight.float().cpu() @ row
        elif hook.site == "mlp.post":             # neuron activations, through W_out
            row = model.blocks[hook.layer].mlp.W_out.weight.float().cpu() @ row
    return row.numpy().astype(np.float32)


def vocab_effect(model: Any, direction: np.ndarray, k: int = 10, fold_norm: bool = True,
                 vocab_size: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A residual direction read through the final norm's weight and the un-embedding:
    (promoted ids, values, suppressed ids, values), k each, strongest first."""
    with torch.inference_mode():
        param = next(model.parameters())
        d = torch.as_tensor(np.asarray(direction, dtype=np.float32)).to(param.device)
        gain = model.ln_final.gain() if fold_norm and getattr(model, "ln_final", None) is not None else None
        if gain is not None:
            d = d * gain.float()
        if getattr(model, "project_out", None) is not None:
            d = model.project_out.weight.float() @ d
        W_U = model.unembed.weight
        if vocab_size is not None:
            W_U = W_U[: max(1, int(vocab_size))]
        effect = (W_U.float() @ d).cpu().numpy().astype(np.float64)
    top, bottom = top_k_ids(effect, k), top_k_ids(-effect, k)
    return top, effect[top].astype(np.float32), bottom, effect[bottom].astype(np.float32)


def feature_vocab_effect(sae: SAE, model: Any, feature: int, k: int = 10, fold_norm: bool = True,
                         vocab_size: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The tokens feature ``feature`` promotes and suppresses (see the module docstring)."""
    return vocab_effect(model, residual_direction(sae, model, feature), k, fold_norm, vocab_size)


@dataclass(frozen=True)
class Reconstruction:
    error_norm: np.ndarray       # |x - x_hat| per token, float32 [n]
    relative: np.ndarray         # |x - x_hat| / |x| per token (0 where x is 0)
    unexplained: float           # fraction of variance unexplained: sum |x - x_hat|^2 / sum |x - mean|^2


def reconstruction_error(sae: SAE, trace: Any, acts: np.ndarray | None = None) -> Reconstruction:
    """How much of the activation the SAE (or, for a transcoder, of its output site) does not explain."""
    target = sae.input_of(trace)
    if sae.hook_out is not None:
        target = np.asarray(trace[sae.hook_out.key], dtype=np.float32)
        if sae.hook_out.site == "attn.z":
            target = target.transpose(1, 0, 2).reshape(target.shape[1], -1)
    if acts is None:
        acts = sae.activations(trace)
    with torch.inference_mode():
        recon = sae.decode(torch.from_numpy(np.asarray(acts, dtype=np.float32))).numpy()
    diff = (target - recon).astype(np.float64)
    err = np.linalg.norm(diff, axis=-1)
    size = np.linalg.norm(target.astype(np.float64), axis=-1)
    relative = np.divide(err, size, out=np.zeros_like(err), where=size > 0)
    spread = ((target - target.mean(0)) ** 2).sum()
    unexplained = float((diff ** 2).sum() / spread) if spread > 0 else 0.0
    return Reconstruction(err.astype(np.float32), relative.astype(np.float32), unexplained)


def trace_feature_writes(trace: Any, sae: SAE, feature: int, k: int = 10, vocab_size: int | None = None,
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """``feature_vocab_effect`` with the weights of the model ``trace`` came from (None for a trace read from
    a file: it has no weights), memoised with the trace."""
    model = getattr(trace, "_model", None)
    if model is None:
        return None
    return trace.memo(("features.writes", id(sae), int(feature), k, vocab_size),
                      lambda: feature_vocab_effect(sae, model, int(feature), k, vocab_size=vocab_size))
