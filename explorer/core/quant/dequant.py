"""GGUF blocks -> numbers, in torch, on the tensor's own device (a GPU when the bytes are there).

Each ``_TYPE`` function below is ``gguf.quants``' numpy dequantiser of that type written in torch, step
for step: the same unpacking of bits, the same float32 products and sums in the same order (no fused
multiply-add: each product is rounded before it is added), so the result equals ``gguf.quants.dequantize``
bit for bit (NaN and inf from a damaged scale included; tests/core/test_quant_dequant.py). The types people
run are here (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K-Q6_K, IQ4_NL, IQ4_XS, MXFP4, and F32/F16/BF16); any other
type ``gguf`` reads (IQ1-IQ3, TQ, NVFP4) goes through its numpy dequantiser, on the CPU.

``dequantize(raw, type_id, dtype)``: raw bytes ``[..., row_bytes]`` (uint8, whole blocks per row) ->
``[..., row_elements]`` in ``dtype`` (float32 rounded to it, as ``tensor.to(dtype)`` rounds), a bounded
number of blocks at a time so the temporaries stay small.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

import torch
from torch import Tensor

QK = 256  # elements of a K-quant super-block
CHUNK_ELEMENTS = 1 << 18  # numbers dequantised at a time: 1 MB of float32, so the temporaries stay in the cache

# ggml types gguf.quants.dequantize reads: (name, elements per block, bytes per block); F64/integers are no weights
TYPES: dict[int, tuple[str, int, int]] = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 30: ("BF16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22), 7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 10: ("Q2_K", QK, 84), 11: ("Q3_K", QK, 110),
    12: ("Q4_K", QK, 144), 13: ("Q5_K", QK, 176), 14: ("Q6_K", QK, 210), 16: ("IQ2_XXS", QK, 66),
    17: ("IQ2_XS", QK, 74), 18: ("IQ3_XXS", QK, 98), 19: ("IQ1_S", QK, 50), 20: ("IQ4_NL", 32, 18),
    21: ("IQ3_S", QK, 110), 22: ("IQ2_S", QK, 82), 23: ("IQ4_XS", QK, 136), 29: ("IQ1_M", QK, 56),
    34: ("TQ1_0", QK, 54), 35: ("TQ2_0", QK, 66), 39: ("MXFP4", 32, 17),
}
SIZES: dict[int, tuple[int, int]] = {k: (block, nbytes) for k, (_, block, nbytes) in TYPES.items()}
MXFP4_VALUES = (0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12)  # e2m1, doubled
IQ4_VALUES = (-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113)


def _f16(b: Tensor) -> Tensor:
    """Two bytes per block, little-endian float16 -> float32.  [n, 2] -> [n, 1]"""
    return b.contiguous().view(torch.float16).float()


@lru_cache(maxsize=64)
def _constant(values: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> Tensor:
    """A small table, made once per device (not copied to a GPU at every chunk)."""
    return torch.tensor(values, dtype=dtype, device=device)


def _shifts(values: tuple[int, ...], device: torch.device, shape: tuple[int, ...]) -> Tensor:
    return _constant(values, torch.uint8, device).view(shape)


def _split(qs: Tensor, group: int, shifts: tuple[int, ...], mask: int) -> Tensor:
    """numpy's ``qs.reshape((n, -1, 1, group)) >> shifts.reshape((1, 1, S, 1)) & mask``: [n, G, S, group]
    (one scalar shift per slice: torch's shifts by a broadcast tensor are several times slower)."""
    n = qs.shape[0]
    x = qs.reshape(n, -1, 1, group)
    out = torch.empty((n, x.shape[1], len(shifts), group), dtype=torch.uint8, device=qs.device)
    for i, shift in enumerate(shifts):
        part = out[:, :, i:i + 1]
        torch.bitwise_right_shift(x, shift, out=part) if shift else part.copy_(x)
        part &= mask
    return out


def _bits(b: Tensor) -> Tensor:
    """The bits of little-endian bytes, bit i of the word at i.  [n, k] -> [n, 8k] (uint8 0/1)"""
    return ((b.unsqueeze(-1) >> _shifts(tuple(range(8)), b.device, (1, 1, 8))) & 1).reshape(b.shape[0], -1)


def _table(values: tuple[int, ...], index: Tensor) -> Tensor:
    return _constant(values, torch.float32, index.device)[index.long()]


def q4_0(b: Tensor) -> Tensor:
    n = b.shape[0]
    d = _f16(b[:, :2])
    qs = _split(b[:, 2:], 16, (0, 4), 0x0F).reshape(n, -1).view(torch.int8) - 8
    return d * qs.float()


def q4_1(b: Tensor) -> Tensor:
    n = b.shape[0]
    d, m = _f16(b[:, :2]), _f16(b[:, 2:4])
    qs = _split(b[:, 4:], 16, (0, 4), 0x0F).reshape(n, -1).float()
    return (d * qs) + m


def _q5(b: Tensor, head: int) -> Tensor:
    n = b.shape[0]
    qh = _bits(b[:, head:head + 4])
    ql = _split(b[:, head + 4:], 16, (0, 4), 0x0F).reshape(n, -1)
    return ql | (qh << 4)


def q5_0(b: Tensor) -> Tensor:
    q = _q5(b, 2).view(torch.int8) - 16
    return _f16(b[:, :2]) * q.float()


def q5_1(b: Tensor) -> Tensor:
    return (_f16(b[:, :2]) * _q5(b, 4).float()) + _f16(b[:, 2:4])


def q8_0(b: Tensor) -> Tensor:
    return b[:, 2:].view(torch.int8).float() * _f16(b[:, :2])


def q2_k(b: Tensor) -> Tensor:
    n = b.shape[0]
    scales, qs = b[:, :16], b[:, 16:80]
    d, dmin = _f16(b[:, 80:82]), _f16(b[:, 82:84])
    dl = (d * (scales & 0x0F).float()).reshape(n, 16, 1)
    ml = (dmin * (scales >> 4).float()).reshape(n, 16, 1)
    q = _split(qs, 32, (0, 2, 4, 6), 3).reshape(n, 16, 16).float()
    return (dl * q - ml).reshape(n, -1)


def q3_k(b: Tensor) -> Tensor:
    n = b.shape[0]
    hmask, qs, scales, d = b[:, :32], b[:, 32:96], b[:, 96:108], _f16(b[:, 108:110])
    low = (scales[:, :8].reshape(n, 1, 8) >> _shifts((0, 4), b.device, (1, 2, 1))).reshape(n, 16)
    high = (scales[:, 8:].reshape(n, 1, 4) >> _shifts((0, 2, 4, 6), b.device, (1, 4, 1))).reshape(n, 16)
    sc = ((low & 0x0F) | ((high & 0x03) << 4)).view(torch.int8) - 32
    dl = (d * sc.float()).reshape(n, 16, 1)
    ql = _split(qs, 32, (0, 2, 4, 6), 3).reshape(n, 16, 16)
    qh = _split(hmask, 32, tuple(range(8)), 1).reshape(n, 16, 16) ^ 1  # the offset is zero where the bit is 1
    q = (ql.view(torch.int8) - (qh << 2).view(torch.int8)).float()
    return (dl * q).reshape(n, -1)


def _scale_min(scales: Tensor) -> tuple[Tensor, Tensor]:
    """Q4_K/Q5_K's eight 6-bit scales and mins, packed in 12 bytes.  [n, 12] -> [n, 8] x 2"""
    n = scales.shape[0]
    s = scales.reshape(n, 3, 4)
    d, m, md = s[:, 0], s[:, 1], s[:, 2]
    sc = torch.cat([d & 0x3F, (md & 0x0F) | ((d >> 2) & 0x30)], dim=-1)
    mn = torch.cat([m & 0x3F, (md >> 4) | ((m >> 2) & 0x30)], dim=-1)
    return sc, mn


def _k_scaled(b: Tensor) -> tuple[Tensor, Tensor]:
    n = b.shape[0]
    sc, mn = _scale_min(b[:, 4:16])
    d = (_f16(b[:, :2]) * sc.float()).reshape(n, -1, 1)
    dm = (_f16(b[:, 2:4]) * mn.float()).reshape(n, -1, 1)
    return d, dm


def q4_k(b: Tensor) -> Tensor:
    n = b.shape[0]
    d, dm = _k_scaled(b)
    q = _split(b[:, 16:], 32, (0, 4), 0x0F).reshape(n, -1, 32).float()
    return (d * q - dm).reshape(n, -1)


def q5_k(b: Tensor) -> Tensor:
    n = b.shape[0]
    d, dm = _k_scaled(b)
    ql = _split(b[:, 48:], 32, (0, 4), 0x0F).reshape(n, -1, 32)
    qh = _split(b[:, 16:48], 32, tuple(range(8)), 1).reshape(n, -1, 32)
    q = (ql | (qh << 4)).float()
    return (d * q - dm).reshape(n, -1)


def q6_k(b: Tensor) -> Tensor:
    n = b.shape[0]
    ql, qh, scales, d = b[:, :128], b[:, 128:192], b[:, 192:208], _f16(b[:, 208:210])
    d = (d * scales.view(torch.int8).float()).reshape(n, 16, 1)
    low = _split(ql, 64, (0, 4), 0x0F).reshape(n, -1, 32)
    high = _split(qh, 32, (0, 2, 4, 6), 3).reshape(n, -1, 32)
    q = ((low | (high << 4)).view(torch.int8) - 32).reshape(n, 16, -1).float()
    return (d * q).reshape(n, -1)


def iq4_nl(b: Tensor) -> Tensor:
    n = b.shape[0]
    idx = _split(b[:, 2:], 16, (0, 4), 0x0F).reshape(n, -1)
    return _f16(b[:, :2]) * _table(IQ4_VALUES, idx)


def iq4_xs(b: Tensor) -> Tensor:
    n = b.shape[0]
    d = _f16(b[:, :2])
    high_word = b[:, 2].int() | (b[:, 3].int() << 8)  # the 16-bit word of the scales' high bits
    low = (b[:, 4:8].reshape(n, -1, 1) >> _shifts((0, 4), b.device, (1, 1, 2))).reshape(n, -1) & 0x0F
    shifts = _constant(tuple(range(0, 16, 2)), torch.int32, b.device).view(1, -1)
    high = ((high_word.view(n, 1) >> shifts) & 0x03).to(torch.uint8)
    sc = (low | (high << 4)).view(torch.int8) - 32
    dl = (d * sc.float()).reshape(n, -1, 1)
    idx = _split(b[:, 8:], 16, (0, 4), 0x0F).reshape(n, -1, 32)
    return (dl * _table(IQ4_VALUES, idx)).reshape(n, -1)


def mxfp4(b: Tensor) -> Tensor:
    n = b.shape[0]
    e = b[:, :1].int()
    bits = torch.where(e < 2, torch.full_like(e, 0x00200000) << e, (e - 1) << 23)  # ggml_e8m0_to_fp32_half
    d = bits.view(torch.float32)
    idx = (b[:, 1:].reshape(n, 1, 16) >> _shifts((0, 4), b.device, (1, 2, 1))) & 0x0F
    return d * _table(MXFP4_VALUES, idx.reshape(n, -1))


BLOCKS: dict[int, Callable[[Tensor], Tensor]] = {
    2: q4_0, 3: q4_1, 6: q5_0, 7: q5_1, 8: q8_0, 10: q2_k, 11: q3_k, 12: q4_k, 13: q5_k, 14: q6_k,
    20: iq4_nl, 23: iq4_xs, 39: mxfp4,
}
FLOATS = {0: torch.float32, 1: torch.float16, 30: torch.bfloat16}


def in_torch(type_id: int) -> bool:
    """Whether this module dequantises ``type_id`` itself (else ``gguf``'s numpy code does, on the CPU)."""
    return type_id in BLOCKS or type_id in FLOATS


def _numpy(raw: Tensor, type_id: int) -> Tensor:
    import numpy as np
    from gguf import GGMLQuantizationType, quants

    with np.errstate(all="ignore"):  # a scale of inf or NaN gives NaN weights, shown as computed
        values = quants.dequantize(raw.cpu().numpy(), GGMLQuantizationType(type_id))
    return torch.from_numpy(np.ascontiguousarray(values, dtype=np.float32)).to(raw.device)


def dequantize(raw: Tensor, type_id: int, dtype: torch.dtype = torch.float32, out: Tensor | None = None) -> Tensor:
    """Bytes ``[..., row_bytes]`` of ggml type ``type_id`` -> values ``[..., row_elements]`` in ``dtype``
    (into ``out`` when given), on ``raw``'s device; equal to ``gguf.quants.dequantize`` bit for bit."""
    block, nbytes = SIZES[type_id]
    lead, row_bytes = tuple(raw.shape[:-1]), raw.shape[-1]
    if row_bytes % nbytes:
        raise ValueError(f"rows of {row_bytes} bytes are not whole blocks of {nbytes}")
    shape = (*lead, row_bytes // nbytes * block)
    if type_id in FLOATS:
        values = raw.contiguous().view(FLOATS[type_id]).reshape(shape).float()  # exact, as numpy's astype
        if out is None:
            return values if dtype == torch.float32 else values.to(dtype)
        return out.copy_(values)
    out = torch.empty(shape, dtype=dtype, device=raw.device) if out is None else out
    flat_out = out.view(-1, block)
    blocks = raw.reshape(-1, nbytes)
    fn = BLOCKS.get(type_id)
    step = max(1, CHUNK_ELEMENTS // block)
    for start in range(0, blocks.shape[0], step):
        part = blocks[start:start + step]
        values = fn(part) if fn is not None else _numpy(part, type_id).view(-1, block)
        flat_out[start:start + part.shape[0]] = values
    return out
