"""TransformerLens on the very weights of a ``transformers`` model, for the benchmarks only (never the app).

TransformerLens 4 (``TransformerBridge``; 4.0 removed ``HookedTransformer``) wraps the in-memory model
itself: ``TransformerBridge.boot_transformers(name, hf_model=hf, tokenizer=...)`` reads the config from
the model, so nothing is looked up or downloaded (``HF_HUB_OFFLINE=1`` is set as well), and the
tokenizer is a stand-in word-level one over the ids ``w0``..``w{vocab-1}`` (only ids are fed to it).
It runs in its default mode, as TL 4 users do: no ``enable_compatibility_mode()``, so the weights are
the checkpoint's (no folding or centring) and the attention is transformers' eager one (the bridge
switches the model to it so that ``hook_pattern`` fires). The bridge modifies the model in place: its
components replace the model's submodules and its attention becomes eager; time the model before.

TransformerLens 3.x (``HookedTransformer``) gets the weights through its own converters instead,
unprocessed (what ``from_pretrained_no_processing`` does).
"""

from __future__ import annotations

import os
from importlib import metadata


def version() -> str | None:
    """The installed TransformerLens' version, or None."""
    try:
        return metadata.version("transformer_lens")
    except metadata.PackageNotFoundError:
        return None


def is_bridge(v: str | None) -> bool:
    """TransformerLens >= 4: ``TransformerBridge`` (``HookedTransformer`` is gone)."""
    return v is not None and int(v.split(".")[0]) >= 4


def stand_in_tokenizer(vocab_size: int):
    """A word-level fast tokenizer over ``w0``..``w{vocab_size-1}``: the bridge wants one; ids are fed directly."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    vocab = {f"w{i}": i for i in range(vocab_size)}
    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="w0")),
                                   unk_token="w0")


def bridge(hf, name: str = "random"):
    """TL 4's ``TransformerBridge`` around ``hf`` itself (modified in place; see the module's docstring)."""
    from transformer_lens.model_bridge import TransformerBridge

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    p = next(hf.parameters())
    b = TransformerBridge.boot_transformers(name, hf_model=hf, tokenizer=stand_in_tokenizer(hf.config.vocab_size),
                                            device=p.device, dtype=p.dtype)
    return b.eval()


def hooked_transformer(hf, llama: bool, dims: dict, n_ctx: int, device, dtype, rotary_base: float = 10000.0,
                       eps: float = 1e-5):
    """TL 3.x's ``HookedTransformer`` loaded with ``hf``'s weights, unprocessed. ``dims``: d_model, d_head,
    n_heads, n_layers, d_vocab, d_mlp and, for Llama, n_key_value_heads."""
    from transformer_lens import HookedTransformer, HookedTransformerConfig
    from transformer_lens.pretrained.weight_conversions import convert_gpt2_weights, convert_llama_weights

    common = dict(**dims, n_ctx=n_ctx, device=device, dtype=dtype, default_prepend_bos=False, eps=eps)
    if not llama:
        cfg = HookedTransformerConfig(**common, act_fn="gelu_new", normalization_type="LN",
                                      positional_embedding_type="standard", original_architecture="GPT2LMHeadModel")
        convert = convert_gpt2_weights
    else:
        cfg = HookedTransformerConfig(**common, act_fn="silu", normalization_type="RMS",
                                      positional_embedding_type="rotary", rotary_dim=dims["d_head"],
                                      rotary_base=int(rotary_base), rotary_adjacent_pairs=False, gated_mlp=True,
                                      final_rms=True, original_architecture="LlamaForCausalLM")
        convert = convert_llama_weights
    tl = HookedTransformer(cfg, move_to_device=True)
    tl.load_and_process_state_dict(convert(hf, cfg), fold_ln=False, center_writing_weights=False,
                                   center_unembed=False, fold_value_biases=False,
                                   refactor_factored_attn_matrices=False)
    return tl.eval()
