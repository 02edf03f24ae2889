"""Token mixers other than attention, each exact to its family's reference code.

A layer whose plan (core/plan.py) names a mixer other than attention holds one of these modules as
``Block.mixer``; ``mixer_forward`` runs it on the layer's normed input, as ``Transformer.attention`` runs an
attention layer, and returns what the sublayer adds to the stream (recorded as ``attn.out`` like attention's,
so the residual stream, DLA and the lens read every layer the same way). Their own values are recorded under
``mixer.*`` (core/trace_keys.py), and the weighted sum over earlier tokens each computes is derived on demand
(``effective.py``). A cached decode keeps their state (``conv.MixerState``) in the KV cache.

* deltanet.py: Gated DeltaNet (Qwen3.5 / 3.6, Qwen3-Next);
* mamba2.py: Mamba-2 (Granite 4 hybrids, Nemotron-H);
* short_conv.py: LFM2's gated short convolution;
* conv.py: the short causal convolution they share, the decode state, state norms.
"""

from __future__ import annotations

from torch import Tensor, nn

from explorer.core.attention import Rec
from explorer.core.config import ModelConfig
from explorer.core.mixers.conv import MixerState
from explorer.core.plan import LayerPlan

__all__ = ["MixerState", "build_mixer", "mixer_forward"]


def build_mixer(cfg: ModelConfig, plan: LayerPlan) -> nn.Module:
    from explorer.core.mixers.deltanet import GatedDeltaNet
    from explorer.core.mixers.mamba2 import Mamba2
    from explorer.core.mixers.short_conv import ShortConv

    return {"deltanet": GatedDeltaNet, "mamba2": Mamba2, "short_conv": ShortConv}[mixer_of(plan)](cfg)


def mixer_of(plan: LayerPlan) -> str:
    """The recurrent mixer a layer runs: its own, or (Falcon-H1) the Mamba-2 scan beside its attention."""
    return "mamba2" if plan.parallel_ssm else plan.mixer


def mixer_forward(plan: LayerPlan, module: nn.Module, h: Tensor, rec: Rec, cache=None) -> Tensor:
    """Layer ``plan.layer``'s mixer on its normed input h [B, n, d] -> [B, n, d]; with a cache, its state is read
    and kept there (``KVCache.state``)."""
    from explorer.core.mixers.deltanet import deltanet_forward
    from explorer.core.mixers.mamba2 import mamba2_forward
    from explorer.core.mixers.short_conv import short_conv_forward

    state = cache.state(plan.layer) if cache is not None else None
    run = {"deltanet": deltanet_forward, "mamba2": mamba2_forward, "short_conv": short_conv_forward}[mixer_of(plan)]
    return run(module, h, rec, plan.layer, state)
