"""FFN neurons for the neurons panel: which fire, how to order them, what they write (no Qt).

``post`` below is one layer's ``blocks.{l}.mlp.post`` [n, d_ff]: the activation of every neuron
(column) at every token (row). For a gated FFN (SwiGLU) it is act(x W_gate) * (x W_in), the
number that multiplies the neuron's output direction.

Choices, so that the panel can say what it shows:

* **"Most active" means largest activation value, not largest magnitude.** GELU and ReLU
  neurons fire positively (GELU's negative side bottoms out near -0.17), so the value is what
  "firing" means. ``by="abs"`` ranks by |value| instead (useful for gated FFNs, whose products
  can be large and negative); the activations returned keep their sign either way.
* **Ties go to the lower neuron id**, so every ordering is deterministic.
* ``neuron_order`` ranks by a statistic over the prompt's tokens: ``"index"`` (0..d_ff-1),
  ``"max"`` (the largest activation a neuron reaches on any token, descending) or
  ``"variance"`` (how much its activation changes across tokens, descending). ``top_columns``
  keeps the first k of the ``"max"`` order.
* **Vocabulary effect** (``neuron_vocab_effect``): the direct path only. Neuron k writes
  ``post[k] * W_out[:, k]`` into the residual stream; read through the final norm's scale and the
  un-embedding, that direction gives one number per vocabulary token,
  ``effect = W_U @ (gamma * W_out[:, k])``. Applying the final norm's weight ``gamma``
  elementwise is an approximation (``fold_norm=True``, the default): the norm's mean-centring
  (LayerNorm), its bias (the same for every neuron) and its division by the position's
  standard deviation / RMS (a positive factor that changes no ranking) are ignored, and so are
  all later layers. The values are therefore logit contributions per unit of activation up to
  that positive factor: a strong hint of what a neuron promotes and suppresses, not a proof.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from explorer.core.analysis.ranking import descending, top_k_ids
from explorer.core.placement import weights_of

if TYPE_CHECKING:
    from explorer.core.trace import Trace

NEURON_ORDERS = ("index", "max", "variance")
RANK_BY = ("value", "abs")


def _activations(post: np.ndarray) -> np.ndarray:
    """The [n, d_ff] activations as they are (float32 maxima and picks are exact; sums upcast where taken)."""
    post = np.asarray(post)
    if post.ndim != 2:
        raise ValueError(f"expected neuron activations [n, d_ff], got shape {post.shape}")
    return post if post.dtype.kind == "f" else post.astype(np.float64)


def top_neurons(post: np.ndarray, token: int, k: int = 10, by: str = "value") -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` most active neurons at token position ``token``, most active first.

    ``by="value"`` (default) ranks by the activation itself (neurons that fire positively);
    ``by="abs"`` by its magnitude. Returns ``(neuron ids int64 [k], activations float32 [k])``;
    the activations keep their sign.
    """
    post = _activations(post)
    if by not in RANK_BY:
        raise ValueError(f"by must be one of {RANK_BY}, got {by!r}")
    n = post.shape[0]
    if not -n <= int(token) < n:
        raise IndexError(f"token {token} is out of range for {n} tokens")
    row = post[int(token)].astype(np.float64)
    ids = top_k_ids(np.abs(row) if by == "abs" else row, k)
    return ids, row[ids].astype(np.float32)


def neuron_order(post: np.ndarray, mode: str = "index") -> np.ndarray:
    """A permutation of the d_ff neurons (int64) for the heatmap's columns.

    ``"index"``: 0..d_ff-1; ``"max"``: by the largest activation over the tokens, descending;
    ``"variance"``: by the variance of the activation over the tokens, descending. Ties by id.
    """
    post = _activations(post)
    if mode not in NEURON_ORDERS:
        raise ValueError(f"mode must be one of {NEURON_ORDERS}, got {mode!r}")
    d_ff = post.shape[1]
    if mode == "index" or post.shape[0] == 0:
        return np.arange(d_ff, dtype=np.int64)
    scores = post.max(axis=0).astype(np.float64) if mode == "max" else post.var(axis=0, dtype=np.float64)
    return descending(scores)


