"""trace.safetensors against TransformerLens' own ``run_with_cache`` on the same weights.

Tiny random GPT-2 and Llama (grouped-query attention, rotary) models are built with ``transformers``;
TransformerLens (3.x: ``HookedTransformer``; removed in 4.0) loads the same weights through its own
converters with no processing (no folding or centring: what ``from_pretrained_no_processing`` does),
and every tensor of our file whose name TransformerLens' cache has is compared: shapes equal, -inf at
the same places, and the largest absolute difference printed. TransformerLens is not a dependency:
run it in an environment that has ``transformer_lens<4`` (seen: 3.9.0, max |diff| 1.8e-07 for both).

Usage: python benchmarks/transformerlens_compare.py
"""
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import tempfile  # noqa: E402

import transformers as tf  # noqa: E402
from safetensors.numpy import load_file  # noqa: E402
from transformer_lens import HookedTransformer, HookedTransformerConfig  # noqa: E402

from explorer.core.checkpoint.in_memory import from_transformers  # noqa: E402
from explorer.core.interop import write_trace_safetensors  # noqa: E402
from explorer.core.tokenize.base import VocabTokenizer  # noqa: E402

def compare(name, hf, cfg, convert):
    tl = HookedTransformer(cfg)
    tl.load_and_process_state_dict(convert(hf, cfg), fold_ln=False, center_writing_weights=False,
                                   center_unembed=False, fold_value_biases=False, refactor_factored_attn_matrices=False)
    tl.eval()
    ids = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8]
    loaded = from_transformers(hf, VocabTokenizer([f"w{i}" for i in range(cfg.d_vocab)]), device="cpu")
    path = str(Path(tempfile.mkdtemp()) / f"{name}.safetensors")
    write_trace_safetensors(loaded.trace_ids(ids), path)
    ours = load_file(path)
    logits, cache = tl.run_with_cache(torch.tensor([ids]))
    worst, missing, compared = 0.0, [], 0
    for key, value in ours.items():
        if key == "logits":
            ref = logits.detach().numpy()
        elif key in cache:
            ref = cache[key].detach().numpy()
        else:
            missing.append(key); continue
        assert ref.shape == value.shape, (key, ref.shape, value.shape)
        finite = np.isfinite(ref)
        assert (finite == np.isfinite(value)).all() and (ref[~finite] == value[~finite]).all(), key
        diff = float(np.abs(ref[finite] - value[finite]).max()) if finite.any() else 0.0
        worst = max(worst, diff); compared += 1
        if diff > 1e-4: print("  DIFF", key, diff)
    print(f"{name}: {compared} tensors equal in name and shape, max |diff| {worst:.2e}; not in TL's cache: {sorted(set(k.split('.', 2)[-1] if k.startswith('blocks.') else k for k in missing))}")

torch.manual_seed(0)
hf = tf.GPT2LMHeadModel(tf.GPT2Config(n_embd=64, n_layer=2, n_head=4, n_positions=32, vocab_size=50, attn_implementation="eager")).eval()
cfg = HookedTransformerConfig(d_model=64, d_head=16, n_heads=4, n_layers=2, n_ctx=32, d_vocab=50, d_mlp=256, act_fn="gelu_new",
                              normalization_type="LN", eps=1e-5, positional_embedding_type="standard",
                              original_architecture="GPT2LMHeadModel", default_prepend_bos=False)
from transformer_lens.pretrained.weight_conversions import convert_gpt2_weights, convert_llama_weights
compare("gpt2", hf, cfg, convert_gpt2_weights)

torch.manual_seed(0)
hf = tf.LlamaForCausalLM(tf.LlamaConfig(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                                        num_key_value_heads=2, vocab_size=50, max_position_embeddings=32, rms_norm_eps=1e-6,
                                        attn_implementation="eager")).eval()
cfg = HookedTransformerConfig(d_model=64, d_head=16, n_heads=4, n_key_value_heads=2, n_layers=2, n_ctx=32, d_vocab=50, d_mlp=96,
                              act_fn="silu", normalization_type="RMS", eps=1e-6, positional_embedding_type="rotary",
                              rotary_dim=16, rotary_base=10000, rotary_adjacent_pairs=False, gated_mlp=True, final_rms=True,
                              original_architecture="LlamaForCausalLM", default_prepend_bos=False)
compare("llama-gqa", hf, cfg, convert_llama_weights)
