"""Granite checkpoints against transformers on tiny random models.

Each model is built with transformers (tiny, random, eager attention), saved with save_pretrained
(safetensors), opened through load_checkpoint and compared from token ids by
``decoder_reference.check`` (logits, every attention pattern, stored and derived, the residual
stream, greedy tokens with and without the KV cache).
"""

from __future__ import annotations

import numpy as np
import pytest
from decoder_reference import IDS, build, check, save_and_open

pytest.importorskip("transformers")


def test_granite_multipliers(tmp_path):
    model = build("GraniteConfig", "GraniteForCausalLM", num_key_value_heads=2, embedding_multiplier=6.0,
                  attention_multiplier=0.05, residual_multiplier=0.3, logits_scaling=4.0)
    loaded = save_and_open(model, tmp_path)
    cfg = loaded.config
    assert loaded.arch == "granite"
    assert (cfg.embed_scale, cfg.attn_scale, cfg.residual_scale, cfg.logit_scale) == (6.0, 0.05, 0.3, 0.25)
    check(loaded, model)
    trace = loaded.trace_ids(IDS)  # attn.out is what the sublayer adds: the residual stream's step
    np.testing.assert_allclose(trace["blocks.0.resid_mid"] - trace["blocks.0.resid_pre"], trace["blocks.0.attn.out"],
                               atol=1e-5)
