"""How each family's ``transformers`` reference reports what our ``Trace`` stores (for ``verify``).

``transformers``' eager model, run with ``output_hidden_states`` and ``output_attentions``, gives
``hidden_states`` (L + 1 tensors) and ``attentions`` (L tensors). For every family in ``FAMILIES``:

* ``hidden_states[i]`` (i < L) is our ``blocks.{i}.resid_pre``, the residual stream entering block i
  (encoders: after the embedding LayerNorm, as ours);
* ``hidden_states[L]`` is our ``resid_final`` after the final norm (where the family has one) and OPT-350m's
  ``project_out`` (where it has one): ``ReferenceMap.final``;
* ``attentions[i]`` is our ``blocks.{i}.attn.pattern`` ([H, n, n]; grouped K/V already repeated to H heads).

The one exception is kept here, beside the registry, not in the verify code: transformers 5's eager
Falcon path adds an ALiBi bias twice (Falcon-RW), so that reference runs SDPA (which returns no patterns)
and its patterns are not compared.

A GGUF file is checked against transformers' own GGUF loading (``from_pretrained(folder, gguf_file=...)``),
which reads some files as a different model than llama.cpp runs; ``gguf_reference_gap`` names those, and
``verify`` refuses them in one line rather than report a difference that is transformers' reading.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

HFConfig = dict[str, Any]


@dataclass(frozen=True)
class ReferenceMap:
    """Where transformers' outputs sit among our Trace keys, and how its reference model is run."""

    attn_implementation: str = "eager"
    patterns: bool = True        # attentions[i] <-> blocks.{i}.attn.pattern
    final: str = "normed"        # hidden_states[L] <-> resid_final after ln_final and project_out ("raw": none)
    note: str = ""

    @staticmethod
    def hidden_key(layer: int, n_layers: int) -> str:
        """Our key for transformers' hidden_states[layer] (layer == n_layers: the final stream, see ``final``)."""
        return f"blocks.{layer}.resid_pre" if layer < n_layers else "resid_final"


DEFAULT = ReferenceMap()


def _falcon(hf: HFConfig) -> ReferenceMap:
    if hf.get("alibi"):
        return ReferenceMap(attn_implementation="sdpa", patterns=False,
                            note="transformers' eager Falcon adds ALiBi twice: the reference runs SDPA, "
                                 "so attention patterns are not compared")
    return DEFAULT


# model_type -> the map for that config.json, where it is not DEFAULT
OVERRIDES: dict[str, Callable[[HFConfig], ReferenceMap]] = {
    "falcon": _falcon,
}


def reference_map(model_type: str, hf: HFConfig) -> ReferenceMap:
    """The map for one checkpoint's config.json."""
    override = OVERRIDES.get(model_type)
    return override(hf) if override else DEFAULT


def gguf_reference_gap(header: Any, arch: str, spec: Any, hf: HFConfig) -> str:
    """Why transformers' GGUF loading does not give this file's model ("" where it does)."""
    from explorer.core.checkpoint.gguf_config import FALCON_NEW, LONGROPE, ROPE_FREQS
    from explorer.core.checkpoint.gguf_moe import reference_gap

    if spec.moe and (gap := reference_gap(arch, spec, hf)):
        return gap
    names = {t.name for t in header.tensors}
    scaling = header.metadata.get(f"{arch}.rope.scaling.type")
    if spec is FALCON_NEW:
        return ("transformers' GGUF loading keeps llama.cpp's regrouped q/k/v rows of the Falcon-40B/180B "
                "decoder, so its model is not this file's; verify the Hugging Face directory instead")
    if ROPE_FREQS in names:
        return ("transformers' GGUF loading drops rope_freqs (Llama 3.1+'s RoPE scaling), so its model is not "
                "this file's; verify the Hugging Face directory instead")
    if names & set(LONGROPE):
        return ("transformers' GGUF loading drops Phi-3's LongRoPE factors (rope_factors_long/short), so its "
                "model is not this file's; verify the Hugging Face directory instead")
    scalar = hf.get("query_pre_attn_scalar")
    if spec.model_type in ("gemma2", "gemma3_text") and scalar not in (None, 256):
        return (f"transformers' GGUF loading scales Gemma's attention scores by 1/sqrt(256), llama.cpp by "
                f"1/sqrt({scalar}) for this file, so its model is not this file's; verify the Hugging Face "
                "directory instead")
    if scaling not in (None, "none"):
        return (f"transformers' GGUF loading does not read {arch}.rope.scaling.type ({str(scaling)[:20]}), so its "
                "model is not this file's; verify the Hugging Face directory instead")
    return ""
