"""Which keys a trace has, layer by layer, and what they weigh: read from the model's per-layer plan.

A block's keys depend on what the block is (``cfg.layer(l)``, core/plan.py): a dense FFN has neurons
(``mlp.pre``/``mlp.post``), a mixture of experts has its router's keys (``moe.*``), gpt-oss's attention has
its sinks' weights, a q/k norm has statistics. ``block_sites``, ``norm_sites`` and ``site_shape`` are the one
place that lists them, for the Trace (what it can derive), the export (core/interop.py) and the size estimate
(``estimate_nbytes``). This module does not import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from explorer.core.config import ModelConfig
    from explorer.core.trace import CaptureSpec

# capture kinds; "experts" (each chosen expert's own output, n x k x d per layer) is derived on demand only;
# "mixer": a recurrent or convolutional layer's own values (core/mixers/), "effective": the weights of the sum
# over earlier tokens such a layer computes (derived on demand only, core/mixers/effective.py)
KINDS = ("embed", "resid", "norm", "qkv", "scores", "pattern", "attn", "mlp", "moe", "experts", "mixer",
         "effective", "logits")
ON_DEMAND = ("scores", "pattern", "experts", "effective")  # not stored by the default (full) capture
EFFECTIVE = "mixer.effective_attention"  # [H, n, n]: y_t = sum_s A[t, s] v_s of a recurrent / convolutional layer
# each mixer's recorded values (shapes in site_shape; H its heads)
MIXER_SITES = {
    "deltanet": ("mixer.q", "mixer.k", "mixer.v", "mixer.beta", "mixer.log_decay", "mixer.state_norm", "mixer.y",
                 "mixer.gate"),
    "mamba2": ("mixer.x", "mixer.B", "mixer.C", "mixer.dt", "mixer.log_decay", "mixer.state_norm", "mixer.y",
               "mixer.gate"),
    "short_conv": ("mixer.B", "mixer.C", "mixer.x", "mixer.state_norm", "mixer.y"),
}
MOE_SITES = ("moe.router_logits", "moe.probs", "moe.choice", "moe.experts", "moe.weights")
INTEGER_SITES = ("moe.experts",)  # int64: each token's chosen experts


def kind_of(site: str) -> str:
    """The capture kind a recording site belongs to."""
    if site in ("embed", "pos_embed", "type_embed", "ple.in"):
        return "embed"
    if site == EFFECTIVE:
        return "effective"
    if site.startswith("mixer."):
        return "mixer"
    if site.startswith("ple."):
        return "mlp"
    if site.startswith("resid"):
        return "resid"
    if site.startswith(("ln1", "ln2", "ln_final", "ln_embed", "attn.q_norm.", "attn.k_norm.")):
        return "norm"
    if site in ("attn.q", "attn.k", "attn.v"):
        return "qkv"
    if site in ("attn.scores", "attn.scores_precap"):
        return "scores"
    if site == "attn.pattern":
        return "pattern"
    if site.startswith("attn."):
        return "attn"
    if site.startswith("mlp."):
        return "mlp"
    if site == "moe.expert_out":
        return "experts"
    if site.startswith("moe."):
        return "moe"
    if site == "logits":
        return "logits"
    raise KeyError(site)


def norm_sites(cfg: ModelConfig, layer: int) -> list[str]:
    """The norms inside block ``layer`` whose statistics a trace records (core/layers.py's Block)."""
    if cfg.norm == "none":
        return []
    plan = cfg.layer(layer)
    mixes = plan.mixer != "none"
    sites = []
    if cfg.norm_placement != "output":
        sites += (["ln1"] if mixes else []) + (["ln2"] if plan.has_ffn and not cfg.shared_norm else [])
    if cfg.norm_placement in ("sandwich", "output"):
        sites += (["ln1_out"] if mixes else []) + (["ln2_out"] if plan.has_ffn else [])
    if plan.qk_norm != "none" and plan.is_attention:
        sites += ["attn.q_norm"] + (["attn.k_norm"] if plan.kv_from is None else [])  # sharing: no k of its own
    return sites


def stat_names(cfg: ModelConfig, site: str) -> tuple[str, ...]:
    """The statistics a norm records: LayerNorm's mean and var, RMSNorm's mean_square (Llama 4's unscaled
    q/k norms are RMSNorms in a LayerNorm model too)."""
    rms = cfg.norm == "rmsnorm" or (site.startswith("attn.") and cfg.qk_norm == "head_unscaled")
    return ("mean_square",) if rms else ("mean", "var")


def block_sites(cfg: ModelConfig, layer: int) -> list[str]:
    """Every site of block ``layer`` a trace can give (stored or derived by re-running the block)."""
    plan = cfg.layer(layer)
    if plan.is_attention:
        sites = ["attn.q", "attn.k", "attn.v", "attn.scores", "attn.pattern", "attn.z", "attn.out", "resid_mid"]
        if cfg.attn_softcap is not None:
            sites.append("attn.scores_precap")
        if cfg.attn_sinks:
            sites.append("attn.sink")
        if cfg.attn_output_gate:
            sites.append("attn.gate")
        if plan.parallel_ssm:  # Falcon-H1: the Mamba-2 scan beside the attention, its output added to attn.out
            sites += [*MIXER_SITES["mamba2"], EFFECTIVE, "mixer.out"]
    elif plan.mixer == "none":
        sites = []
    else:  # the mixer's own values, what it adds (attn.out, as attention's), its effective attention
        sites = [*MIXER_SITES[plan.mixer], EFFECTIVE, "attn.out", "resid_mid"]
    sites += [f"{ln}.{s}" for ln in norm_sites(cfg, layer) for s in stat_names(cfg, ln)]
    if cfg.d_per_layer:
        sites += ["ple.in", "ple.gate", "ple.out"]
    if plan.ffn == "dense":
        sites += ["mlp.pre", "mlp.post", "mlp.out"]
    elif plan.is_moe:
        sites += [*MOE_SITES, "moe.expert_out", "mlp.out"] + (["moe.shared_out"] if cfg.d_shared else [])
    return sites


def site_shape(cfg: ModelConfig, site: str, n: int, layer: int | None = None) -> tuple[int, ...]:
    """Our shape of a site of block ``layer`` (or a model-level key) for n tokens, from the configuration."""
    plan = cfg.layer(layer if layer is not None else 0)
    if site in ("attn.q", "attn.z"):
        return (plan.n_heads, n, plan.d_head if site == "attn.q" else plan.d_head_v)
    if site in ("attn.k", "attn.v"):
        heads = plan.n_heads if cfg.kv_lora_rank is not None else plan.n_kv_heads  # MLA: a key per head
        return (heads, n, plan.d_head if site == "attn.k" else plan.d_head_v)
    if site in ("attn.scores", "attn.pattern", "attn.scores_precap"):
        return (plan.n_heads, n, n)
    if site == "attn.sink":
        return (plan.n_heads, n)
    if site in ("mlp.pre", "mlp.post"):
        return (n, plan.d_ff)
    if site in ("moe.router_logits", "moe.probs", "moe.choice"):
        return (n, cfg.n_experts)
    if site in ("moe.experts", "moe.weights"):
        return (n, cfg.experts_per_token)
    if site == "moe.expert_out":
        return (n, cfg.experts_per_token, cfg.d_model)
    if site == "logits":
        return (n, cfg.vocab_size)
    if site.startswith("mixer.") or site in ("ple.in", "ple.gate", "attn.gate"):
        return mixer_shape(cfg, plan, site, n)
    if site.split(".")[-1] in ("mean", "var", "mean_square"):
        if plan.qk_norm in ("head", "per_head", "head_unscaled") and site.startswith(("attn.q_norm.", "attn.k_norm.")):
            return (plan.n_heads if site.startswith("attn.q_norm.") else plan.n_kv_heads, n)
        return (n,)
    return (n, cfg.d_model)


def mixer_shape(cfg: ModelConfig, plan, site: str, n: int) -> tuple[int, ...]:
    """The shapes of a mixer's values (``MIXER_SITES``), Gemma 4's per-layer input and the attention gate."""
    if site in ("ple.in", "ple.gate"):
        return (n, cfg.d_per_layer)
    if site == "mixer.out":
        return (n, cfg.d_model)
    if site == "attn.gate":
        return (plan.n_heads, n, plan.d_head_v)
    if plan.mixer == "short_conv":
        return (cfg.d_model, n, n) if site == EFFECTIVE else (n,) if site == "mixer.state_norm" else (n, cfg.d_model)
    if plan.mixer == "deltanet":
        Hk, Hv, dk, dv = cfg.delta_k_heads, cfg.delta_v_heads, cfg.delta_d_k, cfg.delta_d_v
        return {"mixer.q": (Hk, n, dk), "mixer.k": (Hk, n, dk), "mixer.v": (Hv, n, dv), "mixer.y": (Hv, n, dv),
                "mixer.gate": (Hv, n, dv), EFFECTIVE: (Hv, n, n)}.get(site, (Hv, n))
    H, P, G, N = cfg.ssm_heads, cfg.ssm_d_head, cfg.ssm_groups, cfg.ssm_d_state
    return {"mixer.x": (H, n, P), "mixer.y": (H, n, P), "mixer.gate": (H, n, P), "mixer.B": (G, n, N),
            "mixer.C": (G, n, N), EFFECTIVE: (H, n, n)}.get(site, (H, n))


def estimate_nbytes(config: ModelConfig, n: int, spec: CaptureSpec) -> int:
    """How many bytes a trace of n tokens will store under ``spec`` (before running anything)."""
    c = config
    total = 0
    for layer in range(c.n_layers):
        for site in block_sites(c, layer) + ["resid_pre"]:
            if spec.wants(kind_of(site), layer) and site != EFFECTIVE:  # (never stored: derived when asked)
                total += int(np.prod(site_shape(c, site, n, layer))) * (2 if site in INTEGER_SITES else 1)
    stats = {"layernorm": 2, "rmsnorm": 1, "none": 0}[c.norm]
    if "embed" in spec.kinds:  # the token rows, and the position rows where positions are added
        total += n * c.d_model * (2 if c.positions in ("learned", "sinusoidal") else 1)
    if "resid" in spec.kinds:
        total += n * c.d_model
    if "norm" in spec.kinds and c.final_norm:
        total += stats * n
    if "logits" in spec.kinds:
        total += n * c.vocab_size
    return total * np.dtype(spec.dtype).itemsize
