"""The model diagram: its boxes and shapes are what each family's config implies, every box's Trace key
is in a real trace with the box's shape, and the live summaries read those keys."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from explorer.core import worked_example
from explorer.core.checkpoint import load_checkpoint
from explorer.core.diagram import box_summary, build_diagram, summary_keys
from explorer.core.diagram.summaries import softmax, stream_norms

IDS = [5, 17, 99, 3, 50, 8, 21]


def _tiny(model_type):
    pytest.importorskip("transformers")
    from decoder_reference import VOCAB
    from test_in_memory_families import tiny

    from explorer.core.checkpoint.in_memory import register
    from explorer.core.tokenize.base import VocabTokenizer

    return load_checkpoint(register(tiny(model_type), VocabTokenizer([f"w{i}" for i in range(VOCAB)])), device="cpu")


FAMILIES = ["gpt2", "llama", "gemma2", "bert", "gptj", "gpt_neox", "phi", "bloom"]


@functools.cache
def _run(name):
    loaded = _tiny(name)
    return name, loaded, loaded.trace_ids(IDS)


@pytest.fixture(scope="module", params=FAMILIES)
def family(request):
    return _run(request.param)


def _kinds(boxes):
    return [b.kind for b in boxes]


def test_every_box_names_a_key_of_the_trace_with_the_boxes_shape(family):
    _name, loaded, trace = family
    diagram = build_diagram(loaded.config, trace.n_tokens)
    assert len({b.id for b in diagram.boxes}) == len(diagram.boxes)
    ids = {b.id for b in diagram.boxes}
    assert all(e.source in ids and e.target in ids for e in diagram.edges)
    for box in diagram.boxes:
        if box.key is None:
            continue
        assert box.key in trace, box.id
        array = trace[box.key]
        assert tuple(array.shape) == box.shape, (box.id, array.shape, box.shape)
        assert box.shape_text.endswith(" × ".join(map(str, box.shape)))
    assert diagram.box("unembed").shape == (len(IDS), loaded.config.vocab_size)
    assert diagram.box("embed").shape == (len(IDS), loaded.config.d_model)


def test_gpt2_draws_learned_positions_layernorm_pre_norm_and_a_plain_gelu_ffn():
    name, loaded, _trace = _run("gpt2")
    cfg = loaded.config
    d = build_diagram(cfg, 7)
    assert d.box("positions").title == "Learned positions" and d.box("positions").key == "pos_embed"
    assert _kinds(d.block(0)) == ["norm", "qkv", "scores", "mix", "add", "norm", "ffn_in", "ffn_out", "add"]
    assert d.box("L0.ln1").title == "LayerNorm" and d.box("L0.ln1").column == 1
    assert d.box("L0.ffn.in").shape == (7, cfg.d_ff) and "GELU (tanh)(x·W_in)" in d.box("L0.ffn.in").details
    assert "causal" in d.box("L0.attn.scores").details
    assert d.box("final_norm").title == "Final LayerNorm"
    assert "tied: the embedding table read backwards" in d.box("unembed").details
    assert len(d.block(1)) == 9 and d.block(cfg.n_layers - 1)[-1].key == "resid_final"


def test_llama_draws_rmsnorm_grouped_query_rotary_attention_and_a_gated_silu_ffn():
    name, loaded, _trace = _run("llama")
    cfg = loaded.config
    d = build_diagram(cfg, 7)
    assert "positions" not in d.by_id  # rotary: nothing added to the embedding
    assert d.box("L0.ln1").title == "RMSNorm" and d.box("L0.ln1").key == "blocks.0.ln1.mean_square"
    scores = d.box("L0.attn.scores").details
    assert scores[0] == f"4 heads of d_head {cfg.d_head}, 2 K/V heads (grouped-query: 2 queries share one)"
    assert any(line.startswith(f"rotary: q, k turned by position ({cfg.d_head} of {cfg.d_head} dims")
               for line in scores)
    assert d.box("L0.attn.qkv").details == (f"q: 4 × 7 × {cfg.d_head}, k and v: 2 × 7 × {cfg.d_head}",)
    assert d.box("L0.ffn.in").title == "FFN neurons (gated)"
    assert d.box("L0.ffn.in").details[0] == "gated: SiLU(x·W_gate) ⊙ (x·W_up)"
    assert d.box("L0.ffn.in").shape == (7, cfg.d_ff)


def test_gemma2_draws_sandwich_norms_soft_caps_and_windows_on_the_sliding_layers():
    name, loaded, _trace = _run("gemma2")
    cfg = loaded.config
    d = build_diagram(cfg, 7)
    assert _kinds(d.block(0)) == ["norm", "qkv", "scores", "mix", "norm", "add",
                                  "norm", "ffn_in", "ffn_out", "norm", "add"]
    assert d.box("L0.ln1_out").title.startswith("RMSNorm (1 + w)") and "after attention" in d.box("L0.ln1_out").title
    assert d.box("L0.ln2_out").key == "blocks.0.ln2_out.mean_square"
    cap = f"soft cap {cfg.attn_softcap:g}·tanh(s/{cfg.attn_softcap:g})"
    for layer in range(cfg.n_layers):
        details = d.box(f"L{layer}.attn.scores").details
        assert cap in details
        windowed = f"causal, sliding window {cfg.sliding_window}" in details
        assert windowed == (layer in cfg.sliding_layers)
    assert cfg.sliding_layers and len(cfg.sliding_layers) < cfg.n_layers
    assert any(line.startswith("soft cap") for line in d.box("unembed").details)
    assert any("times" in line for line in d.box("embed").details)  # Gemma's √d_model on the rows


def test_bert_draws_an_encoder_with_post_norms_token_types_and_an_mlm_head():
    name, loaded, _trace = _run("bert")
    d = build_diagram(loaded.config, 7)
    assert {"type_embed", "positions", "embed_norm", "mlm_head"} <= set(d.by_id)
    assert _kinds(d.block(0)) == ["qkv", "scores", "mix", "add", "norm", "ffn_in", "ffn_out", "add", "norm"]
    assert d.box("L0.ln1").title == "LayerNorm (after the add)" and d.box("L0.ln1").column == 0
    assert "bidirectional (no mask)" in d.box("L0.attn.scores").details
    assert d.box("unembed").panel == "masked"


@pytest.mark.parametrize("parallel", ["gptj", "phi", "gpt_neox"])
def test_a_parallel_block_draws_attention_and_the_ffn_side_by_side(parallel):
    name, loaded, _trace = _run(parallel)
    cfg = loaded.config
    d = build_diagram(cfg, 7)
    block = {b.id: b for b in d.block(0)}
    assert block["L0.attn.qkv"].column == 1 and block["L0.ffn.in"].column == 2
    assert block["L0.attn.qkv"].row == block["L0.ffn.in"].row  # the two branches start on one row
    assert block["L0.add"].title == "+ attention + FFN (side by side)"
    assert {e.source for e in d.edges if e.target == "L0.add"} == {"L0.attn.mix", "L0.ffn.out", "embed"}
    assert ("L0.ln2" in block) == (not cfg.shared_norm)
    assert cfg.shared_norm == (name in ("gptj", "phi"))


def test_summaries_read_the_trace_for_the_selected_token(family):
    _name, loaded, trace = family
    d = build_diagram(loaded.config, trace.n_tokens)
    t = 4
    keys = summary_keys(d, 0, trace)
    trace.materialize(keys)
    for box in d.head() + d.block(0) + d.tail():
        s = box_summary(box, trace, t, head=1)
        if box.kind in ("embed", "positions", "add", "mix", "ffn_out"):
            assert s.value == pytest.approx(float(np.linalg.norm(trace[box.key][t].astype(np.float64))), rel=1e-6)
            assert s.mark == t and len(s.series) == trace.n_tokens
        elif box.kind == "scores":
            row = trace.head(0, 1, "pattern")[t]
            assert s.value == pytest.approx(float(row.max()))
        elif box.kind == "ffn_in":
            assert s.value == pytest.approx(float(trace[box.key][t].max()))
        elif box.kind == "unembed":
            assert s.value == pytest.approx(float(softmax(trace["logits"][t]).max()))
        elif box.kind == "norm":
            assert s.value == pytest.approx(float(np.sqrt(trace[box.key][t])), rel=1e-6)
    norms = stream_norms(trace, t)
    assert len(norms) == loaded.config.n_layers + 1
    assert norms[-1] == pytest.approx(float(np.linalg.norm(trace["resid_final"][t])), rel=1e-5)


def test_the_worked_example_is_one_bidirectional_head_without_norms_positions_or_ffn():
    loaded = load_checkpoint(worked_example.NAME, device="cpu")
    d = build_diagram(loaded.config, 3)
    assert _kinds(d.boxes) == ["tokens", "embed", "qkv", "scores", "mix", "add", "unembed"]
    assert d.box("L0.attn.scores").details[0] == "1 head of d_head 4"


def test_one_pattern_row_is_the_heads_pattern_row(family):
    from explorer.core.diagram.summaries import pattern_row

    _name, loaded, trace = family
    cfg = loaded.config
    for layer in range(cfg.n_layers):
        for head in (0, cfg.n_heads - 1):
            full = trace.head(layer, head, "pattern")
            for t in (0, 3, trace.n_tokens - 1):
                row = pattern_row(trace, layer, head, t)
                np.testing.assert_allclose(row, full[t][: row.size], rtol=1e-5, atol=1e-7)
                assert row.size == (t + 1 if cfg.causal else trace.n_tokens)


def test_row_norms_are_the_float64_copys_norms():
    from explorer.core.diagram.summaries import _row_norms

    rng = np.random.default_rng(1)
    for shape in ((37, 32), (3, 37, 8), (5, 4096)):
        a = (rng.standard_normal(shape) * 30).astype(np.float32)
        wide = a.astype(np.float64)
        assert np.array_equal(_row_norms(a), np.sqrt(np.einsum("...i,...i->...", wide, wide)))
        assert _row_norms(a).dtype == np.float64


def test_sparkline_chunk_starts_kept_per_size_equal_a_fresh_linspace_and_follow_the_size():
    from explorer.core.diagram import summaries

    for size in (49, 50, 256, 1024, 257):
        fresh = np.linspace(0, size, summaries.SERIES_MAX + 1).astype(np.int64)[:-1]
        kept = summaries.chunk_starts(size)
        assert np.array_equal(kept, fresh) and kept.dtype == fresh.dtype
        assert summaries.chunk_starts(size) is kept and not kept.flags.writeable  # kept, and never changed in place
    values = np.sin(np.arange(300, dtype=np.float64))
    starts = np.linspace(0, 300, summaries.SERIES_MAX + 1).astype(np.int64)[:-1]
    hi, lo = np.maximum.reduceat(values, starts), np.minimum.reduceat(values, starts)
    assert summaries._series(values) == tuple(np.where(np.abs(hi) >= np.abs(lo), hi, lo).tolist())


def test_sparklines_kept_with_the_trace_equal_a_fresh_computation_for_every_token_and_head(family):
    from explorer.core.diagram import summaries

    _name, loaded, trace = family
    d = build_diagram(loaded.config, trace.n_tokens)
    trace.materialize(summary_keys(d, 0, trace))
    boxes = d.head() + d.block(0) + d.tail()
    for t in (1, 4, 6):
        for h in (0, 1):
            kept = [box_summary(box, trace, t, head=h) for box in boxes]
            saved = dict(trace._memo)
            trace._memo.clear()  # nothing kept: everything computed anew
            try:
                fresh = [box_summary(box, trace, t, head=h) for box in boxes]
            finally:
                trace._memo.clear()
                trace._memo.update(saved)
            assert kept == fresh
            for box, s in zip(boxes, kept):  # the series of this head and token, never another's
                if box.kind == "qkv":
                    a = trace[box.key][min(h, trace[box.key].shape[0] - 1)]
                    assert s.series == summaries._series(np.linalg.norm(a.astype(np.float64), axis=-1)) or \
                        np.allclose(s.series, summaries._series(np.linalg.norm(a.astype(np.float64), axis=-1)))
                elif box.kind == "norm":
                    assert s.series == summaries._series(np.sqrt(np.maximum(trace[box.key].astype(np.float64), 0)))
