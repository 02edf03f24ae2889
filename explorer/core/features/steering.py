"""Steering: ``alpha * v`` added to the residual stream entering a block, at every position (the
prompt's and, in generation, each new token's).

``v`` comes from a feature's decoder direction (carried into the residual stream, see
``analysis.residual_direction``), a neuron's output weights (column of W_out), a vector file (``.npy``,
float, length d_model, read with ``allow_pickle=False`` after its header is checked), or a contrast
pair: the mean over positions of one prompt's residual stream at that layer minus the other's.
A steer is an :class:`~explorer.core.interventions.spec.Intervention` (target ``"steer"``): it goes
in the same list as every other intervention (traces, generation, patching see it alike).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from explorer.core.features.analysis import residual_direction
from explorer.core.features.sae import SAE
from explorer.core.interventions.spec import Intervention, InterventionError

MAX_VECTOR_BYTES = 1 << 24


def steer(layer: int, vector: Any, alpha: float, source: str = "vector",
          positions: Sequence[int] | None = None) -> Intervention:
    """``alpha * vector`` added to the residual stream entering block ``layer`` (``n_layers``: after the last)."""
    from explorer.core import arguments

    layer = arguments.whole(layer, "layer", 0)
    try:
        v = np.asarray(vector, dtype=np.float32)
    except (TypeError, ValueError):
        raise InterventionError(f"a steering vector must be one row of finite numbers, not {type(vector).__name__}") \
            from None
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float, np.integer, np.floating)):
        raise InterventionError(f"steering strength (alpha) must be a number, not {type(alpha).__name__}")
    if v.ndim != 1 or not np.isfinite(v).all():
        raise InterventionError(f"a steering vector must be one row of finite numbers (got shape {v.shape})")
    if isinstance(alpha, bool) or not np.isfinite(float(alpha)):
        raise InterventionError(f"steering strength {alpha!r} is not a finite number")
    return Intervention("steer", int(layer), None, "add", tuple(positions) if positions is not None else None,
                        v, float(alpha), source)


def feature_vector(sae: SAE, model: Any, feature: int) -> np.ndarray:
    """Feature ``feature``'s decoder direction in the residual stream: float32 [d_model]."""
    return residual_direction(sae, model, feature)


def neuron_vector(model: Any, layer: int, neuron: int) -> np.ndarray:
    """Neuron ``neuron`` of block ``layer``'s FFN: its output weights (what one unit of it writes), [d_model]."""
    cfg = model.cfg
    if not cfg.has_ffn or not 0 <= layer < cfg.n_layers or not 0 <= neuron < cfg.d_ff or layer in cfg.moe_layers:
        raise InterventionError(f"there is no neuron {layer}:{neuron} in this model")
    return model.blocks[layer].mlp.W_out.weight[:, neuron].detach().float().cpu().numpy().copy()


def load_vector(path: str | os.PathLike[str], d_model: int) -> np.ndarray:
    """A steering vector from a ``.npy`` file: floating point, length ``d_model``, finite; nothing unpickled."""
    path = Path(path).expanduser()
    try:
        if not path.is_file():
            raise InterventionError(f"{path}: no such vector file")
        if path.stat().st_size > MAX_VECTOR_BYTES:
            raise InterventionError(f"{path} is {path.stat().st_size:,} bytes: too large for one vector")
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise InterventionError(f"{path} is not a .npy vector file ({str(exc).splitlines()[0][:120]})") from None
    if not isinstance(array, np.ndarray) or array.dtype.kind != "f" or array.shape != (d_model,):
        what = f"{array.dtype} {array.shape}" if isinstance(array, np.ndarray) else type(array).__name__
        raise InterventionError(f"{path} holds {what}; a steering vector is {d_model} floats (float32 [d_model])")
    vector = np.array(array, dtype=np.float32)
    if not np.isfinite(vector).all():
        raise InterventionError(f"{path} holds NaN or infinite values")
    return vector


def residual_at(model: Any, ids: Sequence[int], layer: int) -> np.ndarray:
    """The residual stream entering block ``layer`` (``n_layers``: after the last) at every position: [n, d]."""
    from explorer.core.interventions.apply import record_sites

    site = ("resid_final", None) if layer == model.cfg.n_layers else ("resid_pre", layer)
    if not 0 <= layer <= model.cfg.n_layers:
        raise InterventionError(f"layer {layer} is outside 0-{model.cfg.n_layers}")
    kept, _ = record_sites(model, ids, {site})
    return kept[site].float().cpu().numpy()


def contrast_vector(model: Any, ids_a: Sequence[int], ids_b: Sequence[int], layer: int) -> np.ndarray:
    """Mean over positions of prompt A's residual stream at ``layer`` minus prompt B's: float32 [d_model]."""
    if not ids_a or not ids_b:
        raise InterventionError("a contrast pair needs two non-empty prompts")
    with torch.inference_mode():
        a = residual_at(model, ids_a, layer).astype(np.float64).mean(0)
        b = residual_at(model, ids_b, layer).astype(np.float64).mean(0)
    return (a - b).astype(np.float32)


def split_steer(text: str) -> tuple[int, str, float]:
    """``L:FILE.npy:ALPHA`` -> (L, FILE, ALPHA), checked for form only (before any model is loaded)."""
    layer, sep, rest = text.partition(":")
    file, sep2, alpha = rest.rpartition(":")
    try:
        layer_i, alpha_f = int(layer), float(alpha)
    except ValueError:
        layer_i = alpha_f = None
    if not sep or not sep2 or not file or layer_i is None or layer_i < 0 or not np.isfinite(alpha_f):
        raise InterventionError(f"cannot read --steer {text!r}: use LAYER:FILE.npy:ALPHA, e.g. 3:happy.npy:4.0")
    return layer_i, file, alpha_f


def parse_steer(text: str, d_model: int, n_layers: int) -> Intervention:
    """``L:FILE.npy:ALPHA`` (the command line's ``--steer``): the vector in FILE, times ALPHA, entering block L."""
    layer, file, alpha = split_steer(text)
    if layer > n_layers:
        raise InterventionError(f"--steer {text}: layer {layer} is outside 0-{n_layers}")
    return steer(layer, load_vector(file, d_model), alpha, Path(file).name)
