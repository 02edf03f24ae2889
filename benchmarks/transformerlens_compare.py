"""trace.safetensors against TransformerLens' own ``run_with_cache`` on the same weights.

Tiny random GPT-2 and Llama (grouped-query attention, rotary) models are built with ``transformers``
(eager attention), and every tensor of our file whose name TransformerLens' cache has is compared:
shapes equal, masked scores at the same places, and the largest absolute difference printed.

* TransformerLens 4 (``TransformerBridge``): the bridge wraps the transformers model itself, in its
  default mode (no ``enable_compatibility_mode()``: the checkpoint's weights, unfolded); its masked
  scores are the dtype's lowest number (transformers' eager mask) where ours are -inf.
* TransformerLens 3.x (``HookedTransformer``; removed in 4.0): the same weights through its own
  converters with no processing (what ``from_pretrained_no_processing`` does); masked scores -inf.

TransformerLens is not a dependency: run it in an environment that has it (seen: 4.3.0, max |diff|
1.8e-07 for GPT-2 and 1.6e-07 for Llama, 34 and 33 tensors; 3.9.0, 1.8e-07 for both, the same tensors).

Usage: python benchmarks/transformerlens_compare.py
"""
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is downloaded
import transformers as tf  # noqa: E402
from safetensors.numpy import load_file  # noqa: E402

import _transformerlens as tlh  # noqa: E402
from explorer.core.checkpoint.in_memory import from_transformers  # noqa: E402
from explorer.core.interop import write_trace_safetensors  # noqa: E402
from explorer.core.tokenize.base import VocabTokenizer  # noqa: E402

VERSION = tlh.version()
if VERSION is None:
    sys.exit("TransformerLens is not installed here (pip install transformer-lens, in a separate venv)")
BRIDGE = tlh.is_bridge(VERSION)


def compare(name, hf, dims, eps):
    ids = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8]
    loaded = from_transformers(hf, VocabTokenizer([f"w{i}" for i in range(hf.config.vocab_size)]), device="cpu")
    path = str(Path(tempfile.mkdtemp()) / f"{name}.safetensors")
    write_trace_safetensors(loaded.trace_ids(ids), path)
    ours = load_file(path)
    if BRIDGE:  # after our trace: the bridge wraps hf in place
        tl = tlh.bridge(hf, f"random-{name}")
    else:
        tl = tlh.hooked_transformer(hf, name != "gpt2", dims, 32, "cpu", torch.float32,
                                   rotary_base=getattr(hf.config, "rope_theta", 10000.0), eps=eps)
    with torch.inference_mode():
        logits, cache = tl.run_with_cache(torch.tensor([ids]))
    worst, missing, compared = 0.0, [], 0
    for key, value in ours.items():
        if key == "logits":
            ref = logits.detach().numpy()
        elif key in cache:
            ref = cache[key].detach().numpy()
        else:
            missing.append(key)
            continue
        assert ref.shape == value.shape, (key, ref.shape, value.shape)
        masked = ~np.isfinite(value)  # ours: -inf above the diagonal of the scores
        theirs = ref <= np.finfo(ref.dtype).min if BRIDGE else ~np.isfinite(ref)
        assert (masked == theirs).all(), key
        assert BRIDGE or (ref[masked] == value[masked]).all(), key
        diff = float(np.abs(ref[~masked] - value[~masked]).max()) if (~masked).any() else 0.0
        worst = max(worst, diff)
        compared += 1
        if diff > 1e-4:
            print("  DIFF", key, diff)
    api = "TransformerBridge (default mode)" if BRIDGE else "HookedTransformer (no processing)"
    rest = sorted(set(k.split('.', 2)[-1] if k.startswith('blocks.') else k for k in missing))
    print(f"{name}, TransformerLens {VERSION} {api}: {compared} tensors equal in name and shape, "
          f"max |diff| {worst:.2e}; not in TL's cache: {rest}")


torch.manual_seed(0)
hf = tf.GPT2LMHeadModel(tf.GPT2Config(n_embd=64, n_layer=2, n_head=4, n_positions=32, vocab_size=50,
                                      bos_token_id=0, eos_token_id=0, attn_implementation="eager")).eval()
compare("gpt2", hf, dict(d_model=64, d_head=16, n_heads=4, n_layers=2, d_vocab=50, d_mlp=256), 1e-5)

torch.manual_seed(0)
hf = tf.LlamaForCausalLM(tf.LlamaConfig(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                                        num_key_value_heads=2, vocab_size=50, max_position_embeddings=32,
                                        rms_norm_eps=1e-6, bos_token_id=0, eos_token_id=0,
                                        attn_implementation="eager")).eval()
compare("llama-gqa", hf, dict(d_model=64, d_head=16, n_heads=4, n_key_value_heads=2, n_layers=2, d_vocab=50,
                              d_mlp=96), 1e-6)
