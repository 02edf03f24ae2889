"""The model diagram of hybrid models draws each layer as its plan says: the mixer's kind (attention, Gated
DeltaNet, Mamba-2, a short convolution, none), the window, rotary or not, the FFN and its width, Gemma 4's
per-layer input and layer scalar; every box's key is one the trace gives, with the shape drawn."""

from __future__ import annotations

import numpy as np
import torch

from explorer.core.config import ModelConfig
from explorer.core.diagram.boxes import build_diagram
from explorer.core.diagram.summaries import box_summary
from explorer.core.loaded import LoadedModel
from explorer.core.model import Transformer
from explorer.core.tokenize.base import VocabTokenizer

BASE = dict(arch="hybrid", vocab_size=40, n_ctx=64, d_model=32, n_heads=4, n_kv_heads=2, d_head=8, d_ff=48,
            norm="rmsnorm", positions="rotary", gated_ffn=True, activation="silu", attn_bias=False, mlp_bias=False)
QWEN35 = dict(BASE, n_layers=4, layer_mixers=("deltanet",) * 3 + ("attention",), delta_k_heads=2, delta_v_heads=4,
              delta_d_k=8, delta_d_v=6, attn_output_gate=True, rotary_dim=4, norm_offset=1.0)
GEMMA4 = dict(BASE, n_layers=4, norm_placement="sandwich", sliding_window=3, sliding_layers=(0, 1, 3),
              rotary_base_local=10000.0, rotary_base=1e6, rope_scaling=(("proportion", 0.25), ("rope_type", "proportional")),
              global_d_head=16, global_kv_heads=1, attn_k_eq_v=True, v_norm=True, kv_shared_layers=1,
              wide_shared_ffn=True, d_per_layer=4, per_layer_vocab=40, layer_scalars=True, qk_norm="head")
FALCON_H1 = dict(BASE, n_layers=2, parallel_ssm=True, ssm_heads=4, ssm_d_head=8, ssm_d_state=5, ssm_groups=2,
                 ssm_norm="none")
NEMOTRON = dict(BASE, n_layers=3, positions="none", layer_mixers=("mamba2", "none", "attention"),
                ffn_free_layers=(0, 2), gated_ffn=False, activation="relu2", ssm_heads=4, ssm_d_head=8,
                ssm_d_state=5, ssm_groups=2, conv_bias=True)


def kinds(diagram, layer):
    return [b.kind for b in diagram.block(layer)]


def test_qwen35_diagram_draws_deltanet_and_gated_attention():
    d = build_diagram(ModelConfig(**QWEN35), 7)
    assert "mixer" in kinds(d, 0) and "scores" not in kinds(d, 0) and "scores" in kinds(d, 3)
    scan = d.box("L0.mixer")
    assert scan.title.startswith("Gated DeltaNet") and scan.shape == (4, 7, 7)
    assert scan.key == "blocks.0.mixer.effective_attention"
    details = d.box("L3.attn.scores").details
    assert any("4 of 8 dims" in line for line in details) and any("output gate" in line for line in details)


def test_gemma4_diagram_draws_per_layer_shapes_sharing_and_scalars():
    d = build_diagram(ModelConfig(**GEMMA4), 5)
    assert d.box("L2.attn.qkv").shape == (4, 5, 16) and d.box("L1.attn.qkv").shape == (4, 5, 8)
    assert any("sliding window 3" in line for line in d.box("L1.attn.scores").details)
    assert any("K = V" in line for line in d.box("L2.attn.scores").details)
    assert d.box("L3.attn.qkv").title == "Q projection"
    assert any("those of layer 1" in line for line in d.box("L3.attn.scores").details)
    assert d.box("L3.ffn.in").shape == (5, 96) and d.box("L2.ffn.in").shape == (5, 48)      # the sharing layer's wide FFN
    assert kinds(d, 0)[-3:] == ["per_layer", "add", "scale"] and d.box("L0.scale").key == "blocks.1.resid_pre"


def test_nemotron_diagram_draws_blocks_of_one_piece():
    d = build_diagram(ModelConfig(**NEMOTRON), 6)
    assert "mixer" in kinds(d, 0) and "ffn_in" not in kinds(d, 0)
    assert "ffn_in" in kinds(d, 1) and not {"mixer", "scores", "qkv"} & set(kinds(d, 1))
    assert any("no rotary" not in line for line in d.box("L2.attn.scores").details)
    assert d.box("L0.mixer").title.startswith("Mamba-2") and "ReLU²" in d.box("L1.ffn.in").details[0]


def test_every_hybrid_box_key_is_in_the_trace_and_summarised():
    for switches in (QWEN35, GEMMA4, NEMOTRON, FALCON_H1):
        cfg = ModelConfig(**switches)
        model = Transformer(cfg).eval()
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(torch.randn_like(p) * 0.3 + (1.0 if p.dim() == 1 else 0.0))
        loaded = LoadedModel(model, VocabTokenizer([f"w{i}" for i in range(40)], split="words", name="w"), "h", "t", "h")
        trace = loaded.trace_ids([3, 1, 4, 1, 5, 9])
        d = build_diagram(cfg, 6)
        for box in d.boxes:
            if box.key is None:
                continue
            assert box.key in trace, (switches["arch"], box.id, box.key)
            if box.kind != "scores":
                assert np.asarray(trace[box.key]).shape[-len(box.shape):] == box.shape or box.kind == "norm", box.id
            summary = box_summary(box, trace, 4, head=1)
            assert summary.text, box.id


def test_falcon_h1_diagram_draws_the_scan_beside_the_attention():
    d = build_diagram(ModelConfig(**FALCON_H1), 5)
    assert {"scores", "mixer"} <= set(kinds(d, 0)) and d.box("L0.mixer").shape == (4, 5, 5)
    assert d.box("L0.mixer").row == d.box("L0.attn.qkv").row and d.box("L0.mixer").column == 2
