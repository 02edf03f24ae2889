"""Weights kept as the GGUF file stores them compute exactly what the fully dequantised load computes.

Each file is a tiny Llama written at test time as llama.cpp lays it out (tests/gguf_files.py): its matrices
in F16, Q8_0 and MXFP4 (quantised by ``gguf``'s writer) or Q4_K (random blocks: ``gguf`` cannot quantise into
it). Loaded twice, ``weights="keep"`` and ``weights="dequantize"``, every array of a full trace, the values a
compact trace derives by re-running blocks, greedy tokens (with and without the KV cache), an ablation and
attribution patching's estimates are equal, not merely close.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from decoder_reference import IDS, build, ours_greedy  # noqa: E402
from gguf_files import write_model  # noqa: E402

from explorer.core.budget import global_budget  # noqa: E402
from explorer.core.checkpoint import load_checkpoint  # noqa: E402
from explorer.core.interop import trace_metadata  # noqa: E402
from explorer.core.interventions.attribution import attribution_patching  # noqa: E402
from explorer.core.interventions.spec import parse_spec  # noqa: E402
from explorer.core.quant.packed import PackedEmbedding, PackedLinear, packed_weights  # noqa: E402
from explorer.core.trace import CaptureSpec  # noqa: E402

# rows of 256: a K-quant block is 256 numbers
WIDE = dict(hidden_size=256, intermediate_size=512, num_attention_heads=4, num_key_value_heads=2)


def llama_file(tmp_path: Path, qtype: str, tied: bool = False) -> Path:
    model = build("LlamaConfig", "LlamaForCausalLM", tie_word_embeddings=tied, **WIDE)
    return write_model(model, tmp_path / f"llama-{qtype}.gguf", "llama", qtype)


def equal_traces(a, b) -> None:
    keys = set(b.keys())
    assert keys == set(a.keys()) and len(keys) > 30
    for key in sorted(keys):
        x, y = np.asarray(a[key]), np.asarray(b[key])
        assert x.shape == y.shape and np.array_equal(x, y, equal_nan=True), key


@pytest.mark.parametrize(("qtype", "tied"), [("F16", False), ("Q8_0", True), ("Q4_K", False), ("MXFP4", True)])
def test_kept_weights_give_the_dequantised_numbers_exactly(tmp_path, qtype, tied):
    path = llama_file(tmp_path, qtype, tied)
    kept = load_checkpoint(path, device="cpu", weights="keep")
    full = load_checkpoint(path, device="cpu", weights="dequantize")
    packed = packed_weights(kept.model)
    assert len(packed) == 2 * 7 + (1 if tied else 2) and not packed_weights(full.model)
    assert isinstance(kept.model.embed, PackedEmbedding) and isinstance(kept.model.unembed, PackedLinear)
    assert {p.type_name for p in packed} == {qtype} and qtype in kept.info()["weights"]
    assert kept.info()["dtype"] == "float32" and full.info()["weights"] == "float32"
    assert kept.n_params == full.n_params
    assert torch.equal(kept.model.blocks[1].attn.W_Q.weight, full.model.blocks[1].attn.W_Q.weight)  # un-permuted
    a, b = kept.trace_ids(IDS, CaptureSpec.everything()), full.trace_ids(IDS, CaptureSpec.everything())
    assert float(np.abs(b["logits"]).max()) > 0.1 and np.isfinite(b["logits"]).all()
    equal_traces(a, b)
    ca, cb = kept.trace_ids(IDS, CaptureSpec.compact()), full.trace_ids(IDS, CaptureSpec.compact())
    for layer in range(2):  # re-run blocks and derived patterns
        for key in ("attn.z", "attn.out", "mlp.post", "resid_mid"):
            assert np.array_equal(ca[f"blocks.{layer}.{key}"], cb[f"blocks.{layer}.{key}"]), key
        assert np.array_equal(ca.head(layer, 1), cb.head(layer, 1))
    assert ours_greedy(kept, IDS, 6) == ours_greedy(full, IDS, 6)
    assert ours_greedy(kept, IDS, 4, use_cache=False) == ours_greedy(full, IDS, 4, use_cache=False)
    ablated = [parse_spec("1.2"), parse_spec("mlp0")]
    equal_traces(kept.trace_ids(IDS, CaptureSpec.everything(), interventions=ablated),
                 full.trace_ids(IDS, CaptureSpec.everything(), interventions=ablated))


def test_attribution_runs_backward_through_kept_weights(tmp_path):
    path = llama_file(tmp_path, "Q8_0")
    kept = load_checkpoint(path, device="cpu", weights="keep")
    full = load_checkpoint(path, device="cpu", weights="dequantize")
    clean, corrupt = IDS[:8], [9, *IDS[1:8]]
    a = attribution_patching(kept.model, clean, corrupt, target=5, distractor=7)
    b = attribution_patching(full.model, clean, corrupt, target=5, distractor=7)
    assert a.clean_metric == b.clean_metric and np.array_equal(a.heads, b.heads)
    assert np.abs(a.heads).max() > 0 and np.array_equal(a.resid, b.resid)


def test_the_expanded_weights_are_cached_within_the_budget(tmp_path):
    path = llama_file(tmp_path, "Q8_0")
    kept = load_checkpoint(path, device="cpu", weights="keep")
    budget = global_budget()
    limit = budget.limit
    try:
        budget.set_limit(limit)
        kept.trace_ids(IDS, CaptureSpec.compact())
        looked_up = kept.model.embed.packed  # an untied embedding: only the prompt's rows are expanded, not kept
        dense = sum(p.numel() * 4 for p in packed_weights(kept.model) if p is not looked_up)
        assert budget.cached >= dense  # every matrix's float32 weight kept for the next forward
        W = kept.model.blocks[0].mlp.W_in
        assert W.weight is W.weight  # the second read is the cached tensor
        budget.set_limit(64 * 1024)  # too small for any weight: each layer expanded as it runs, dropped after
        assert budget.cached < 64 * 1024
        first = kept.trace_ids(IDS, CaptureSpec.compact())
        assert budget.cached < 64 * 1024
        budget.set_limit(limit)
        again = kept.trace_ids(IDS, CaptureSpec.compact())
        assert np.array_equal(first["logits"], again["logits"])
    finally:
        budget.set_limit(limit, explicit=False)


def test_a_budget_for_part_of_the_weights_keeps_the_first_layers(tmp_path):
    """Expanded weights that cannot all fit: the layers that fit the free room stay cached, forward after forward
    (least-recently-used eviction over a pass of the layers would evict each just before it is needed again)."""
    path = llama_file(tmp_path, "Q8_0")
    kept = load_checkpoint(path, device="cpu", weights="keep")
    full = load_checkpoint(path, device="cpu", weights="dequantize")
    budget = global_budget()
    limit = budget.limit
    try:
        half = sum(p.numel() * 4 for p in packed_weights(kept.model)) // 2
        budget.set_limit(half)
        for _ in range(2):
            logits = kept.trace_ids(IDS, CaptureSpec.compact())["logits"]
        assert 0 < budget.cached <= half
        first, last = kept.model.blocks[0].attn.W_Q, kept.model.blocks[1].mlp.W_out
        assert first.weight is first.weight and last.weight is not last.weight  # layer 0 cached, the last not
        assert np.array_equal(logits, full.trace_ids(IDS, CaptureSpec.compact())["logits"])
    finally:
        budget.set_limit(limit, explicit=False)


def test_auto_keeps_a_quantised_file_and_dequantises_a_float_one(tmp_path):
    q8 = load_checkpoint(llama_file(tmp_path, "Q8_0"), device="cpu")
    f32 = load_checkpoint(llama_file(tmp_path, "F32"), device="cpu")
    assert packed_weights(q8.model) and "held as stored" in q8.notes[0]
    assert not packed_weights(f32.model) and f32.info()["weights"] == "float32"
    meta = trace_metadata(q8.trace_ids(IDS[:4]))  # what an export records: computed in, stored in
    assert meta["dtype"] == "float32" and "Q8_0" in meta["weights"]
    assert trace_metadata(f32.trace_ids(IDS[:4]))["weights"] == "float32"


def test_bfloat16_storage_of_a_gguf_file(tmp_path):
    """--weights bfloat16: the matrices dequantised once into bfloat16 (half the memory of float32), computed in
    float32: the numbers of the dequantised weights rounded to bfloat16."""
    path = llama_file(tmp_path, "Q8_0")
    half = load_checkpoint(path, device="cpu", weights="bfloat16")
    full = load_checkpoint(path, device="cpu", weights="dequantize")
    assert {p.type_name for p in packed_weights(half.model)} == {"BF16"} and half.info()["dtype"] == "float32"
    W, V = half.model.blocks[0].attn.W_K.weight, full.model.blocks[0].attn.W_K.weight
    assert W.dtype == torch.float32 and torch.equal(W, V.to(torch.bfloat16).float())
    logits = half.trace_ids(IDS, CaptureSpec.compact())["logits"]
    assert np.abs(logits - full.trace_ids(IDS, CaptureSpec.compact())["logits"]).max() < 0.05


def test_an_expert_bank_expands_one_expert_at_a_time():
    """The hook for mixture-of-experts layers: a 3-D GGUF tensor [experts, rows, cols] held as blocks, one expert's
    matrix expanded alone, equal to gguf's dequantiser of that expert's bytes."""
    from gguf import GGMLQuantizationType, quants

    from explorer.core.quant.packed import Packed

    raw = np.random.default_rng(0).integers(0, 256, size=(4, 64, 128 // 32 * 17), dtype=np.uint8)
    raw[..., ::17] = np.random.default_rng(1).integers(110, 130, size=raw[..., ::17].shape)  # ordinary exponents
    bank = Packed(torch.from_numpy(raw), int(GGMLQuantizationType.MXFP4), (4, 64, 128))
    for expert in range(4):
        expected = quants.dequantize(raw[expert], GGMLQuantizationType.MXFP4)
        assert bank.expert(expert).shape == (64, 128)
        assert np.array_equal(bank.expert(expert).numpy().view(np.uint32), expected.view(np.uint32))
    assert torch.equal(bank.dense()[2], bank.expert(2)) and bank.numel() == 4 * 64 * 128
