"""The QK and OV splits on hybrid models: a block whose mixer is not attention has no score and no pattern
(refused with one line, a SplitError, never an AttributeError); a recurrent layer's whole output is one part of
the stream read after it, and a gated head's output by source takes the gate as computed, so both splits add
up. A block without a token mixer writes only its FFN, and the split after it still adds up to the score."""

from __future__ import annotations

import pytest
import torch

from explorer.core.analysis.ov import ov_split
from explorer.core.analysis.qk import qk_split
from explorer.core.analysis.stream_parts import SplitError
from explorer.core.config import ModelConfig
from explorer.core.loaded import LoadedModel
from explorer.core.model import Transformer
from explorer.core.tokenize.base import VocabTokenizer

BASE = dict(arch="hybrid", vocab_size=40, n_ctx=64, d_model=32, n_heads=4, n_kv_heads=2, d_head=8, d_ff=48,
            norm="rmsnorm", positions="rotary", gated_ffn=True, activation="silu", attn_bias=False, mlp_bias=False)
QWEN35 = dict(BASE, n_layers=4, layer_mixers=("deltanet",) * 3 + ("attention",), delta_k_heads=2, delta_v_heads=4,
              delta_d_k=8, delta_d_v=6, attn_output_gate=True, rotary_dim=4, norm_offset=1.0)
NO_MIXER = dict(BASE, n_layers=3, positions="none", layer_mixers=("attention", "none", "attention"),
                gated_ffn=False, activation="relu2")
IDS = [1, 2, 3, 4, 5, 1, 2]


def traced(shape: dict):
    torch.manual_seed(0)
    model = Transformer(ModelConfig(**shape)).eval()
    tokenizer = VocabTokenizer([f"w{i}" for i in range(40)], split="words", name="w")
    return LoadedModel(model, tokenizer, "hybrid", "test", "hybrid").trace_ids(IDS)


def test_hybrid_refusals_are_one_line_and_attention_after_recurrent_layers_adds_up():
    trace = traced(QWEN35)
    with pytest.raises(SplitError, match="layer 0 is a Gated DeltaNet layer, not attention"):
        qk_split(trace, 0, 1, 6, 2)
    with pytest.raises(SplitError, match="layer 0 is a Gated DeltaNet layer, not attention"):
        ov_split(trace, 0, 1, 6)
    split = qk_split(trace, 3, 1, 6, 2)  # read after three DeltaNet layers: each one part
    assert split.total == pytest.approx(float(trace["blocks.3.attn.scores"][1, 6, 2]), rel=1e-4, abs=1e-6)
    assert any(p.kind == "mixer" and p.layer == 2 for p in split.key_parts)
    moved = ov_split(trace, 3, 1, 6)  # the output gate taken as computed
    assert float(moved.shares.sum()) == pytest.approx(1.0, abs=1e-6)


def test_a_block_without_a_mixer_is_its_ffn_alone():
    trace = traced(NO_MIXER)
    split = qk_split(trace, 2, 1, 6, 2)
    assert split.total == pytest.approx(float(trace["blocks.2.attn.scores"][1, 6, 2]), rel=1e-4, abs=1e-6)
    keys = [p.key for p in split.key_parts]
    assert "L1.ffn" in keys and not any(k.startswith("L1.H") for k in keys) and "L0.H3" in keys
    moved = ov_split(trace, 2, 1, 6)
    assert float(moved.shares.sum()) == pytest.approx(1.0, abs=1e-6)
