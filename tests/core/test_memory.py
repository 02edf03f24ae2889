"""Freed memory goes back to the OS (glibc) and the call is harmless elsewhere."""

from __future__ import annotations

import platform
import sys

import numpy as np

from explorer.core import memory


def _rss_kb() -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))


def test_release_freed_memory_returns_blocks_to_the_os():
    glibc = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"
    if not glibc:
        assert memory.release_freed_memory() is False
        return
    # many 4 KB blocks come from the heap; one allocated after them pins its top, so freeing them
    # does not shrink the heap by itself: only malloc_trim gives those pages back
    blocks = [np.ones(512) for _ in range(16_000)]  # 64 MB
    pin = np.ones(512)
    del blocks
    before = _rss_kb()
    assert memory.release_freed_memory() is True
    after = _rss_kb()
    assert before - after > 32_000, (before, after)
    del pin


def test_release_is_a_no_op_without_glibc(monkeypatch):
    memory._malloc_trim.cache_clear()
    monkeypatch.setattr(memory.platform, "libc_ver", lambda: ("", ""))
    try:
        assert memory.release_freed_memory() is False
    finally:
        memory._malloc_trim.cache_clear()
