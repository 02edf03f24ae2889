"""Attribution patching: a linear estimate of every activation-patching cell from one backward pass.

Exact activation patching (``patching.py``) runs the corrupted prompt once per cell with that one
activation taken from the clean run. Its first-order Taylor estimate needs no run per cell: with
``a`` the activation of a cell in the corrupted run, ``a'`` the same activation in the clean run and
``m`` the metric (the target's logit, minus the distractor's) of the corrupted run,

    m(corrupted run with a := a') - m_corrupt  ~  (a' - a) . dm/da

and dividing by ``m_clean - m_corrupt`` gives the estimated share restored, the number the exact
grid shows. The gradient is taken on the corrupted run, the run the exact patch changes. One clean
forward (its activations), one corrupted forward with autograd and one backward of the metric give
every cell of both grids, with the exact grid's cells (the clean and the corrupted run go through the
model as one batch of two: at a few tokens a forward pass costs reading its weights, paid once):

* ``resid`` [L + 1, n]: the stream entering block l (row L: after the last block) at one position,
  the dot product over d_model;
* ``heads`` [L, H]: one head's output z at every position up to the metric's, the dot product over
  positions and d_head (the exact head patch replaces all of them at once).

Where the model is linear in the activation (no norm, attention pattern and activation function
after it depending on it) the estimate is exact; elsewhere it is a ranking to check: run the exact
patch for the top-k cells or for the ones a user picks (``patching_steps(cells=...)``).

The forward pass is the model's own (``model.forward`` through its ``rec`` sites): only this run
turns autograd on (``torch.enable_grad``), asks for no parameter's gradient, and lets the fused
attention kernel run (the recorder says it stores no scores). The recorder stops the pass at the final
stream: the metric needs the target's and the distractor's rows of the un-embedding, not all V of them
(for a 1B model with 128k tokens a fifth of the weights read). The normal trace path is unchanged.

The forward is timed: the exact full grid's cost (token positions its batched runs cover, in
whole-prompt forwards) times that time is the estimate shown before an exact grid starts.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from explorer.core.interventions.patching import Cell, _metric, checked_position, plan_cells
from explorer.core.interventions.spec import InterventionError
from explorer.core.model import Transformer, output_logits
from explorer.core.placement import input_device, is_placed

Site = tuple[str, "int | None"]


@dataclass
class AttributionResult:
    resid: np.ndarray            # [L + 1, n] estimated share restored (0 where exact patching would not run)
    heads: np.ndarray            # [L, H]
    clean_metric: float
    corrupt_metric: float
    position: int
    seconds: float = 0.0         # the whole estimate: the forward (both runs in one batch) and the backward
    forward_seconds: float = 0.0  # the forward alone (two prompts, autograd on): the unit of the time estimates
    exact_runs: int = 0          # patched runs an exact full grid of these kinds would take
    exact_forwards: float = 0.0  # their token positions, in whole-prompt (cut at ``position``) forwards
    clean: dict | None = None    # the clean run's activations by (site, layer): patch_for(cell, clean, L)

    def exact_seconds(self, forwards: float | None = None) -> float:
        """About how long ``forwards`` whole-prompt forwards take (default: the exact full grid and its two
        baselines), from the measured forward."""
        # the measured forward ran two whole prompts (the clean and the corrupted one) in one batch
        return ((self.exact_forwards + 2.0) if forwards is None else forwards) * self.forward_seconds / 2

    def value(self, cell: Cell) -> float:
        kind, layer, index = cell
        return float((self.resid if kind == "resid" else self.heads)[layer, index])


class _Stop(Exception):
    """Raised at the final residual stream: the metric needs two logits, not the whole un-embedding."""


class _Grab:
    """A ``rec`` that keeps the site tensors and stores no scores (so the fused attention kernel runs).
    At ``resid_final`` it keeps the last position's stream and stops the forward pass (:class:`_Stop`)."""

    def __init__(self, sites: set[Site]) -> None:
        self.sites, self.kept = sites, {}
        self.last: Tensor | None = None

    def records(self, site: str, layer: int | None) -> bool:
        return False

    def __call__(self, site: str, layer: int | None, tensor: Tensor) -> Tensor:
        if site == "resid_pre" and layer == 0 and not tensor.requires_grad:
            tensor = tensor.detach().requires_grad_(True)  # frozen weights: the graph starts at the stream
        if (site, layer) in self.sites:
            self.kept[(site, layer)] = tensor
        if site == "resid_final":
            self.last = tensor[:, -1]
            raise _Stop
        return tensor


