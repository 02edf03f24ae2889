"""The modules a block is built from: norms, attention projections, the dense FFN, the KV cache.

A ``Block`` is built from its ``LayerPlan`` (core/plan.py): its heads' shapes, its q/k norm, whether its
attention is multi-head latent attention (core/mla.py), whether its FFN is dense or a mixture of experts
(core/moe.py). The arithmetic is in ``model.Transformer.block_forward``.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from explorer.core.attention import soft_cap
from explorer.core.config import ModelConfig
from explorer.core.errors import CheckpointError
from explorer.core.modules import FFN, Norm, activation, make_norm  # noqa: F401 - re-exported: a block's parts
from explorer.core.plan import IMPLEMENTED_MIXERS, LayerPlan


class Attention(nn.Module):
    """A block's attention projections for its plan: W_Q, W_K, W_V, W_O (and the q/k norms, the sinks), or
    multi-head latent attention's (``kv_lora_rank``: DeepSeek; see core/mla.py)."""

    def __init__(self, cfg: ModelConfig, plan: LayerPlan) -> None:
        super().__init__()
        H, Hkv, dh, dv, d = plan.n_heads, plan.n_kv_heads, plan.d_head, plan.d_head_v, cfg.d_model
        out_bias = cfg.attn_bias if cfg.attn_out_bias is None else cfg.attn_out_bias
        self.W_Q = self.W_K = self.W_V = self.W_G = None
        if cfg.kv_lora_rank is not None:  # MLA: queries (maybe through a rank-q latent), K/V through a latent
            from explorer.core.mla import add_latent_projections

            add_latent_projections(self, cfg, plan)
        else:
            self.W_Q = nn.Linear(d, H * dh, bias=cfg.attn_bias)
            if plan.kv_from is None:  # Gemma 4's sharing layers read an earlier layer's keys and values
                self.W_K = nn.Linear(d, Hkv * dh, bias=cfg.attn_bias)
                self.W_V = None if plan.k_eq_v else nn.Linear(d, Hkv * dv, bias=cfg.attn_bias)
        if cfg.attn_output_gate:  # Qwen3.5/Next: each head's output times sigmoid(x W_G) [H * dv]
            self.W_G = nn.Linear(d, H * dv, bias=cfg.attn_bias)
        self.W_O = nn.Linear(H * dv, d, bias=out_bias)
        self.v_norm = Norm("rmsnorm", dv, cfg.norm_eps, affine=False) if cfg.v_norm and plan.kv_from is None else None
        self.q_norm = self.k_norm = None
        if plan.qk_norm in ("head", "per_head", "head_unscaled"):  # over each head's d_head numbers
            per = plan.qk_norm == "per_head"
            if plan.qk_norm == "head_unscaled":  # Llama 4: no weight
                self.q_norm = Norm("rmsnorm", dh, cfg.norm_eps, affine=False)
                self.k_norm = Norm("rmsnorm", dh, cfg.norm_eps, affine=False)
            else:
                self.q_norm = make_norm(cfg, dh, H if per else None, bias=not per)
                self.k_norm = make_norm(cfg, dh, Hkv if per else None, bias=not per) if plan.kv_from is None else None
        elif plan.qk_norm == "full":  # over all heads' numbers at once
            self.q_norm, self.k_norm = make_norm(cfg, H * dh), make_norm(cfg, Hkv * dh)
        # gpt-oss: one learned logit per head that joins every row of its scores in the softmax
        self.sinks = nn.Parameter(torch.zeros(H)) if cfg.attn_sinks else None


