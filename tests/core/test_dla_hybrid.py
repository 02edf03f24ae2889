"""Direct logit attribution on the hybrid families: Gemma 4's layer scalars and per-layer inputs, its sandwich
norms and soft cap, Qwen3.5's gated attention beside DeltaNet layers, Nemotron-H's one-piece blocks.

What a user sees: the terms add up to the logit the model computed (before the soft cap) to 1e-4, and a sum that
ignored Gemma 4's layer scalars would be far from it."""

from __future__ import annotations

import numpy as np
import pytest
from decoder_reference import IDS, build, save_and_open

from explorer.core.analysis.dla import direct_logit_attribution
from explorer.core.per_layer import scale_of

pytest.importorskip("transformers")


def gemma4_shaped(tmp_path):
    from test_family_gemma4 import gemma4

    return save_and_open(gemma4(), tmp_path)


def test_dla_on_gemma4_sums_to_the_logit_with_its_layer_scalars(tmp_path):
    loaded = gemma4_shaped(tmp_path)
    cfg = loaded.config
    trace = loaded.trace_ids(IDS)
    for position, target, distractor in ((-1, 11, None), (5, 40, 7)):
        dla = direct_logit_attribution(trace, target, position, distractor)
        shown = trace["logits"][position]
        expected = cfg.final_softcap * np.arctanh(shown / cfg.final_softcap)   # before the cap
        expected = expected[target] - (expected[distractor] if distractor is not None else 0.0)
        assert abs(dla.total - expected) <= 1e-4 and abs(dla.logit - expected) <= 1e-4
        assert dla.softcap == cfg.final_softcap and dla.per_layer is not None and np.abs(dla.per_layer).max() > 1e-3
        assert np.abs(dla.heads).max() > 1e-3 and dla.heads.shape == (cfg.n_layers, cfg.n_heads)
    # the layer scalars matter: the same terms without them add up to something else entirely
    scalars = np.array([scale_of(b) for b in loaded.model.blocks])
    after = np.cumprod(scalars[::-1])[::-1]
    unscaled = (dla.embed / after[0] + sum((dla.heads[i].sum() + dla.attn_bias[i] + dla.mlp[i] + dla.per_layer[i])
                                           / after[i] for i in range(cfg.n_layers)))
    assert abs(unscaled - dla.total) > 100 * 1e-4 and not np.allclose(scalars, 1.0)


def test_dla_on_qwen35_gated_attention_and_deltanet_layers(tmp_path):
    from test_family_qwen35 import QWEN35

    model = build("Qwen3_5TextConfig", "Qwen3_5ForCausalLM", **QWEN35)
    loaded = save_and_open(model, tmp_path)
    trace = loaded.trace_ids(IDS)
    dla = direct_logit_attribution(trace, 11, -1, 3)
    logits = trace["logits"][-1]
    assert abs(dla.total - (logits[11] - logits[3])) <= 1e-4
    assert np.all(dla.heads[:3] == 0) and np.abs(dla.heads[3]).max() > 1e-3       # heads on the attention layer
    assert dla.mixer is not None and np.all(dla.mixer[3] == 0) and np.abs(dla.mixer[:3]).max() > 1e-3


def test_dla_on_nemotron_h_blocks_of_one_piece(tmp_path):
    from test_family_mamba import NEMOTRON

    model = build("NemotronHConfig", "NemotronHForCausalLM", **NEMOTRON)
    loaded = save_and_open(model, tmp_path)
    trace = loaded.trace_ids(IDS)
    dla = direct_logit_attribution(trace, 20, 6)
    assert abs(dla.total - trace["logits"][6, 20]) <= 1e-4
    assert dla.mlp[0] == 0 and dla.mixer[1] == 0 and abs(dla.mlp[1]) > 0     # mixer blocks have no FFN and back


def test_dla_on_falcon_h1_attention_and_mamba_side_by_side(tmp_path):
    from test_in_memory_families import FALCON_H1

    model = build("FalconH1Config", "FalconH1ForCausalLM", **FALCON_H1, pad_token_id=0)
    loaded = save_and_open(model, tmp_path)
    trace = loaded.trace_ids(IDS)
    dla = direct_logit_attribution(trace, 9, 4, 2)
    logits = trace["logits"][4]
    assert abs(dla.total - (logits[9] - logits[2])) <= 1e-4
    assert np.abs(dla.heads).max() > 1e-3 and np.abs(dla.mixer).min() > 0     # heads and the scan, every layer


def test_logit_lens_on_gemma4_ends_at_the_models_own_logits(tmp_path):
    """The lens reads the stream at every boundary (after each block's layer scalar) through the final norm, the
    un-embedding and the soft cap: its last boundary is the model's own output."""
    from explorer.core.analysis.residual import logit_lens

    loaded = gemma4_shaped(tmp_path)
    trace = loaded.trace_ids(IDS)
    lens = logit_lens(trace, top=1)
    logits = trace["logits"]
    assert np.array_equal(lens.ids[-1, :, 0], logits.argmax(-1))
    assert np.allclose(lens.logits[-1, :, 0], logits.max(-1), atol=1e-4)
