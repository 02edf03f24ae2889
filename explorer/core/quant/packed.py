"""Weights held as the file stores them, expanded into the compute precision when a layer runs.

A ``Packed`` module holds one weight as bytes: a GGUF tensor's blocks (memory-mapped from the file where
it can be) or half-precision values (bfloat16, float16), with its ggml type, its shape and, where
llama.cpp reordered the rows (Llama's q/k, Falcon's q/k/v), the row order that undoes it. ``dense()``
expands it with ``dequant.dequantize`` (on the bytes' device) into the compute precision: the same
numbers as dequantising the whole file at load, bit for bit. Expanded weights are kept in one
``LRUCache`` inside the memory budget (core/budget.py), so a model whose expanded weights fit runs its
second forward as fast as a fully dequantised one; when they do not all fit, the layers that fit in the
budget's free room stay cached and the others are expanded as they run and dropped after.

``PackedLinear`` and ``PackedEmbedding`` take the place of ``nn.Linear`` and ``nn.Embedding``; their
``weight`` is the expanded tensor, so code that reads a weight directly (DLA, neurons, vectors) is
unchanged. The expanded tensors are made outside inference mode and without gradients, so attribution's
backward pass goes through them like through frozen weights. An expert bank (a 3-D GGUF tensor
``[experts, rows, cols]``) is a ``Packed`` too, installed in place of the bank's parameter (``install``):
``expert(e)`` expands one expert's matrix alone, so the forward pass, which runs each expert only on the
tokens routed to it (core/moe.py), never holds more than one expert's matrices expanded beyond the cache.
"""

from __future__ import annotations

import itertools
import weakref
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from explorer.core.quant.dequant import FLOATS, SIZES, TYPES, dequantize

TYPE_NAMES = {k: name for k, (name, _, _) in TYPES.items()}
HALF_TYPES = {torch.bfloat16: 30, torch.float16: 1}

_tokens = itertools.count()
_cache: Any = None


def dense_cache():
    """The one cache of expanded weights (bound to the process's memory budget)."""
    global _cache
    if _cache is None:
        from explorer.core.budget import LRUCache

        _cache = LRUCache()
    return _cache


def _forget(keys: set) -> None:
    cache = _cache
    if cache is not None:
        for key in list(keys):
            cache.pop(key)
    keys.clear()


class Packed(nn.Module):
    """One weight as bytes (see the module's description). ``raw``: uint8 ``[*lead, rows, row_bytes]``."""

    def __init__(self, raw: Tensor, type_id: int, shape: tuple[int, ...], rows: Tensor | None = None) -> None:
        super().__init__()
        block, nbytes = SIZES[type_id]
        if raw.dtype != torch.uint8 or tuple(raw.shape[:-1]) != tuple(shape[:-1]) \
                or raw.shape[-1] * block != shape[-1] * nbytes:
            raise ValueError(f"{tuple(raw.shape)} bytes of {TYPE_NAMES.get(type_id)} do not hold a {shape} weight")
        self.type_id, self.shape = type_id, tuple(int(s) for s in shape)
        self.register_buffer("raw", raw, persistent=False)
        self.register_buffer("rows", rows, persistent=False)  # None, or the row order that undoes the file's
        self.register_buffer("probe", torch.empty(0), persistent=False)  # follows model.to(dtype): the compute dtype
        self.token = next(_tokens)
        self.group_numel = self.numel()  # the numbers of every Packed of its model (``install`` sets it)
        self._keys: set = set()
        weakref.finalize(self, _forget, self._keys)

    @classmethod
    def from_tensor(cls, t: Tensor) -> Packed:
        """A half-precision tensor held as its bytes (no copy when it is contiguous)."""
        t = t.detach().contiguous()
        return cls(t.view(torch.uint8), HALF_TYPES[t.dtype], tuple(t.shape))

    @property
    def type_name(self) -> str:
        return TYPE_NAMES.get(self.type_id, str(self.type_id))

    @property
    def nbytes(self) -> int:
        return self.raw.numel()

    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def compute_dtype(self) -> torch.dtype:
        return self.probe.dtype

    def _expand(self, raw: Tensor, dtype: torch.dtype, rows: Tensor | None) -> Tensor:
        with torch.inference_mode(False), torch.no_grad():  # a plain tensor: attribution may save it for backward
            if rows is not None:
                raw = raw.index_select(-2, rows)
            return dequantize(raw, self.type_id, dtype)

    def dense(self, dtype: torch.dtype | None = None) -> Tensor:
        """The whole weight in ``dtype`` (default: the compute precision), from the cache when it is there."""
        dtype = dtype or self.compute_dtype
        key = (self.token, dtype, str(self.raw.device))
        cache = dense_cache()
        hit = cache.get(key)
        if hit is not None:
            return hit
        return self._remember(key, self._expand(self.raw, dtype, self.rows).reshape(self.shape))

    def _remember(self, key: tuple, value: Tensor) -> Tensor:
        """Into the cache: with eviction (least recently used first) when the model's expanded weights can all fit
        the budget; otherwise only into free room, evicting nothing, so the layers that fit stay cached (a pass
        over the layers evicting each other, least recently used first, would keep none of them for the next)."""
        cache = dense_cache()
        budget = cache.budget
        if self.group_numel * value.element_size() > budget.limit - budget.held and \
                budget.in_use + value.nbytes > budget.limit:
            return value
        self._keys.add(key)
        return cache.put(key, value)

    def expert(self, index: int, dtype: torch.dtype | None = None) -> Tensor:
        """One matrix of an expert bank ``[experts, rows, cols]`` (the hook for mixture-of-experts layers)."""
        dtype = dtype or self.compute_dtype
        key = (self.token, dtype, str(self.raw.device), int(index))
        cache = dense_cache()
        hit = cache.get(key)
        if hit is not None:
            return hit
        return self._remember(key, self._expand(self.raw[index], dtype, self.rows).reshape(self.shape[1:]))

    def lookup(self, ids: Tensor, dtype: torch.dtype | None = None) -> Tensor:
        """Rows ``ids`` of a 2-D weight (an embedding): only those rows are expanded unless the whole is cached."""
        dtype = dtype or self.compute_dtype
        whole = dense_cache().get((self.token, dtype, str(self.raw.device)))
        if whole is not None:
            return F.embedding(ids, whole)
        index = ids.reshape(-1) if self.rows is None else self.rows[ids.reshape(-1)]
        return self._expand(self.raw, dtype, index).reshape(*ids.shape, self.shape[-1])

    def extra_repr(self) -> str:
        return f"{self.type_name}, shape={self.shape}, {self.nbytes:,} bytes"


