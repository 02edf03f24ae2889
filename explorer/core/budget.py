"""A memory budget for traces and the values derived from them (Qt-free; torch imported lazily).

One ``MemoryBudget`` per process (``global_budget()``) bounds the bytes that traces keep:

* what a Trace stores (its captured arrays) is *held*: ``budget.hold(nbytes)`` always succeeds,
  first evicting cached values to make room, and is given back when the holder is dropped;
* what is derived or cached (scores and patterns of a head, re-run blocks, host copies of device
  tensors, a timeline's per-step values) lives in ``LRUCache`` objects bound to the budget. Putting a
  value evicts the least recently used entries of *any* cache of the budget until the new value fits;
  a value larger than what is left is returned but not kept (it is recomputed when asked again).

The budget is never a reason to fail: a tiny budget only means more recomputation.

API for other modules (e.g. a timeline following the budget)::

    from explorer.core.budget import LRUCache, global_budget
    cache = LRUCache()                    # bound to global_budget()
    value = cache.get(key)                # None if absent (or evicted)
    value = cache.put(key, value)         # nbytes from value.nbytes, or pass nbytes=
    r = global_budget().reserve(n)        # a Reservation, or None when n cannot fit even after evicting caches
    r.release()                           # (also released when r is garbage-collected)

The default limit is a quarter of the device's memory (RAM for the CPU and MPS, the GPU's memory
for CUDA), at least 256 MB; ``parse_size("2GB")`` reads the setting and the CLI's ``--memory-budget``.
"""

from __future__ import annotations

import itertools
import os
import re
import threading
import weakref
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any

_MIN_DEFAULT = 256 * 2**20
_UNITS = {"": 1, "B": 1, "K": 2**10, "KB": 2**10, "M": 2**20, "MB": 2**20, "G": 2**30, "GB": 2**30,
          "T": 2**40, "TB": 2**40, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}


def parse_size(text: str) -> int:
    """``"512MB"``, ``"2 GB"``, ``"1.5G"``, ``"1048576"`` -> bytes; ValueError with one line otherwise."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", str(text))
    unit = match.group(2).upper() if match else ""
    if match is None or unit not in _UNITS:
        raise ValueError(f"a memory size like 512MB or 2GB, not {text!r}")
    nbytes = int(float(match.group(1)) * _UNITS[unit])
    if nbytes <= 0:
        raise ValueError(f"a memory budget must be more than 0 bytes, not {text!r}")
    return nbytes


def format_size(nbytes: int) -> str:
    for unit, size in (("GB", 2**30), ("MB", 2**20), ("KB", 2**10)):
        if abs(nbytes) >= size:
            return f"{nbytes / size:.1f} {unit}"
    return f"{nbytes} B"


def _ram_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 8 * 2**30


def device_memory(device: Any = "cpu") -> int:
    """Total memory of ``device`` (a torch.device or its name): the GPU's for CUDA, RAM otherwise."""
    kind = getattr(device, "type", str(device).split(":")[0])
    if kind == "cuda":
        import torch

        index = getattr(device, "index", None)
        return int(torch.cuda.get_device_properties(0 if index is None else index).total_memory)
    return _ram_bytes()


