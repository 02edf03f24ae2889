"""The patching panel's worker: attribution patching's estimate, then exact patches (a full grid or chosen cells)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from explorer.core.cancel import Cancel

if TYPE_CHECKING:
    from explorer.core.model import Transformer

ESTIMATE, EXACT = "estimate", "exact"


def run_patching(model: Transformer, clean: list[int], corrupt: list[int], target: int, distractor: int | None,
                 cancel: Cancel, mode: str = "exact", cells: list[tuple[str, int, int]] | None = None):
    """The worker's generator. Without ``cells``: attribution patching's estimate first (it carries the
    exact grid's time estimate), and in ``"exact"`` mode then ``patching_steps``'s updates. With
    ``cells``: the exact patches of those cells only. Returns the last result."""
    from explorer.core.interventions.attribution import attribution_patching
    from explorer.core.interventions.patching import patching_steps

    if cells is None:
        estimate = attribution_patching(model, clean, corrupt, target, distractor)
        yield estimate
        if mode == ESTIMATE or cancel.is_set():
            return estimate
    return (yield from patching_steps(model, clean, corrupt, target, distractor, batch_size=16, cancel=cancel,
                                      cells=cells))