class Block(nn.Module):
    """One block as its plan says: norms, the attention, and a dense FFN or a mixture of experts (``moe``)."""

    def __init__(self, cfg: ModelConfig, plan: LayerPlan) -> None:
        super().__init__()
        if plan.mixer not in IMPLEMENTED_MIXERS:
            raise CheckpointError(f"layer {plan.layer}: its {plan.mixer} mixer is not one this app runs yet")
        has_norm = cfg.norm != "none"
        mixes = plan.mixer != "none"  # Nemotron-H: a block that is only an FFN
        norm_in = has_norm and cfg.norm_placement != "output"  # pre-, post- or sandwich norms
        norm_out = has_norm and cfg.norm_placement in ("sandwich", "output")  # on each sublayer's output
        self.ln1 = make_norm(cfg, cfg.d_model) if norm_in and mixes else None
        self.attn = Attention(cfg, plan) if plan.is_attention else None
        self.mixer = None
        if plan.is_recurrent or plan.parallel_ssm:  # DeltaNet, Mamba-2 (Falcon-H1: beside attention), a convolution
            from explorer.core.mixers import build_mixer

            self.mixer = build_mixer(cfg, plan)
        self.ln2 = make_norm(cfg, cfg.d_model) if norm_in and plan.has_ffn and not cfg.shared_norm else None
        self.mlp = FFN(cfg, plan.d_ff) if plan.ffn == "dense" else None
        self.moe = None
        if plan.is_moe:
            from explorer.core.moe import MoE

            self.moe = MoE(cfg)
        self.ln1_out = make_norm(cfg, cfg.d_model) if norm_out and mixes else None
        self.ln2_out = make_norm(cfg, cfg.d_model) if norm_out and plan.has_ffn else None
        self.ple = PerLayerInput(cfg) if cfg.d_per_layer else None
        if cfg.layer_scalars:  # Gemma 4: the stream leaving the block times this (a buffer, as theirs)
            self.register_buffer("layer_scalar", torch.ones(1))


class PerLayerInput(nn.Module):
    """Gemma 4's per-layer embedding sublayer: x + norm(W_proj(act(x W_gate) * e_l)), e_l this layer's slice of
    the per-layer embeddings (core/per_layer.py)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.W_gate = nn.Linear(cfg.d_model, cfg.d_per_layer, bias=False)
        self.W_proj = nn.Linear(cfg.d_per_layer, cfg.d_model, bias=False)
        self.norm = make_norm(cfg, cfg.d_model)


class MLMHead(nn.Module):
    """BERT's masked-LM head before the un-embedding: dense d -> d, activation, norm; and the output bias."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(cfg.d_model, cfg.d_model)
        self.norm = make_norm(cfg, cfg.d_model)
        self.bias = nn.Parameter(torch.zeros(cfg.vocab_size))


class KVCache:
    """Keys and values of the tokens seen so far, per layer, so each new token costs one position; for a
    recurrent or convolutional layer (core/mixers/), its state instead (``state(layer)``)."""

    def __init__(self, n_layers: int) -> None:
        self.keys: list[Tensor | None] = [None] * n_layers
        self.values: list[Tensor | None] = [None] * n_layers
        self.states: list = [None] * n_layers  # core/mixers/conv.MixerState of the layers that have one

    @property
    def length(self) -> int:
        """Tokens seen: the first layer that holds anything says (a KV-sharing layer holds nothing)."""
        for layer in range(len(self.keys)):
            if seen := self.seen(layer):
                return seen
        return 0

    def seen(self, layer: int) -> int:
        """How many positions block ``layer`` holds (before this step's are added)."""
        if self.states[layer] is not None:
            return self.states[layer].length
        keys = self.keys[layer]
        return 0 if keys is None else keys.shape[-2]

    def state(self, layer: int):
        """Layer ``layer``'s mixer state (created empty the first time), kept across decoding steps."""
        if self.states[layer] is None:
            from explorer.core.mixers.conv import MixerState

            self.states[layer] = MixerState()
        return self.states[layer]

    def extend(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        if self.keys[layer] is not None:
            k = torch.cat([self.keys[layer], k], dim=-2)
            v = torch.cat([self.values[layer], v], dim=-2)
        self.keys[layer], self.values[layer] = k, v
        return k, v


def output_logits(cfg: ModelConfig, logits: Tensor) -> Tensor:
    """The un-embedding's output as the model reports it: Granite scales it, Gemma 2 soft-caps it."""
    if cfg.logit_scale != 1.0:
        logits = logits * cfg.logit_scale
    if cfg.final_softcap is not None:
        logits = soft_cap(logits, cfg.final_softcap)
    return logits