def top_columns(post: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` neurons with the largest activation on any token (the head of the ``"max"``
    order), as ``(neuron ids int64 [k], their columns float32 [n, k])`` in that order."""
    post = _activations(post)
    if post.shape[0] == 0:
        ids = np.arange(min(max(int(k), 0), post.shape[1]), dtype=np.int64)
    else:
        ids = top_k_ids(post.max(axis=0).astype(np.float64), k)
    return ids, post[:, ids].astype(np.float32)


def activation_histogram(values: np.ndarray, bins: int = 50,
                         value_range: tuple[float, float] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Histogram of activations (any shape; NaN and infinities are left out).

    Returns ``(counts int64 [bins], edges float64 [bins + 1])``; ``value_range`` defaults to the finite
    values' min and max (numpy widens a single value to +-0.5, and no values to [0, 1]).
    """
    if int(bins) < 1:
        raise ValueError(f"bins must be at least 1, got {bins}")
    values = np.asarray(values, dtype=np.float64).ravel()
    values = values[np.isfinite(values)]
    counts, edges = np.histogram(values, bins=int(bins), range=value_range)
    return counts.astype(np.int64), edges.astype(np.float64)


def neuron_output_direction(trace: Trace, layer: int, neuron: int) -> np.ndarray | None:
    """Column ``neuron`` of layer ``layer``'s W_out: the d-vector the neuron writes per unit of
    activation (float32 [d]); None without a model or FFN."""
    model = _ffn_model(trace, layer)
    if model is None:
        return None
    with weights_of(model.blocks[layer].mlp.W_out) as W_out:         # (real even when offloaded)
        w_out = W_out.weight                                          # [d, d_ff]
        _check_neuron(neuron, w_out.shape[1])
        return w_out[:, int(neuron)].detach().float().cpu().numpy()


def neuron_vocab_effect(trace: Trace, layer: int, neuron: int, k: int = 10, fold_norm: bool = True,
                        vocab_size: int | None = None
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """What neuron ``neuron`` of layer ``layer`` writes, read directly through the un-embedding.

    ``effect = W_U @ (gamma * W_out[:, neuron])`` over the vocabulary (``gamma``: the final
    norm's weight, applied when ``fold_norm`` and the model has a final norm; see the module
    docstring for what this ignores). ``vocab_size`` limits the reading to the tokenizer's ids
    when the model's matrix is padded beyond them.

    Returns ``(promoted ids, promoted values, suppressed ids, suppressed values)``: the ``k``
    highest effects, highest first, and the ``k`` lowest, most negative first (ids int64, values
    float32; ties by lower id). For a negative activation the roles swap. None when the trace has
    no model (e.g. loaded from a file) or the model has no FFN (attention-only).
    """
    model = _ffn_model(trace, layer)
    if model is None:
        return None
    import torch

    from explorer.core.placement import tail_device

    device = tail_device(model)
    with torch.inference_mode():  # every weight read through weights_of: real even when offloaded
        with weights_of(model.blocks[layer].mlp.W_out) as W_out:
            w_out = W_out.weight                                      # [d, d_ff]
            _check_neuron(neuron, w_out.shape[1])
            direction = w_out[:, int(neuron)].float().to(device)      # [d]
        ln_final = getattr(model, "ln_final", None)
        if fold_norm and ln_final is not None:
            with weights_of(ln_final):
                gain = ln_final.gain()
                if gain is not None:  # (Gemma: 1 + w; OLMo's norm has no weight)
                    direction = direction * gain.float().to(device)
        if getattr(model, "project_out", None) is not None:          # OPT-350m: into the embedding space
            with weights_of(model.project_out) as project_out:
                direction = project_out.weight.float() @ direction.to(project_out.weight.device)  # [d_embed]
        with weights_of(model.unembed) as unembed:
            W_U = unembed.weight                                      # [V, d]
            if vocab_size is not None:
                W_U = W_U[: max(1, int(vocab_size))]
            effect = (W_U.float() @ direction.to(W_U.device)).cpu().numpy().astype(np.float64)
    top = top_k_ids(effect, k)
    bottom = top_k_ids(-effect, k)
    return top, effect[top].astype(np.float32), bottom, effect[bottom].astype(np.float32)


def _ffn_model(trace: Trace, layer: int):  # -> Transformer | None
    model = getattr(trace, "_model", None)
    if model is None or not model.cfg.has_ffn:
        return None
    if not 0 <= int(layer) < len(model.blocks):
        raise IndexError(f"layer {layer} is out of range for {len(model.blocks)} layers")
    return model if getattr(model.blocks[int(layer)], "mlp", None) is not None else None


def _check_neuron(neuron: int, d_ff: int) -> None:
    if not 0 <= int(neuron) < d_ff:
        raise IndexError(f"neuron {neuron} is out of range for d_ff = {d_ff}")
