"""How a load holds the weights: the ``weights`` option of ``load_checkpoint`` and ``--weights``.

* ``keep``: as the file stores them: GGUF blocks stay blocks, half-precision matrices stay half precision,
  each expanded into the compute precision when its layer runs (``packed``);
* ``dequantize``: every weight converted into the compute precision at load (what the app always did);
* ``bfloat16`` / ``float16``: every matrix converted at load into that half precision and computed in the
  compute precision (half the memory of float32 weights, the values rounded to it once);
* ``auto`` (the default): ``keep`` for a GGUF file whose matrices are stored in fewer bytes than the compute
  precision; for other files ``dequantize`` when the model fits the machine, else ``keep``.

Only the weights of ``nn.Linear`` and ``nn.Embedding`` modules are held packed (the matrices: nearly all the
bytes); norms, biases and anything a family's conversion reshapes are converted as before. The numbers a
packed model computes equal those of the same weights converted at load, bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from explorer.core.errors import CheckpointError
from explorer.core.quant.packed import Packed, install, packable

WEIGHTS = ("auto", "keep", "dequantize", "bfloat16", "float16")
HALF = (torch.bfloat16, torch.float16)


def check_weights(weights: str) -> str:
    if weights not in WEIGHTS:
        raise CheckpointError(f"unknown way to hold the weights {weights!r:.40}; choose one of {', '.join(WEIGHTS)}")
    return weights


def half_storage(ctx: Any) -> torch.dtype | None:
    """The half precision matrices are converted into at load (``bfloat16``/``float16``), else None."""
    mode = getattr(ctx, "weights", "dequantize")
    return getattr(torch, mode) if mode in ("bfloat16", "float16") else None


def held_dtype(ctx: Any, tensor: torch.Tensor) -> torch.dtype:
    """The precision a floating tensor read from a file is held in while loading: a matrix kept in its own half
    precision (``keep``) or converted into the chosen one (``bfloat16``/``float16``); else the compute precision."""
    if ctx is None:
        return tensor.dtype
    if tensor.dim() == 2:  # a matrix (a linear layer's or an embedding's, once converted)
        half = half_storage(ctx)
        if half is not None and half != ctx.dtype:
            return half
        if ctx.weights == "keep" and tensor.dtype in HALF and tensor.dtype != ctx.dtype:
            return tensor.dtype
    return ctx.dtype


def split(model: torch.nn.Module, weights: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """Install the packed weights in ``model`` (a meta model) and return the others. Half-precision matrices a
    keeping load read become ``Packed`` here; ``Packed`` values (GGUF blocks) are installed as they are."""
    names = packable(model)
    compute = ctx.dtype if ctx is not None else torch.float32
    packed: dict[str, Packed] = {}
    made: dict[int, Packed] = {}  # a tied embedding and un-embedding: one Packed for the one tensor
    for name, value in weights.items():
        if isinstance(value, Packed):
            packed[name] = value
        elif (name in names and isinstance(value, torch.Tensor) and value.dtype in HALF and value.dtype != compute
              and ctx is not None and ctx.weights in ("keep", "bfloat16", "float16") and value.dim() in (2, 3)):
            if id(value) not in made:
                made[id(value)] = Packed.from_tensor(value)
            packed[name] = made[id(value)]
    if any(name not in names for name in packed):
        bad = next(name for name in packed if name not in names)
        raise CheckpointError(f"{bad} cannot be held packed: it is not a matrix of a linear layer or an embedding")
    install(model, packed)
    return {k: v for k, v in weights.items() if k not in packed}


def convert_packed(convert: Callable[[dict[str, Any]], Any], weights: dict[str, Any]) -> Any:
    """Run a family's conversion on weights some of which are ``Packed``: each goes through as a meta tensor
    of its shape and comes back as itself (``identity_names`` made sure the conversion only renames it)."""
    stand_ins: dict[int, Packed] = {}
    for name, value in list(weights.items()):
        if isinstance(value, Packed):
            meta = torch.empty(value.shape, device="meta")
            stand_ins[id(meta)] = value
            weights[name] = meta
    cfg, notes, ours = convert(weights)
    return cfg, notes, {k: stand_ins.get(id(v), v) for k, v in ours.items()}


def identity_names(convert: Callable[[dict[str, Any]], dict[str, torch.Tensor]], shapes: dict[str, tuple[int, ...]],
                   targets: dict[str, type]) -> set[str]:
    """The file's tensor names that the conversion passes through unchanged into a packable weight of ours
    (run on meta tensors: no memory, no numbers). Empty when the conversion cannot run on meta tensors."""
    stand_ins = {name: torch.empty(shape, device="meta") for name, shape in shapes.items()}
    ids = {id(t): name for name, t in stand_ins.items()}
    try:
        ours = convert(dict(stand_ins))
    except (RuntimeError, NotImplementedError, ValueError, TypeError):
        return set()
    return {ids[id(t)] for name, t in ours.items() if id(t) in ids and name in targets}
