"""Where an SAE reads: a TransformerLens hook name -> our Trace key, forward-pass site and width.

TransformerLens' ``blocks.L.hook_resid_post`` is the stream entering block L+1 (``resid_final`` after
the last block); ``blocks.L.attn.hook_z`` is every head's output before W_O, flattened head-major
(``n_heads x d_head``) as SAELens' ``reshape_activations: hook_z`` does. The other names are the ones
``core/interop.py`` maps (``TL_NAMES``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from explorer.core.config import ModelConfig
from explorer.core.errors import ExplorerError
from explorer.core.interop import TL_NAMES


class SAEError(ExplorerError):
    """An SAE directory that cannot be opened, or one that does not fit the open model."""


# sites an SAE can read from a Trace; the ones the forward pass lets an intervention change are ``WRITABLE``
READABLE = ("resid_pre", "resid_mid", "attn.out", "mlp.out", "mlp.post", "attn.z", "resid_final")
WRITABLE = ("resid_pre", "attn.out", "mlp.out", "mlp.post", "attn.z", "resid_final")


@dataclass(frozen=True)
class HookPoint:
    hook_name: str           # TransformerLens' name, as the SAE's metadata gives it
    key: str                 # our Trace key (blocks.L.site or resid_final)
    site: str                # our forward-pass site
    layer: int | None        # the block (None for resid_final)
    width: int               # the activation's width there (flattened heads for attn.z)
    block: int               # the layer an intervention names: ``layer``, or n_layers for resid_final


def hook_point(hook_name: str, cfg: ModelConfig) -> HookPoint:
    """The hook point an SAE's ``hook_name`` names in a model of configuration ``cfg``."""
    match = re.match(r"^blocks\.(\d+)\.(.+)$", hook_name)
    known = "blocks.L.hook_resid_pre / hook_resid_mid / hook_resid_post / hook_attn_out / hook_mlp_out / " \
            "attn.hook_z / mlp.hook_post"
    if not match:
        raise SAEError(f"the SAE's hook {hook_name!r:.80} is not a TransformerLens block hook ({known})")
    layer, hook = int(match.group(1)), match.group(2)
    if layer >= cfg.n_layers:
        raise SAEError(f"the SAE reads {hook_name}, but the model has {cfg.n_layers} layers")
    if hook == "hook_resid_post":
        if layer == cfg.n_layers - 1:
            return HookPoint(hook_name, "resid_final", "resid_final", None, cfg.d_model, cfg.n_layers)
        return HookPoint(hook_name, f"blocks.{layer + 1}.resid_pre", "resid_pre", layer + 1, cfg.d_model, layer + 1)
    site = next((s for s, tl in TL_NAMES.items() if tl == hook), None)
    if site not in READABLE:
        raise SAEError(f"the SAE reads {hook_name}: that hook is not supported ({known})")
    if site == "resid_mid" and cfg.parallel_residual:
        raise SAEError(f"the SAE reads {hook_name}, but this model adds attention and FFN in parallel: "
                       "it has no stream between them")
    if site in ("mlp.post", "mlp.out") and not cfg.has_ffn:
        raise SAEError(f"the SAE reads {hook_name}, but this model has no FFN sublayers")
    if site == "mlp.post" and layer in getattr(cfg, "moe_layers", ()):
        raise SAEError(f"the SAE reads {hook_name}, but layer {layer} is a mixture of experts: it has no d_ff "
                       "neurons of its own (its experts have theirs)")
    width = {"attn.z": cfg.n_heads * cfg.d_head, "mlp.post": cfg.d_ff}.get(site, cfg.d_model)
    return HookPoint(hook_name, f"blocks.{layer}.{site}", site, layer, width, layer)
