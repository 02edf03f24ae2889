"""Activation patching: which activations carry the difference between a clean and a corrupted prompt.

Two prompts of the same length differ in a few tokens; the model's preference for a ``target``
token (its logit, minus a ``distractor``'s logit if one is given) at ``position`` differs between
them. Run the *corrupted* prompt, but take one activation from the *clean* run: the share of the
clean-vs-corrupted difference that comes back is

    restored = (m_patched - m_corrupt) / (m_clean - m_corrupt)

1 where the patched activation carries everything, 0 where it carries nothing. Two grids:

* ``resid`` [L + 1, n]: the residual stream entering block l (row L: after the last block) at one
  position;
* ``heads`` [L, H]: one head's output z at every position.

How it is computed. The model is causal, so the metric at ``position`` depends only on the tokens
up to it: both prompts are cut there and only the last position is un-embedded. Cells that cannot
change a number are 0 without running anything: later positions, the final stream at an earlier
position, and any activation that is equal in both runs (every position before the first
differing token). A residual patch at position p leaves positions before p as in the corrupted
run, so its run starts at p with the corrupted run's keys and values before p in a KV cache (the
forward pass's own cache path). The patched runs go through the model ``batch_size`` at a time,
each batch element with its own patch (:class:`~explorer.core.interventions.apply.Intervener` groups). :func:`patching_steps` yields a
:class:`PatchingUpdate` after each batch (for a progress bar and a grid that fills in) and checks
``cancel`` before each batch. ``cells`` runs only some cells (the ones a user picked, the top-k of the
linear estimate of ``attribution.py``, which gives every cell from one backward pass).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from explorer.core import arguments
from explorer.core.cancel import CancelLike, asker
from explorer.core.errors import ExplorerError
from explorer.core.interventions.apply import Intervener, record_sites
from explorer.core.interventions.spec import Intervention, InterventionError
from explorer.core.model import KVCache, Transformer
from explorer.core.placement import input_device

Cell = tuple[str, int, int]  # ("resid", layer, position) or ("head", layer, head)


@dataclass(frozen=True)
class PatchingUpdate:
    cells: tuple[Cell, ...]
    values: tuple[float, ...]
    done: int
    total: int


@dataclass
class PatchingResult:
    resid: np.ndarray            # [L + 1, n] share of the difference restored
    heads: np.ndarray            # [L, H]
    clean_metric: float
    corrupt_metric: float
    position: int
    batches: int = 0             # batched forward passes run (the two baselines not counted)
    runs: int = 0                # patched sequences run
    naive_runs: int = 0          # one forward per cell, as a plain loop would do
    seconds: float = 0.0
    cancelled: bool = False
    skipped: int = 0             # cells not run: the clean value equals the corrupted one (exactly 0)
    positions_run: int = 0       # token positions run through the model in the patched runs
    clean: dict | None = None    # the clean run's activations by (site, layer): patch_for(cell, clean, L)


def _prefix(full: KVCache, length: int, batch: int) -> KVCache:
    """The first ``length`` positions of a one-sequence cache, shared by ``batch`` runs (no copy)."""
    cache = KVCache(len(full.keys))
    cache.keys = [k[..., :length, :].expand(batch, -1, -1, -1) for k in full.keys]
    cache.values = [v[..., :length, :].expand(batch, -1, -1, -1) for v in full.values]
    return cache


def patch_for(cell: Cell, clean: dict, n_layers: int) -> Intervention:
    """The intervention that patches one cell from the clean run's recorded values."""
    kind, layer, index = cell
    if kind == "resid":
        site = ("resid_final", None) if layer == n_layers else ("resid_pre", layer)
        return Intervention("resid", layer, None, "patch", (index,), clean[site])
    return Intervention("head", layer, index, "patch", None, clean[("attn.z", layer)][index])


def _metric(logits: torch.Tensor, target: int, distractor: int | None) -> torch.Tensor:
    """[B, V] -> [B]: the target's logit, minus the distractor's if any."""
    m = logits[:, target].double()
    return m - logits[:, distractor].double() if distractor is not None else m


