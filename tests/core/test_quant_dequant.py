"""The torch dequantisers (core/quant/dequant.py) against ``gguf``'s numpy ones, bit for bit, on random blocks.

Two kinds of blocks per type: every byte random (scales may be inf or NaN: compared with NaN equal to NaN),
and random bytes whose float16 scale fields hold ordinary small numbers (every value finite, compared bit
for bit, so -0.0 and 0.0 count as different). Also: the row layout, the target precision, the chunking.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType, quants

from explorer.core.quant import dequant

TORCH_TYPES = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS",
               "MXFP4"]
# byte offsets of each type's float16 scale fields inside its block
F16_FIELDS = {"Q4_0": (0,), "Q4_1": (0, 2), "Q5_0": (0,), "Q5_1": (0, 2), "Q8_0": (0,), "Q2_K": (80, 82),
              "Q3_K": (108,), "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,), "IQ4_NL": (0,), "IQ4_XS": (0,),
              "MXFP4": ()}


def random_blocks(qtype: str, n: int, seed: int, valid: bool) -> np.ndarray:
    block, nbytes = dequant.SIZES[int(GGMLQuantizationType[qtype])]
    gen = np.random.default_rng(seed)
    raw = gen.integers(0, 256, size=(n, nbytes), dtype=np.uint8)
    if valid:
        for at in F16_FIELDS[qtype]:
            scale = (gen.standard_normal(n) * 0.01).astype(np.float16)
            raw[:, at:at + 2] = scale.view(np.uint8).reshape(n, 2)
        if qtype == "MXFP4":  # an e8m0 exponent that keeps the values ordinary
            raw[:, 0] = gen.integers(100, 140, size=n, dtype=np.uint8)
    return raw


def theirs(raw: np.ndarray, qtype: str) -> np.ndarray:
    with np.errstate(all="ignore"):
        return quants.dequantize(raw, GGMLQuantizationType[qtype])


def bits_equal(a: np.ndarray, b: np.ndarray) -> bool:
    a, b = np.ascontiguousarray(a, dtype=np.float32), np.ascontiguousarray(b, dtype=np.float32)
    nan = np.isnan(a)
    return a.shape == b.shape and np.array_equal(nan, np.isnan(b)) and np.array_equal(
        a.view(np.uint32)[~nan], b.view(np.uint32)[~nan])


@pytest.mark.parametrize("qtype", TORCH_TYPES)
def test_valid_blocks_equal_gguf_bit_for_bit(qtype):
    raw = random_blocks(qtype, 300, 1, valid=True)
    ours = dequant.dequantize(torch.from_numpy(raw), int(GGMLQuantizationType[qtype])).numpy()
    expected = theirs(raw, qtype)
    assert np.isfinite(expected).all() and np.abs(expected).max() > 0
    assert bits_equal(ours, expected)


@pytest.mark.parametrize("qtype", TORCH_TYPES)
def test_random_bytes_equal_gguf_with_nan_equal_nan(qtype):
    raw = random_blocks(qtype, 400, 2, valid=False)
    ours = dequant.dequantize(torch.from_numpy(raw), int(GGMLQuantizationType[qtype])).numpy()
    expected = theirs(raw, qtype)
    if qtype != "MXFP4":  # some f16 scales are inf or NaN among 400 random blocks
        assert not np.isfinite(expected).all()
    assert np.array_equal(ours, expected, equal_nan=True)
    assert bits_equal(ours, expected)


@pytest.mark.parametrize("qtype", ["Q4_K", "Q8_0", "MXFP4"])
def test_rows_chunks_and_target_precision(qtype, monkeypatch):
    """Rows of several blocks keep their shape; chunks of a few blocks give the same numbers; bfloat16 output is
    the float32 result rounded as tensor.to rounds it."""
    type_id = int(GGMLQuantizationType[qtype])
    block, nbytes = dequant.SIZES[type_id]
    raw = random_blocks(qtype, 24 * 4, 3, valid=True).reshape(24, 4 * nbytes)  # 24 rows of 4 blocks
    whole = dequant.dequantize(torch.from_numpy(raw), type_id)
    assert whole.shape == (24, 4 * block)
    monkeypatch.setattr(dequant, "CHUNK_ELEMENTS", 7 * block)  # seven blocks at a time
    chunked = dequant.dequantize(torch.from_numpy(raw), type_id)
    half = dequant.dequantize(torch.from_numpy(raw), type_id, torch.bfloat16)
    assert torch.equal(whole, chunked)
    assert half.dtype == torch.bfloat16 and torch.equal(half, whole.to(torch.bfloat16))
    assert bits_equal(whole.numpy(), theirs(raw, qtype))


@pytest.mark.parametrize(("qtype", "dtype"), [("F32", np.float32), ("F16", np.float16)])
def test_float_types(qtype, dtype):
    values = np.random.default_rng(4).standard_normal((5, 64)).astype(dtype)
    raw = values.view(np.uint8)
    ours = dequant.dequantize(torch.from_numpy(raw.copy()), int(GGMLQuantizationType[qtype]))
    assert bits_equal(ours.numpy(), theirs(raw, qtype))


def test_bf16_and_the_types_left_to_gguf():
    values = torch.randn(4, 64).to(torch.bfloat16)
    raw = values.view(torch.uint8)
    assert torch.equal(dequant.dequantize(raw, 30), values.float())
    assert not dequant.in_torch(16) and dequant.in_torch(12)
    iq2 = random_blocks_any(16, 6)
    assert np.array_equal(dequant.dequantize(torch.from_numpy(iq2), 16).numpy(), theirs(iq2, "IQ2_XXS"),
                          equal_nan=True)


def random_blocks_any(type_id: int, n: int) -> np.ndarray:
    _, nbytes = dequant.SIZES[type_id]
    return np.random.default_rng(type_id).integers(0, 256, size=(n, nbytes), dtype=np.uint8)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: there the blocks dequantise on it")
@pytest.mark.parametrize("qtype", TORCH_TYPES)
def test_on_the_gpu_equal_to_gguf(qtype):
    raw = random_blocks(qtype, 300, 5, valid=False)
    ours = dequant.dequantize(torch.from_numpy(raw).cuda(), int(GGMLQuantizationType[qtype]))
    assert ours.device.type == "cuda"
    assert bits_equal(ours.cpu().numpy(), theirs(raw, qtype))