def default_limit(device: Any = "cpu") -> int:
    """A quarter of the device's memory, at least 256 MB."""
    return max(_MIN_DEFAULT, device_memory(device) // 4)


class Reservation:
    """Bytes held in a budget until ``release()`` (or until this object is garbage-collected)."""

    def __init__(self, budget: MemoryBudget, nbytes: int) -> None:
        self.budget, self.nbytes = budget, int(nbytes)
        self._finalizer = weakref.finalize(self, budget._release, self.nbytes)

    def release(self) -> None:
        self._finalizer()  # runs once


class MemoryBudget:
    """A byte limit over held reservations and the entries of its LRU caches (thread-safe)."""

    def __init__(self, limit: int | None = None, device: Any = "cpu") -> None:
        self._limit = int(limit) if limit is not None else default_limit(device)
        self.explicit = limit is not None  # set by the user: a model's device does not change it
        self.device: Any = device
        self._held = 0
        self._caches: weakref.WeakSet[LRUCache] = weakref.WeakSet()
        self._lock = threading.RLock()
        self._tick = itertools.count()
        self.peak_cached = 0
        self.peak = 0

    # --- the limit ---------------------------------------------------------------------------
    @property
    def limit(self) -> int:
        return self._limit

    def set_limit(self, nbytes: int, explicit: bool = True) -> None:
        """A new limit, kept at once (cached values evicted down to it)."""
        if nbytes <= 0:
            raise ValueError("a memory budget must be more than 0 bytes")
        with self._lock:
            self._limit, self.explicit = int(nbytes), explicit
            self._make_room(0)

    def follow_device(self, device: Any) -> None:
        """The default for ``device`` unless the user set a limit."""
        self.device = device
        if not self.explicit:
            self.set_limit(default_limit(device), explicit=False)

    # --- what is in use ----------------------------------------------------------------------
    @property
    def held(self) -> int:
        return self._held

    @property
    def cached(self) -> int:
        with self._lock:
            return sum(c.nbytes for c in list(self._caches))

    @property
    def in_use(self) -> int:
        return self._held + self.cached

    def describe(self) -> str:
        """One line for the status bar: in use of the limit, and how much of it is cached."""
        return f"memory {format_size(self.in_use)} of {format_size(self.limit)} (cache {format_size(self.cached)})"

    # --- reserving ---------------------------------------------------------------------------
    def hold(self, nbytes: int) -> Reservation:
        """Bytes that must be kept (a trace's stored arrays): caches make room, never refused."""
        with self._lock:
            self._make_room(nbytes)
            self._held += int(nbytes)
            self._note_peak()
            return Reservation(self, nbytes)

    def reserve(self, nbytes: int) -> Reservation | None:
        """Room for ``nbytes`` if it fits after evicting cached values, else None (nothing evicted)."""
        with self._lock:
            if self._held + nbytes > self._limit:
                return None
            return self.hold(nbytes)

    def _release(self, nbytes: int) -> None:
        with self._lock:
            self._held = max(0, self._held - nbytes)

    def _note_peak(self) -> None:
        cached = self.cached
        self.peak_cached = max(self.peak_cached, cached)
        self.peak = max(self.peak, cached + self._held)

    def _make_room(self, nbytes: int) -> None:
        """Evict least recently used cache entries (of every cache) until ``nbytes`` more fit."""
        while self._held + self.cached + nbytes > self._limit:
            oldest = None
            for cache in list(self._caches):
                tick = cache._oldest_tick()
                if tick is not None and (oldest is None or tick < oldest[0]):
                    oldest = (tick, cache)
            if oldest is None:
                return
            oldest[1]._evict_oldest()


_GLOBAL: MemoryBudget | None = None
_GLOBAL_LOCK = threading.Lock()


def global_budget() -> MemoryBudget:
    """The process's budget (created on first use with the CPU's default)."""
    global _GLOBAL
    with _GLOBAL_LOCK:
        if _GLOBAL is None:
            _GLOBAL = MemoryBudget()
        return _GLOBAL


def _nbytes(value: Any) -> int:
    nbytes = getattr(value, "nbytes", None)
    if nbytes is None:
        raise TypeError("LRUCache.put needs nbytes= for a value without .nbytes")
    return int(nbytes)


class LRUCache:
    """Values by key, least recently used evicted first, within a ``MemoryBudget`` shared with others."""

    def __init__(self, budget: MemoryBudget | None = None) -> None:
        self.budget = budget or global_budget()
        self._entries: OrderedDict[Hashable, tuple[Any, int, int]] = OrderedDict()  # value, nbytes, tick
        self.nbytes = 0
        with self.budget._lock:
            self.budget._caches.add(self)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Hashable, default: Any = None) -> Any:
        with self.budget._lock:
            entry = self._entries.get(key)
            if entry is None:
                return default
            self._entries[key] = (entry[0], entry[1], next(self.budget._tick))
            self._entries.move_to_end(key)
            return entry[0]

    def put(self, key: Hashable, value: Any, nbytes: int | None = None) -> Any:
        """Keep ``value`` if it fits in the budget (evicting others first); return it either way."""
        size = _nbytes(value) if nbytes is None else int(nbytes)
        budget = self.budget
        with budget._lock:
            self.pop(key)
            if budget.held + size > budget.limit:
                return value  # it cannot fit even alone: not kept, recomputed when asked again
            budget._make_room(size)
            self._entries[key] = (value, size, next(budget._tick))
            self.nbytes += size
            budget._note_peak()
        return value

    def pop(self, key: Hashable) -> Any:
        with self.budget._lock:
            entry = self._entries.pop(key, None)
            if entry is None:
                return None
            self.nbytes -= entry[1]
            return entry[0]

    def clear(self) -> None:
        with self.budget._lock:
            self._entries.clear()
            self.nbytes = 0

    def _oldest_tick(self) -> int | None:
        return next(iter(self._entries.values()))[2] if self._entries else None

    def _evict_oldest(self) -> None:
        _, (_, size, _) = self._entries.popitem(last=False)
        self.nbytes -= size