def _stream_metric(model: Transformer, last: Tensor, target: int, distractor: int | None) -> Tensor:
    """The metric from the final stream at the metric's position [B, d] -> [B]: the final norm, then only
    the target's (and the distractor's) row of the un-embedding (the forward pass's last steps, for two
    tokens); models whose un-embedding is more than one matrix go the whole way."""
    x = model.ln_final(last) if model.ln_final is not None else last
    if model.mlm is not None or model.project_out is not None or is_placed(model):
        return _metric(model.unembed_step(x), target, distractor)
    tokens = [target] if distractor is None else [target, distractor]
    rows = model.unembed.weight[tokens]                                # [k, d]
    logits = x @ rows.T.to(x.dtype)                                    # [B, k]
    if model.unembed.bias is not None:
        logits = logits + model.unembed.bias[tokens].to(x.dtype)
    logits = output_logits(model.cfg, logits).double()                 # scale and soft-cap act per logit
    return logits[:, 0] - logits[:, 1] if distractor is not None else logits[:, 0]


def _sites(n_layers: int, kinds: Sequence[str]) -> set[Site]:
    sites: set[Site] = set()
    if "resid" in kinds:
        sites |= {("resid_pre", layer) for layer in range(n_layers)} | {("resid_final", None)}
    if "head" in kinds:
        sites |= {("attn.z", layer) for layer in range(n_layers)}
    return sites


def attribution_patching(model: Transformer, clean_ids: Sequence[int], corrupt_ids: Sequence[int], target: int,
                         distractor: int | None = None, position: int = -1,
                         kinds: Sequence[str] = ("resid", "head")) -> AttributionResult:
    """Both grids' linear estimates (see the module docstring); the arguments are ``patching_steps``'s."""
    position = checked_position(model, clean_ids, corrupt_ids, target, distractor, position)
    cfg = model.cfg
    L, H, n = cfg.n_layers, cfg.n_heads, len(clean_ids)
    t0 = time.perf_counter()
    device = input_device(model)
    sites = _sites(L, kinds) | _sites(L, ("resid", "head"))  # the plan compares every site
    run = _Grab(sites)
    with torch.inference_mode(False), torch.enable_grad():
        ids = torch.as_tensor([list(clean_ids[:position + 1]), list(corrupt_ids[:position + 1])], dtype=torch.long,
                              device=device)
        # both runs in one batch: at a few tokens a forward pass costs its weights' reading, paid once
        try:
            model(ids, run, last_only=True)
        except _Stop:
            pass
        metric = _stream_metric(model, run.last, target, distractor)  # [2]: clean, corrupted
        m_clean, m_corrupt = (float(m) for m in metric.detach())
        forward_seconds = time.perf_counter() - t0
        order = sorted((s for s in _sites(L, kinds) if s in run.kept), key=str)  # (a recurrent layer has no z)
        grads = torch.autograd.grad(metric[1], [run.kept[s] for s in order], allow_unused=True)
    if abs(m_clean - m_corrupt) < 1e-6:
        raise InterventionError("the clean and the corrupted prompt give the same logit difference: "
                                "there is nothing for patching to restore")
    gap = m_clean - m_corrupt
    clean = {site: t[0].detach().clone() for site, t in run.kept.items()}
    corrupt = {site: t[1].detach() for site, t in run.kept.items()}
    result = AttributionResult(np.zeros((L + 1, n)), np.zeros((L, H)), m_clean, m_corrupt, position,
                               forward_seconds=forward_seconds, clean=clean)
    with torch.no_grad():
        for site, grad in zip(order, grads):
            if grad is None:  # the metric does not depend on it
                continue
            delta = (clean[site] - corrupt[site]).double() * grad[1].double()  # the corrupted run's gradient
            name, layer = site
            if name == "attn.z":                                      # [H, p, dh]: summed over positions
                result.heads[layer] = (delta.sum(dim=(1, 2)) / gap).cpu().numpy()
            else:                                                     # [p, d]
                row = L if name == "resid_final" else layer
                result.resid[row, :position + 1] = (delta.sum(dim=-1) / gap).cpu().numpy()
    groups, _ = plan_cells(clean, corrupt, L, H, position, kinds, heads_of=[p.layer for p in cfg.plan if p.is_attention])
    for first, group in groups:
        result.exact_runs += len(group)
        result.exact_forwards += len(group) * (position + 1 - first) / (position + 1)
    result.resid[L, :position] = 0.0  # the final stream before the metric's position feeds no logit
    result.seconds = time.perf_counter() - t0
    return result


def top_cells(result: AttributionResult, k: int, kinds: Sequence[str] = ("resid", "head")) -> list[Cell]:
    """The ``k`` cells whose estimated share restored is largest in size (the ones to check exactly)."""
    cells: list[tuple[float, Cell]] = []
    if "resid" in kinds:
        cells += [(abs(v), ("resid", int(r), int(c))) for (r, c), v in np.ndenumerate(result.resid)
                  if c <= result.position]
    if "head" in kinds:
        cells += [(abs(v), ("head", int(r), int(c))) for (r, c), v in np.ndenumerate(result.heads)]
    cells.sort(key=lambda item: -item[0])
    return [cell for _, cell in cells[:max(0, k)]]
