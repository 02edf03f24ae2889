"""Where a corpus run reads each kind of unit: one ``UnitSource`` per kind, pluggable.

A source names the forward-pass sites it needs (``sites()``: (site, layer) pairs of the recorder
protocol in explorer/core/model.py) and turns what the pass gives there into activations
[B, n, units] per layer group (``activations``), on the device the layer runs on. The run keeps
top-k contexts, means, firing counts and histograms for every group of every source, whatever it is:

* ``NeuronSource``: every FFN neuron, ``blocks.L.mlp.post`` (after the non-linearity; for a gated
  FFN the product that multiplies the neuron's output direction);
* ``FeatureSource``: every feature of an open SAE or transcoder at its hook point (``SAE.encode``);
* ``SiteSource``: any other site whose last axis is one unit each, e.g. the experts of a mixture of
  experts: ``SiteSource("experts", "expert", EXPERT_SITE, layers, n_experts)`` reads the router's
  probability of every expert for every token. ``SOURCE_FACTORIES`` holds the functions that offer a
  source for a model; a family that records such a site adds one there and nothing else changes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import Tensor

    from explorer.core.config import ModelConfig
    from explorer.core.features.sae import SAE

EXPERT_SITE = "moe.probs"  # [B, n, n_experts]: the router's score of every expert (MoE layers, core/moe.py)


@dataclass(frozen=True)
class Group:
    source: str   # "neurons", "features", "experts"
    layer: int    # the block (an SAE after the last block: n_layers)
    units: int


class UnitSource:
    """A kind of unit: its name, the word for one unit, its groups, the sites it reads."""

    name = ""
    kind = ""

    def groups(self) -> list[Group]:
        raise NotImplementedError

    def sites(self) -> set[tuple[str, int | None]]:
        raise NotImplementedError

    def activations(self, site: str, layer: int | None, tensor: Tensor) -> list[tuple[int, Tensor]]:
        """(group layer, activations [B, n, units]) for what the forward pass recorded at ``site``."""
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "groups": [[g.layer, g.units] for g in self.groups()]}


class SiteSource(UnitSource):
    """Units that are the last axis of one site in some layers: [B, n, units] as recorded."""

    def __init__(self, name: str, kind: str, site: str, layers: list[int], units: int) -> None:
        self.name, self.kind, self.site, self.layers, self.units = name, kind, site, list(layers), units

    def groups(self) -> list[Group]:
        return [Group(self.name, layer, self.units) for layer in self.layers]

    def sites(self) -> set[tuple[str, int | None]]:
        return {(self.site, layer) for layer in self.layers}

    def activations(self, site: str, layer: int | None, tensor: Tensor) -> list[tuple[int, Tensor]]:
        return [(int(layer), tensor)] if site == self.site and layer in self.layers else []


class NeuronSource(SiteSource):
    """The neurons of every dense FFN (a mixture of experts' layers have none of their own)."""

    def __init__(self, cfg: ModelConfig) -> None:
        dense = [layer for layer in range(cfg.n_layers) if cfg.layer(layer).ffn == "dense"]
        width = max((cfg.layer(layer).d_ff for layer in dense), default=0)  # one width per source (every family
        super().__init__("neurons", "neuron", "mlp.post",          # here has one width for its dense layers)
                         [layer for layer in dense if cfg.layer(layer).d_ff == width], width)


class FeatureSource(UnitSource):
    """Every feature of an SAE or transcoder, encoded from its hook point's activations where they are."""

    name, kind = "features", "feature"

    def __init__(self, sae: SAE) -> None:
        self.sae = sae

    def groups(self) -> list[Group]:
        return [Group(self.name, self.sae.hook.block, self.sae.d_sae)]

    def sites(self) -> set[tuple[str, int | None]]:
        return {(self.sae.hook.site, self.sae.hook.layer)}

    def activations(self, site: str, layer: int | None, tensor: Tensor) -> list[tuple[int, Tensor]]:
        hook = self.sae.hook
        if (site, layer) != (hook.site, hook.layer):
            return []
        if site == "attn.z":                                          # [B, H, n, dh] -> [B, n, H * dh]
            B, H, n, dh = tensor.shape
            tensor = tensor.permute(0, 2, 1, 3).reshape(B, n, H * dh)
        return [(hook.block, self.sae.encode(tensor))]

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "sae": self.sae.name, "hook": self.sae.hook.hook_name}


def _neurons(cfg: ModelConfig, sae: SAE | None) -> UnitSource | None:
    source = NeuronSource(cfg)
    return source if source.layers and source.units > 0 else None


def _features(cfg: ModelConfig, sae: SAE | None) -> UnitSource | None:
    return FeatureSource(sae) if sae is not None else None


def _experts(cfg: ModelConfig, sae: SAE | None) -> UnitSource | None:
    n = int(getattr(cfg, "n_experts", 0) or 0)
    if n <= 0:
        return None
    layers = [layer for layer in range(cfg.n_layers) if _is_moe(cfg, layer)]
    return SiteSource("experts", "expert", EXPERT_SITE, layers, n) if layers else None


def _is_moe(cfg: ModelConfig, layer: int) -> bool:
    return cfg.layer(layer).is_moe


SOURCE_FACTORIES: list[Callable[[Any, Any], UnitSource | None]] = [_neurons, _features, _experts]
SOURCE_NAMES = ("neurons", "features", "experts")


def unit_sources(cfg: ModelConfig, sae: SAE | None = None, only: set[str] | None = None) -> list[UnitSource]:
    """The sources this model (and SAE) offers, or those of them named in ``only``."""
    found = [s for s in (factory(cfg, sae) for factory in SOURCE_FACTORIES) if s is not None]
    return [s for s in found if only is None or s.name in only]