def checked_position(model: Transformer, clean_ids: Sequence[int], corrupt_ids: Sequence[int], target: int,
                     distractor: int | None, position: int) -> int:
    """The metric's position (0 to n - 1) once the two prompts, the tokens and the position are usable;
    an InterventionError (one line) otherwise."""
    arguments.instance(model, Transformer, "model", "a Transformer (a LoadedModel's .model)")
    cfg = model.cfg
    for name, ids in (("clean_ids", clean_ids), ("corrupt_ids", corrupt_ids)):
        try:
            arguments.checked_ids(ids, cfg.vocab_size, cfg.n_ctx)
        except ExplorerError as exc:
            raise InterventionError(f"{name}: {exc}") from None
    arguments.whole(target, "target", 0)
    arguments.whole(distractor, "distractor", 0, none=True)
    if not cfg.causal:
        raise InterventionError("activation patching needs a causal (left-to-right) model")
    if len(clean_ids) != len(corrupt_ids):
        raise InterventionError(f"the clean prompt has {len(clean_ids)} tokens and the corrupted one "
                                f"{len(corrupt_ids)}: patching needs prompts of the same length")
    n = len(clean_ids)
    if isinstance(position, bool) or not isinstance(position, int) or not -n <= position < max(n, 1):
        raise InterventionError(f"position {str(position)[:40]} is outside the prompt's {n} tokens "
                                f"(0 to {n - 1}, or -1 for the last)")
    for name, tok in (("target", target), ("distractor", distractor)):
        if tok is not None and not 0 <= tok < cfg.vocab_size:
            raise InterventionError(f"the {name} token id {tok} is outside the vocabulary")
    return position % n if n else 0


def plan_cells(clean: dict, corrupt: dict, n_layers: int, n_heads: int, position: int,
               kinds: Sequence[str] = ("resid", "head"), cells: Sequence[Cell] | None = None,
               heads_of: Sequence[int] | None = None) -> tuple[list[tuple[int, list[Cell]]], list[Cell]]:
    """The exact runs a grid takes: (groups of (first position run, cells), cells left out).

    A resid patch at p leaves positions before p as in the corrupted run, so those cells start at p with
    the corrupted run's keys and values before it in a KV cache. Left out (exactly 0, nothing run): cells
    whose clean value equals the corrupted one, the final stream before ``position``, and later positions.
    ``clean``/``corrupt``: each run's activations by (site, layer), cut at ``position``. ``heads_of``: the layers
    whose heads can be patched (a hybrid's attention layers; None: every layer)."""
    L, H = n_layers, n_heads
    attending = range(L) if heads_of is None else heads_of

    def changes_something(cell: Cell) -> bool:
        kind, layer, index = cell
        if kind == "head":
            site, part = ("attn.z", layer), index
        else:
            site, part = (("resid_final", None) if layer == L else ("resid_pre", layer)), index
            if layer == L and index != position:  # the final stream at p feeds only position p's logits
                return False
        return not torch.equal(clean[site][part], corrupt[site][part])

    groups: list[tuple[int, list[Cell]]] = []
    if "resid" in kinds:
        groups += [(p, [("resid", layer, p) for layer in range(L + 1)]) for p in range(position + 1)]
    if "head" in kinds:
        groups.append((0, [("head", layer, h) for layer in attending for h in range(H)]))
    if cells is not None:
        wanted = set(cells)
        groups = [(first, [c for c in group if c in wanted]) for first, group in groups]
        groups = [(first, group) for first, group in groups if group]
    skipped = [c for _, group in groups for c in group if not changes_something(c)]
    left_out = set(skipped)
    return [(first, [c for c in group if c not in left_out]) for first, group in groups], skipped


