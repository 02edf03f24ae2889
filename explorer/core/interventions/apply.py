"""Applying interventions inside the one forward pass, through its ``rec`` sites.

:class:`Intervener` is a ``rec`` function: at a site it changes the tensor as its interventions
say and hands the changed tensor back (``z = rec("attn.z", layer, z)`` in the forward pass), then
passes it on to an inner recorder, so a trace records the values the model went on with.

Batches: ``Intervener(groups)`` with one intervention list per batch element runs many different
interventions in one batched forward pass (activation patching does); a single group applies to
every element.

Positions are absolute: with a KV cache the tensors at a site hold positions ``start`` onwards.

Mean ablation is resolved before the forward pass (:func:`resolve`): the mean over the prompt's
positions of the activation in the run *without* interventions. Resolved, the zero, mean and patch
interventions are idempotent (applying one to its own output changes nothing); a steer and a feature
edit are not, so a Trace re-running a block on its stored, already intervened input skips that
input's site (``skip``) and gets the same numbers.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from explorer.core.interventions.spec import Intervention, InterventionError, check
from explorer.core.model import KVCache, Rec, Transformer, _no_capture
from explorer.core.placement import input_device

Interventions = Sequence[Intervention]


def site_of(iv: Intervention, n_layers: int) -> tuple[str, int | None]:
    """The (site, layer) of the forward pass where ``iv`` acts (an expert: its router's logits)."""
    if iv.target == "feature":
        return iv.value.hook.site, iv.value.hook.layer
    if iv.target in ("resid", "steer") and iv.layer == n_layers:
        return "resid_final", None
    return iv.site, iv.layer


def sites_of(iv: Intervention, n_layers: int) -> list[tuple[str, int | None]]:
    """Every site where ``iv`` acts: an expert switched off is -inf in its router's logits (its weight) and in
    the scores the top-k is taken over (its choice: a sigmoid router's bias would otherwise still pick it);
    forced, +inf in the choice; scaled, its logit."""
    if iv.target != "expert":
        return [site_of(iv, n_layers)]
    return {"zero": [("moe.router_logits", iv.layer), ("moe.choice", iv.layer)],
            "force": [("moe.choice", iv.layer)], "scale": [("moe.router_logits", iv.layer)]}[iv.mode]


class Intervener:
    """A ``rec`` that applies interventions (one list per batch element, or one for all)."""

    def __init__(self, groups: Sequence[Interventions], n_layers: int, inner: Rec | None = None,
                 start: int = 0, skip: frozenset[tuple[str, int | None]] = frozenset()) -> None:
        """``skip``: sites whose tensor was already changed (a Trace re-running a block on its stored,
        intervened input: a steer or a feature edit there must not be applied twice)."""
        self.inner = inner
        self.start = start
        self.broadcast = len(groups) == 1
        self._by_site: dict[tuple[str, int | None], list[tuple[int, Intervention]]] = defaultdict(list)
        for b, group in enumerate(groups):
            for iv in group:
                if iv.mode == "mean" and iv.value is None:
                    raise InterventionError(f"{iv.label}: resolve() the mean before running")
                for site in sites_of(iv, n_layers):
                    if site not in skip:
                        self._by_site[site].append((b, iv))
        self._values: dict[int, Tensor] = {}

    def __bool__(self) -> bool:
        return bool(self._by_site)

    def records(self, site: str, layer: int | None) -> bool:
        """Whether the run must compute ``site`` explicitly for someone to look at it: only if the inner
        recorder wants it. Interventions act on z and later, which exist on every attention path, so a
        fused attention kernel (one that never forms the scores) may run under them."""
        if self.inner is None:
            return False
        records = getattr(self.inner, "records", None)
        return True if records is None else bool(records(site, layer))

    def __call__(self, site: str, layer: int | None, tensor: Tensor) -> Tensor:
        todo = self._by_site.get((site, layer))
        if todo:
            tensor = tensor.clone()
            for b, iv in todo:
                self._apply(tensor, slice(None) if self.broadcast else slice(b, b + 1), iv, site)
        if self.inner is not None:
            out = self.inner(site, layer, tensor)
            return tensor if out is None else out
        return tensor

    def _value(self, iv: Intervention, like: Tensor) -> Tensor:
        cached = self._values.get(id(iv))
        if cached is None or cached.dtype != like.dtype or cached.device != like.device:
            value = iv.value if isinstance(iv.value, Tensor) else torch.from_numpy(np.array(iv.value))  # a copy
            cached = value.to(device=like.device, dtype=like.dtype)
            self._values[id(iv)] = cached
        return cached

    def _apply(self, t: Tensor, rows: slice, iv: Intervention, site: str = "") -> None:
        pos_dim = 2 if iv.site == "attn.z" else 1          # z: [B, H, n, dh]; the rest [B, n, ...]
        n = t.shape[pos_dim]
        wanted = range(self.start, self.start + n) if iv.positions is None else iv.positions
        absolute = [p for p in wanted if self.start <= p < self.start + n]
        if iv.mode == "patch":
            absolute = [p for p in absolute if p < len(iv.value)]
        if not absolute:
            return
        local = torch.tensor([p - self.start for p in absolute], device=t.device)
        if iv.target == "steer":                           # alpha * v added at every position named
            t[rows, local] += float(iv.amount) * self._value(iv, t)
            return
        if iv.target == "feature":                         # the SAE edits its own term (core/features/sae.py)
            iv.value.edit(t, rows, local, iv)
            return
        if iv.target == "expert":                          # router logits or choice scores [B, n, E]
            if iv.mode == "scale":
                t[rows, local, iv.index] *= float(iv.amount)
            else:
                t[rows, local, iv.index] = float("inf") if (iv.mode, site) == ("force", "moe.choice") else float("-inf")
            return
        if iv.mode == "zero":
            value: Tensor | float = 0.0
        elif iv.mode == "mean":
            value = self._value(iv, t)
        else:
            value = self._value(iv, t)[torch.tensor(absolute, device=t.device)]
        if iv.target == "head":
            t[rows, iv.index, local] = value
        elif iv.target == "neuron":
            t[rows, local, iv.index] = value
        else:
            t[rows, local] = value


def record_sites(model: Transformer, ids: Sequence[int], sites: set[tuple[str, int | None]],
                 interventions: Interventions = (), cache: KVCache | None = None,
                 ) -> tuple[dict[tuple[str, int | None], Tensor], Tensor]:
    """One forward pass keeping the tensors (batch element 0) at ``sites``; returns them and the logits [n, V].
    With ``cache`` (empty) the run's keys and values are left in it."""
    kept: dict[tuple[str, int | None], Tensor] = {}

    def keep(site: str, layer: int | None, tensor: Tensor) -> Tensor:
        if (site, layer) in sites:
            kept[(site, layer)] = tensor[0].detach().clone()
        return tensor

    device = input_device(model)
    rec: Rec = Intervener([list(interventions)], model.cfg.n_layers, keep) if interventions else keep
    with torch.inference_mode():
        logits = model(torch.as_tensor([list(ids)], dtype=torch.long, device=device), rec, cache=cache)
    return kept, logits[0]


def site_values(iv: Intervention, kept: Tensor) -> Tensor:
    """The part of a recorded site tensor (batch element 0) that ``iv`` changes, by position."""
    if iv.target == "head":
        return kept[iv.index]                     # [n, dh]
    if iv.target == "neuron":
        return kept[:, iv.index]                  # [n]
    return kept                                   # [n, d]


def resolve(model: Transformer, ids: Sequence[int], interventions: Interventions) -> tuple[Intervention, ...]:
    """Check ``interventions`` against the model and fill in the mean of every ``"mean"`` one: the
    mean over the prompt's positions of its activation in the run without interventions."""
    ivs = tuple(interventions)
    check(ivs, model.cfg)
    need = [iv for iv in ivs if iv.mode == "mean" and iv.value is None]
    if not need:
        return ivs
    L = model.cfg.n_layers
    kept, _ = record_sites(model, ids, {site_of(iv, L) for iv in need})
    means = {id(iv): site_values(iv, kept[site_of(iv, L)]).float().mean(0).cpu().numpy() for iv in need}
    return tuple(iv.with_value(means[id(iv)]) if id(iv) in means else iv for iv in ivs)


def run(model: Transformer, ids: Sequence[int], interventions: Interventions = ()) -> Tensor:
    """Logits [n, V] of ``ids`` with ``interventions`` applied (means resolved on ``ids``)."""
    ivs = resolve(model, ids, interventions)
    device = input_device(model)
    rec: Rec = Intervener([ivs], model.cfg.n_layers) if ivs else _no_capture
    with torch.inference_mode():
        return model(torch.as_tensor([list(ids)], dtype=torch.long, device=device), rec)[0]
