"""A corpus run writes each batch's state on a writer thread while the next batch is added: the snapshot it
writes is what the accumulators held at the batch's end, not what they hold by the time it is written (on the
CPU a tensor's .cpu() is the tensor itself; a resumed run then counted a batch twice, now and then)."""

from __future__ import annotations

import numpy as np
import torch

from explorer.core.corpus.state import RunState
from explorer.core.corpus.units import Group


def test_the_snapshot_is_not_changed_by_the_next_batch():
    state = RunState([Group("neurons", 0, 5)], k=2, heads=None, causal=True)
    unit = state.unit("neurons", 0, torch.device("cpu"))
    torch.manual_seed(0)
    unit.add(torch.randn(8, 5), torch.arange(8))
    saved = state.snapshot(batch=None, token_dtype="int64", progress={})
    _, _, total, total_sq, hist = saved["stats"][0]
    held = [a.copy() for a in (total, total_sq, hist)]
    unit.add(torch.randn(8, 5), torch.arange(8, 16))  # the next batch, before the writer thread gets to it
    for before, now in zip(held, (total, total_sq, hist)):
        np.testing.assert_array_equal(now, before)
    assert not np.array_equal(unit.total.numpy(), total)  # (the accumulator itself did move on)
