"""Tiny random SAEs and transcoders written with sae_lens itself (test-only dependency) at test time."""

from __future__ import annotations

from pathlib import Path

import torch

CLASSES = {"standard": ("StandardSAE", "StandardSAEConfig"), "jumprelu": ("JumpReLUSAE", "JumpReLUSAEConfig"),
           "topk": ("TopKSAE", "TopKSAEConfig"), "gated": ("GatedSAE", "GatedSAEConfig"),
           "transcoder": ("Transcoder", "TranscoderConfig"),
           "jumprelu_transcoder": ("JumpReLUTranscoder", "JumpReLUTranscoderConfig")}


def write_sae(path: Path, arch: str, hook_name: str, d_in: int, d_sae: int, model_name: str = "tiny-gpt2",
              seed: int = 0, scale: float = 0.3, **settings):
    """Save a random sae_lens SAE of architecture ``arch`` under ``path``; returns sae_lens' own copy, loaded
    back from the directory with ``SAE.load_from_disk`` (the reference)."""
    import sae_lens
    from sae_lens.saes.sae import SAEMetadata

    sae_cls, cfg_cls = (getattr(sae_lens, n) for n in CLASSES[arch])
    meta = {"hook_name": hook_name, "model_name": model_name}
    if "hook_name_out" in settings:
        meta["hook_name_out"] = settings.pop("hook_name_out")
    cfg = cfg_cls(d_in=d_in, d_sae=d_sae, metadata=SAEMetadata(**meta), **settings)
    sae = sae_cls(cfg)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sae.named_parameters():
            p.copy_(scale * torch.randn(p.shape, generator=gen))
            if name == "threshold":
                p.abs_()
    sae.save_model(path)
    return sae_lens.SAE.load_from_disk(path)
