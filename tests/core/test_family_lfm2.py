"""LFM2 against transformers on tiny random models (float32): short gated convolutions beside attention, their
band of effective attention rebuilding each convolution's output (hybrid_reference.check_hybrid)."""

from __future__ import annotations

import numpy as np
import pytest
from decoder_reference import IDS, build, save_and_open
from hybrid_reference import check_hybrid

from explorer.core.mixers.effective import effective_block, effective_kind
from explorer.core.trace import CaptureSpec

pytest.importorskip("transformers")

LFM2 = dict(num_hidden_layers=4, num_key_value_heads=2, layer_types=["conv", "full_attention", "conv", "conv"],
            block_multiple_of=8, pad_token_id=0)


@pytest.mark.parametrize("bias", [False, True])
def test_lfm2_convolutions_beside_attention(tmp_path, bias):
    model = build("Lfm2Config", "Lfm2ForCausalLM", **LFM2, conv_bias=bias)
    loaded = save_and_open(model, tmp_path)
    cfg = loaded.config
    assert [p.mixer for p in cfg.plan] == ["short_conv", "attention", "short_conv", "short_conv"]
    assert cfg.d_ff == model.model.layers[0].feed_forward.w1.out_features == 64  # 2/3 of 96, a multiple of 8
    check_hybrid(loaded, model)
    trace = loaded.trace_ids(IDS, CaptureSpec.full())
    band = effective_block(trace, 0, [5])[0]                     # channel 5: the last conv_L_cache tokens only
    lags = np.subtract.outer(np.arange(len(IDS)), np.arange(len(IDS)))
    assert np.all(band[(lags < 0) | (lags >= cfg.conv_kernel)] == 0) and np.abs(band).max() > 0
    assert effective_kind(cfg, 0) == "short convolution" and effective_kind(cfg, 1) is None