class PackedLinear(nn.Module):
    """``nn.Linear`` whose weight is a ``Packed`` (shared with the embedding when they are tied)."""

    def __init__(self, packed: Packed, bias: Tensor | None = None) -> None:
        super().__init__()
        self.packed = packed
        self.out_features, self.in_features = packed.shape
        self.bias = None if bias is None else nn.Parameter(bias, requires_grad=bias.requires_grad)

    @property
    def weight(self) -> Tensor:
        return self.packed.dense()

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.packed.dense(x.dtype), self.bias)


class PackedEmbedding(nn.Module):
    """``nn.Embedding`` whose table is a ``Packed``: a lookup expands only the rows it reads."""

    def __init__(self, packed: Packed) -> None:
        super().__init__()
        self.packed = packed
        self.num_embeddings, self.embedding_dim = packed.shape

    @property
    def weight(self) -> Tensor:
        return self.packed.dense()

    def forward(self, ids: Tensor) -> Tensor:
        return self.packed.lookup(ids)


PACKED_MODULES = (PackedLinear, PackedEmbedding)


def packable(model: nn.Module) -> dict[str, type]:
    """Our weight names that a ``Packed`` can hold: every ``nn.Linear`` and ``nn.Embedding`` weight, and the
    banks a module names in its ``BANKS`` (an expert bank [experts, rows, cols], core/moe.py ``Experts``)."""
    out: dict[str, type] = {}
    for name, m in model.named_modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            out[f"{name}.weight"] = type(m)
        for bank in getattr(type(m), "BANKS", ()):
            out[f"{name}.{bank}"] = type(m)
    return out


def install(model: nn.Module, packed: dict[str, Packed]) -> None:
    """Put ``PackedLinear``/``PackedEmbedding`` in place of the modules whose weights are ``packed``
    (a meta model: their biases stay meta parameters until the state dict is assigned); a packed bank takes
    the place of its parameter in the module that names it in ``BANKS``."""
    total = sum(p.numel() for p in {id(p): p for p in packed.values()}.values())
    for name, weight in packed.items():
        weight.group_numel = total
        parent_name, _, leaf = name.rpartition(".")
        owner = model.get_submodule(parent_name) if parent_name else model
        if leaf in getattr(type(owner), "BANKS", ()):
            delattr(owner, leaf)          # the parameter goes; the Packed module is the bank now
            owner.add_module(leaf, weight)
            continue
        path = name.removesuffix(".weight")
        parent_name, _, leaf = path.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        old = getattr(parent, leaf)
        new = PackedEmbedding(weight) if isinstance(old, nn.Embedding) else PackedLinear(weight, old.bias)
        setattr(parent, leaf, new)


def packed_weights(model: nn.Module) -> list[Packed]:
    """Every ``Packed`` of a model, each once (a tied embedding and un-embedding share one)."""
    seen: dict[int, Packed] = {}
    for m in model.modules():
        if isinstance(m, Packed):
            seen.setdefault(id(m), m)
    return list(seen.values())


def storage(model: nn.Module) -> str:
    """What the weights are stored in: 'float32', or 'as in the file: Q4_K (96), Q6_K (16); norms float32'."""
    from explorer.core.placement import model_dtype

    packed = packed_weights(model)
    compute = str(model_dtype(model)).removeprefix("torch.")
    if not packed:
        return compute
    counts: dict[str, int] = {}
    for p in packed:
        counts[p.type_name] = counts.get(p.type_name, 0) + 1
    kinds = ", ".join(f"{k} ({n})" for k, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    half = all(p.type_id in FLOATS for p in packed)
    lead = "matrices in" if half else "matrices kept as in the file:"
    return f"{lead} {kinds}; the rest {compute}"


def storage_short(model: nn.Module) -> str:
    """The storage in a word or two for the status bar: 'float32', 'Q4_K', 'Q4_K+Q6_K', 'BF16'."""
    from explorer.core.placement import model_dtype

    kinds: dict[str, int] = {}
    for p in packed_weights(model):
        kinds[p.type_name] = kinds.get(p.type_name, 0) + p.nbytes
    if not kinds:
        return str(model_dtype(model)).removeprefix("torch.")
    return "+".join(sorted(kinds, key=lambda k: -kinds[k])[:2])


def stored_bytes(model: nn.Module) -> int:
    """Bytes the weights take as stored (packed bytes, plus every parameter), each storage once."""
    from explorer.core.placement import resident_bytes

    return resident_bytes(model)
