"""GPT-Neo checkpoints against transformers on tiny random models.

Each model is built with transformers (tiny, random, eager attention), saved with save_pretrained
(safetensors), opened through load_checkpoint and compared from token ids by
``decoder_reference.check`` (logits, every attention pattern, stored and derived, the residual
stream, greedy tokens with and without the KV cache).
"""

from __future__ import annotations

import numpy as np
import pytest
from decoder_reference import IDS, compare
from decoder_reference import build_saved as build

from explorer.core.checkpoint import load_checkpoint
from explorer.core.trace import CaptureSpec

pytest.importorskip("transformers")


def test_gpt_neo_local_layers_and_unscaled_scores_match_reference(tmp_path):
    model, path = build("GPTNeoConfig", "GPTNeoForCausalLM", tmp_path, num_layers=2, num_heads=4,
                        attention_types=[[["global", "local"], 1]], window_size=5)
    loaded = load_checkpoint(path)
    cfg = loaded.config
    assert loaded.arch == "gpt-neo" and cfg.attn_scale == 1.0
    assert cfg.sliding_window == 5 and cfg.sliding_layers == (1,)
    compare(loaded, model)
    trace = loaded.trace_ids(IDS, CaptureSpec.compact())
    assert np.isfinite(trace.head(0, 0, "scores")[-1]).sum() == len(IDS)  # global layer: every earlier key
    assert np.isfinite(trace.head(1, 0, "scores")[-1]).sum() == 5         # local layer: the last 5 keys
    # unscaled: the stored score is the plain dot product of the stored q and k
    q, k = trace["blocks.0.attn.q"][0], trace["blocks.0.attn.k"][0]
    assert np.allclose(trace.head(0, 0, "scores")[3, 2], q[3] @ k[2], atol=1e-4)
