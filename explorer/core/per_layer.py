"""What a block may read besides its stream: Gemma 4's per-layer embeddings and the keys and values of an earlier
layer (KV sharing), carried through one forward pass by a ``Side``.

Per-layer embeddings (PLE): every token also looks up a vector of ``L x d_per_layer`` numbers in a second
embedding table (times sqrt(d_per_layer)); a projection of its ordinary (scaled) embedding, times 1/sqrt(d) and
RMS-normed per layer, is added and the sum halved in norm (times 1/sqrt(2)). Block l reads slice l: after its FFN
it adds norm(W_proj(act(x W_gate) * e_l)) to the stream (``ple_sublayer``), then (Gemma 4) the whole stream is
multiplied by the block's ``layer_scalar``.

KV sharing: each of Gemma 4's last ``kv_shared_layers`` layers attends with the keys and values its plan's
``kv_from`` layer computed in the same pass (from the cache when decoding); ``Side.kv`` hands them over.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from explorer.core.attention import Rec
from explorer.core.config import ModelConfig
from explorer.core.layers import activation, make_norm


@dataclass
class Side:
    """The side inputs of one forward pass: per-layer embeddings [B, n, L, d_per_layer] and shared K/V."""

    per_layer: Tensor | None = None
    kv: dict[int, tuple[Tensor, Tensor]] = field(default_factory=dict)

    def for_layer(self, layer: int) -> Tensor | None:
        return None if self.per_layer is None else self.per_layer[:, :, layer]


class PerLayerEmbeddings(nn.Module):
    """The model-level half of PLE: the table, the projection of the embedding and its norm."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.embed = nn.Embedding(cfg.per_layer_vocab, cfg.n_layers * cfg.d_per_layer)
        self.project = nn.Linear(cfg.d_model, cfg.n_layers * cfg.d_per_layer, bias=False)
        self.norm = make_norm(cfg, cfg.d_per_layer)


def per_layer_inputs(cfg: ModelConfig, ple: PerLayerEmbeddings, token_ids: Tensor, embedded: Tensor) -> Tensor:
    """token_ids [B, n] and their scaled embeddings [B, n, d] -> every block's per-layer input [B, n, L, d_pl]."""
    L, dp = cfg.n_layers, cfg.d_per_layer
    table = ple.embed(token_ids) * torch.tensor(dp ** 0.5, dtype=ple.embed.weight.dtype)
    projected = ple.project(embedded) * (cfg.d_model ** -0.5)
    projected = ple.norm(projected.reshape(*embedded.shape[:-1], L, dp))
    return (projected + table.reshape(*token_ids.shape, L, dp)) * (2.0 ** -0.5)


def ple_sublayer(cfg: ModelConfig, blk: nn.Module, x: Tensor, inputs: Tensor, rec: Rec, layer: int) -> Tensor:
    """What block ``layer``'s per-layer input adds to the stream x [B, n, d]: norm(W_proj(act(x W_gate) * e_l))."""
    inputs = rec("ple.in", layer, inputs)                               # [B, n, d_pl]
    gated = activation(cfg.activation)(blk.ple.W_gate(x)) * inputs
    rec("ple.gate", layer, gated)
    return rec("ple.out", layer, blk.ple.norm(blk.ple.W_proj(gated)))


def scale_of(blk: nn.Module) -> float:
    """The block's layer scalar (1 where the model has none)."""
    scalar = getattr(blk, "layer_scalar", None)
    return 1.0 if scalar is None else float(scalar.detach().float().reshape(-1)[0])


def kv_sources(cfg: ModelConfig) -> frozenset[int]:
    """The layers whose keys and values a later layer reads."""
    return frozenset(p.kv_from for p in cfg.plan if p.kv_from is not None)



def rerun_side(trace, layer: int, to_model) -> Side:
    """What re-running block ``layer`` from a trace's ``resid_pre`` needs besides it: its per-layer input (stored,
    or computed again from the tokens) and the keys and values of the layer it shares them with (stored or derived).
    ``to_model(array)``: the array as a [1, ...] tensor where the block computes."""
    cfg, side = trace.config, Side()
    plan = cfg.layer(layer)
    if plan.kv_from is not None:
        side.kv[plan.kv_from] = (to_model(trace.tensor(f"blocks.{plan.kv_from}.attn.k")),  # (where the trace keeps
                                 to_model(trace.tensor(f"blocks.{plan.kv_from}.attn.v")))  # them: no host copy)
    if cfg.d_per_layer:
        key = f"blocks.{layer}.ple.in"
        if key in trace.stored_keys():
            mine = to_model(trace.tensor(key))
        else:
            model = trace._model
            ids = torch.as_tensor(trace.token_ids, device=model.embed.weight.device)[None]
            with torch.inference_mode():
                embedded = model.embed(ids) * torch.tensor(cfg.embed_scale, dtype=model.embed.weight.dtype)
                mine = per_layer_inputs(cfg, model.ple, ids, embedded)[:, :, layer]
            mine = to_model(mine[0])
        side.per_layer = mine[:, :, None].expand(-1, -1, cfg.n_layers, -1)
    return side