def patching_steps(model: Transformer, clean_ids: Sequence[int], corrupt_ids: Sequence[int], target: int,
                   distractor: int | None = None, position: int = -1, kinds: Sequence[str] = ("resid", "head"),
                   batch_size: int = 32, cancel: CancelLike = None, cells: Sequence[Cell] | None = None,
                   ) -> Generator[PatchingUpdate, None, PatchingResult]:
    """``cells``: only these cells (the ones a user picked, the top-k of an attribution estimate); the
    grids' other entries stay 0 and no update names them. None: every cell of ``kinds``."""
    position = checked_position(model, clean_ids, corrupt_ids, target, distractor, position)
    cfg = model.cfg
    n = len(clean_ids)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InterventionError(f"the batch size must be a positive whole number (got {str(batch_size)[:40]})")
    is_cancelled = asker(cancel)
    t0 = time.perf_counter()
    L, H = cfg.n_layers, cfg.n_heads
    # a hybrid's heads are its attention layers'; its recurrent layers' state cannot be cut to a prefix of the
    # corrupted run, so every patched run starts at the first token there
    attending = [p.layer for p in cfg.plan if p.is_attention]
    recurrent = any(p.is_recurrent for p in cfg.plan)
    clean_cut, corrupt_cut = list(clean_ids[:position + 1]), list(corrupt_ids[:position + 1])
    sites = {("resid_pre", layer) for layer in range(L)} | {("resid_final", None)} | \
            {("attn.z", layer) for layer in attending}
    clean, clean_logits = record_sites(model, clean_cut, sites)
    full_cache = KVCache(L)  # the corrupted run's keys and values: later runs start from a prefix of them
    corrupt, corrupt_logits = record_sites(model, corrupt_cut, sites, cache=full_cache)
    m_clean = float(_metric(clean_logits[-1:], target, distractor)[0])
    m_corrupt = float(_metric(corrupt_logits[-1:], target, distractor)[0])
    if abs(m_clean - m_corrupt) < 1e-6:
        raise InterventionError("the clean and the corrupted prompt give the same logit difference: "
                                "there is nothing for patching to restore")
    result = PatchingResult(np.zeros((L + 1, n)), np.zeros((L, H)), m_clean, m_corrupt, position, clean=clean)
    result.naive_runs = ((L + 1) * n * ("resid" in kinds) + len(attending) * H * ("head" in kinds) if cells is None
                         else len(cells))

    groups, skipped = plan_cells(clean, corrupt, L, H, position, kinds, cells, attending)
    if recurrent:
        groups = [(0, group) for _, group in groups]
    total = sum(len(group) for _, group in groups) + len(skipped)
    done = len(skipped)  # their value is exactly 0: the patch would not change a number
    result.skipped = done
    if skipped:
        yield PatchingUpdate(tuple(skipped), (0.0,) * len(skipped), done, total)
    chunks = [(first, run[i:i + batch_size]) for first, run in groups for i in range(0, len(run), batch_size)]
    device = input_device(model)
    base = torch.as_tensor([corrupt_cut], dtype=torch.long, device=device)
    for first, batch in chunks:
        if is_cancelled():
            result.cancelled = True
            break
        rec = Intervener([[patch_for(c, clean, L)] for c in batch], L, start=first)
        cache = _prefix(full_cache, first, len(batch)) if first else None
        with torch.inference_mode():
            logits = model(base[:, first:].expand(len(batch), -1), rec, cache=cache, last_only=True)[:, -1]
        restored = ((_metric(logits, target, distractor) - m_corrupt) / (m_clean - m_corrupt)).cpu().numpy()
        for (kind, layer, index), value in zip(batch, restored):
            (result.resid if kind == "resid" else result.heads)[layer, index] = value
        result.batches += 1
        result.runs += len(batch)
        result.positions_run += len(batch) * (len(corrupt_cut) - first)
        done += len(batch)
        yield PatchingUpdate(tuple(batch), tuple(float(v) for v in restored), done, total)
    result.seconds = time.perf_counter() - t0
    return result


def activation_patching(model: Transformer, clean_ids: Sequence[int], corrupt_ids: Sequence[int], target: int,
                        distractor: int | None = None, position: int = -1, kinds: Sequence[str] = ("resid", "head"),
                        batch_size: int = 32, cancel: CancelLike = None,
                        progress: Callable[[PatchingUpdate], None] | None = None,
                        cells: Sequence[Cell] | None = None) -> PatchingResult:
    """Both grids at once (see the module docstring); ``progress`` is called after each batch;
    ``cells``: only those (see :func:`patching_steps`)."""
    steps = patching_steps(model, clean_ids, corrupt_ids, target, distractor, position, kinds, batch_size, cancel,
                           cells)
    while True:
        try:
            update = next(steps)
        except StopIteration as finished:
            return finished.value
        if progress is not None:
            progress(update)


SMALL_GAP = 0.25  # logits: below this the shares restored are ratios of noise-sized differences


def gap_warning(clean_metric: float, corrupt_metric: float) -> str | None:
    """A warning when the clean and corrupted runs barely differ: every share restored divides by that
    difference, so at a gap of 0.03 one head can "restore 116%" by noise. None when the gap is usable."""
    gap = abs(clean_metric - corrupt_metric)
    if gap >= SMALL_GAP:
        return None
    return (f"the clean and corrupted runs differ by only {gap:.3f} logits (under {SMALL_GAP}): the shares "
            "restored divide by that gap and are mostly noise; choose prompts that change the prediction more")
