"""Expert-level attribution patching: one linear estimate per MoE layer x expert, from one backward pass.

The cell (layer, expert e) asks: in the corrupted run, if expert e's weighted outputs at every position up to
the metric's were the clean run's (the tokens it served there, with the weights they gave it), how much of the
clean-minus-corrupted metric would come back? The expert's contribution ``a_e`` is part of what the block adds
(``mlp.out`` = sum of the experts' weighted outputs + the shared expert), so the gradient with respect to it is
the gradient with respect to ``mlp.out``, and

    estimate[l, e] = sum over positions <= p of (a_e(clean) - a_e(corrupted)) . dm/d mlp.out(corrupted) / (m_clean - m_corrupted)

Both prompts run as one batch through the model's own forward (as attribution.py does): its ``moe.expert_out``
site gives each chosen expert's weighted output, and each (token, slot)'s dot product with the gradient is summed
into its expert, so no [positions x experts x d] array is built. Exact where the model is linear after the layer;
elsewhere a ranking to check with an exact run (an ``mlp`` patch of the layer by that expert's difference).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from explorer.core.interventions.attribution import _stream_metric, _Stop
from explorer.core.interventions.patching import checked_position
from explorer.core.interventions.spec import InterventionError
from explorer.core.model import Transformer
from explorer.core.placement import input_device


@dataclass
class ExpertAttribution:
    layers: tuple[int, ...]      # the MoE layers, one row each
    estimates: np.ndarray        # [MoE layers, E] estimated share of the metric's gap restored
    clean_metric: float
    corrupt_metric: float
    position: int
    seconds: float = 0.0


class _Keep:
    """A ``rec`` that keeps each MoE layer's ``mlp.out`` (with its graph), chosen experts and weighted outputs,
    asks for the experts' outputs (only computed on request), and stops at the final stream."""

    def __init__(self, layers: Sequence[int]) -> None:
        self.layers, self.kept, self.last = set(layers), {}, None

    def records(self, site: str, layer: int | None) -> bool:
        return site == "moe.expert_out" and layer in self.layers

    def __call__(self, site: str, layer: int | None, tensor: Tensor) -> Tensor:
        if site == "resid_pre" and layer == 0 and not tensor.requires_grad:
            tensor = tensor.detach().requires_grad_(True)
        if layer in self.layers and site in ("mlp.out", "moe.experts", "moe.expert_out"):
            self.kept[(site, layer)] = tensor
        if site == "resid_final":
            self.last = tensor[:, -1]
            raise _Stop
        return tensor


def expert_attribution(model: Transformer, clean_ids: Sequence[int], corrupt_ids: Sequence[int], target: int,
                       distractor: int | None = None, position: int = -1) -> ExpertAttribution:
    """Every (MoE layer, expert) cell's linear estimate (see the module docstring)."""
    cfg = model.cfg
    layers = tuple(cfg.moe_layers)
    if not layers:
        raise InterventionError("this model has no mixture-of-experts layers")
    if any(model.blocks[layer].ln2_out is not None for layer in layers):
        raise InterventionError("expert attribution needs the experts' outputs added to the stream as they are "
                                "(here a norm follows them)")
    position = checked_position(model, clean_ids, corrupt_ids, target, distractor, position)
    t0 = time.perf_counter()
    keep = _Keep(layers)
    with torch.inference_mode(False), torch.enable_grad():
        ids = torch.as_tensor([list(clean_ids[:position + 1]), list(corrupt_ids[:position + 1])], dtype=torch.long,
                              device=input_device(model))
        try:
            model(ids, keep, last_only=True)
        except _Stop:
            pass
        metric = _stream_metric(model, keep.last, target, distractor)     # [2]: clean, corrupted
        m_clean, m_corrupt = (float(m) for m in metric.detach())
        grads = torch.autograd.grad(metric[1], [keep.kept[("mlp.out", layer)] for layer in layers], allow_unused=True)
    gap = m_clean - m_corrupt
    if abs(gap) < 1e-6:
        raise InterventionError("the clean and the corrupted prompt give the same logit difference: "
                                "there is nothing for patching to restore")
    estimates = np.zeros((len(layers), cfg.n_experts))
    with torch.no_grad():
        for row, (layer, grad) in enumerate(zip(layers, grads)):
            if grad is None:
                continue
            outputs = keep.kept[("moe.expert_out", layer)].detach().double() * cfg.residual_scale   # [2, p, k, d]
            dots = (outputs * grad[1].double()[None, :, None, :]).sum(-1)    # [2, p, k]: each slot . the gradient
            experts = keep.kept[("moe.experts", layer)]                        # [2, p, k]
            per_expert = torch.zeros(2, cfg.n_experts, dtype=torch.float64, device=dots.device)
            per_expert.scatter_add_(1, experts.flatten(1), dots.flatten(1))
            estimates[row] = ((per_expert[0] - per_expert[1]) / gap).cpu().numpy()
    return ExpertAttribution(layers, estimates, m_clean, m_corrupt, position, time.perf_counter() - t0)
