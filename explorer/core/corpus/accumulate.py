"""What a corpus run keeps, updated a batch at a time where the model computes (torch), in fixed memory.

* ``TopK``: for each of R rows (a unit, a head) the k largest values seen, each with the global number
  of where it was (a token's g, a query/key pair's id). The order is exact and total: larger value
  first, then the smaller id, so any split of the corpus into batches or runs gives the same top k.
  A batch's candidates come from ``torch.topk`` over the batch; where the k-th and the (k+1)-th value
  tie, those rows are ranked again on a 64-bit key (value bits, then position), still on the device.
* ``UnitStats``: per unit, the sum and the sum of squares of its activations (summed in float64), and a
  histogram over ``BIN_EDGES``: fixed bins shared by every unit and every run (so runs add up),
  symmetric and logarithmic, four per decade from 1e-4 to 1e4 in magnitude, with a bin for exact 0;
  how often a unit fires (value > 0) is the count of the positive bins.
* ``HeadStats``: per head and statistic, the sum over windows of the window's score and the number of
  windows where it is defined (``analysis.attention.statistic_sums``: the same definition as one
  prompt's), the chance levels likewise, and the top query/key pairs (below).

A head's top pairs: for each query i >= 1 of each window, its strongest key j >= 1 (the first token,
the usual sink, is measured by ``first_token``), ranked by how far that weight is above what uniform
attention gives there (1/(i+1) causal, 1/n otherwise). Pair id: ``g_query * window + j``.
"""

from __future__ import annotations

import numpy as np
import torch

from explorer.core.analysis.head_sums import NAMES, repeat_pairs, statistic_sums
from explorer.core.analysis.chance import chance_levels

_NEG = np.float32(-np.nextafter(np.float32(0), np.float32(1)))  # the negative float32 closest to 0
_MAGNITUDES = 10.0 ** (np.arange(-16, 17) / 4)                    # 1e-4 .. 1e4, four per decade (33)
BIN_EDGES = np.concatenate([-_MAGNITUDES[::-1], [_NEG, 0.0], _MAGNITUDES]).astype(np.float32)
"""Histogram boundaries: bin b holds the values in (BIN_EDGES[b-1], BIN_EDGES[b]] (bin 0: <= -1e4, the
last: > 1e4); bin ``ZERO_BIN`` holds exactly 0."""
N_BINS = len(BIN_EDGES) + 1
ZERO_BIN = int(np.searchsorted(BIN_EDGES, 0.0))


def _ordered(v: torch.Tensor) -> torch.Tensor:
    """float32 -> int64 whose order is the floats' order (for the exact tie-break)."""
    bits = v.contiguous().view(torch.int32)
    return (bits ^ ((bits >> 31) & 0x7FFFFFFF)).to(torch.int64)


class TopK:
    """The k largest (value, id) of each of R rows, exact, on one device."""

    def __init__(self, rows: int, k: int, device: torch.device | str = "cpu") -> None:
        self.k = k
        self.values = torch.full((rows, k), -torch.inf, device=device)
        self.ids = torch.full((rows, k), -1, dtype=torch.int64, device=device)
        self.changed = torch.zeros(rows, dtype=torch.bool, device=device)

    @classmethod
    def of(cls, values: np.ndarray, ids: np.ndarray, device: torch.device | str) -> TopK:
        """A TopK holding ``values`` [R, k] and ``ids`` [R, k] (as saved)."""
        top = cls(values.shape[0], values.shape[1], device)
        top.values = torch.as_tensor(values, dtype=torch.float32).to(device)
        top.ids = torch.as_tensor(ids, dtype=torch.int64).to(device)
        return top

    def add(self, values: torch.Tensor, ids: torch.Tensor) -> None:
        """Candidates ``values`` [R, M] (float32, any strides) whose ids are ``ids`` [M] or [R, M], increasing
        along M: the ranking's tie-break is the smaller id."""
        M = values.shape[1]
        if M == 0:
            return
        values = values.float()
        take = min(self.k + 1, M)
        top, where = values.topk(take, dim=1)
        if torch.isnan(top).any():  # NaN is no value: ranked below everything
            values = torch.nan_to_num(values, nan=-torch.inf)
            top, where = values.topk(take, dim=1)
        if take > self.k:  # where the k-th and the next tie, topk's choice among them is arbitrary: rank again
            rows = torch.nonzero(top[:, self.k - 1] == top[:, self.k]).flatten()
            top, where = top[:, :self.k], where[:, :self.k]
            if len(rows):
                sub = values[rows] + 0.0  # -0.0 becomes 0.0: equal floats, equal keys
                key = (_ordered(sub) << 32) | (0xFFFFFFFF - torch.arange(M, device=sub.device, dtype=torch.int64))
                exact = key.topk(self.k, dim=1).indices
                top[rows], where[rows] = sub.gather(1, exact), exact
        cand = ids.expand(values.shape[0], M).gather(1, where) if ids.dim() == 1 else ids.gather(1, where)
        self.merge(top, cand)

    def merge(self, values: torch.Tensor, ids: torch.Tensor) -> None:
        """Fold in candidates [R, c] (value, id) with ids not seen before."""
        v = torch.cat([self.values, values], dim=1)
        i = torch.cat([self.ids, ids], dim=1)
        order = i.argsort(dim=1, stable=True)                           # id ascending, then
        v, i = v.gather(1, order), i.gather(1, order)
        order = (-v).argsort(dim=1, stable=True)[:, :self.k]            # value descending (stable: ids stay)
        v, i = v.gather(1, order), i.gather(1, order)
        self.changed |= (i != self.ids).any(dim=1)
        self.values, self.ids = v, i


class UnitStats:
    """One group's units: top-k contexts, sums, histogram (see the module docstring)."""

    def __init__(self, units: int, k: int, device: torch.device | str = "cpu",
                 saved: dict[str, np.ndarray] | None = None) -> None:
        """``saved``: the arrays of a resumed run (values, ids, total, total_sq, hist)."""
        if saved is None:
            self.top = TopK(units, k, device)
            self.total = torch.zeros(units, dtype=torch.float64, device=device)
            self.total_sq = torch.zeros(units, dtype=torch.float64, device=device)
            self.hist = torch.zeros((units, N_BINS), dtype=torch.int64, device=device)
        else:
            self.top = TopK.of(saved["values"], saved["ids"], device)
            self.total, self.total_sq, self.hist = (torch.as_tensor(saved[name]).to(device)
                                                    for name in ("total", "total_sq", "hist"))
        self.edges = torch.as_tensor(BIN_EDGES, device=device)
        self.offsets = torch.arange(units, device=device, dtype=torch.int32) * N_BINS

    @property
    def device(self) -> torch.device:
        return self.total.device

    def add(self, acts: torch.Tensor, g: torch.Tensor) -> None:
        """Activations [N, units] of the tokens numbered ``g`` [N] (increasing)."""
        acts = acts.float()
        self.total += acts.sum(0, dtype=torch.float64)
        self.total_sq += (acts * acts).sum(0, dtype=torch.float64)
        bins = torch.bucketize(acts, self.edges, out_int32=True) + self.offsets   # [N, units]
        self.hist += torch.bincount(bins.flatten(), minlength=self.hist.numel()).view_as(self.hist)
        self.top.add(acts.T, g)


class HeadStats:
    """Every head of every layer: the window scores' sums and counts, chance levels, top pairs."""

    def __init__(self, n_layers: int, n_heads: int, k: int, causal: bool = True,
                 saved_pairs: dict[int, tuple[np.ndarray, np.ndarray]] | None = None) -> None:
        self.n_layers, self.n_heads, self.k, self.causal = n_layers, n_heads, k, causal
        self.saved_pairs = saved_pairs or {}  # layer -> (values [H, k], ids [H, k]) of a resumed run
        self.sums = np.zeros((n_layers, len(NAMES), n_heads))
        self.counts = np.zeros((n_layers, len(NAMES), n_heads), np.int64)
        self.chance_sums = np.zeros(len(NAMES))
        self.chance_counts = np.zeros(len(NAMES), np.int64)
        self.pairs: dict[int, TopK] = {}
        self._batch: tuple[np.ndarray, tuple, int, torch.Tensor] | None = None
        self._pending: list[tuple[int, torch.Tensor, torch.Tensor]] = []

    def begin(self, ids: np.ndarray, g: np.ndarray, window: int, device: torch.device | str = "cpu") -> None:
        """A new batch of windows ``ids`` [B, n] whose tokens are numbered ``g`` [B, n]: chance levels now
        (they depend on the tokens only), the repeat pairs once for every layer."""
        for s, name in enumerate(NAMES):
            chance = chance_levels(name, ids, self.causal)
            ok = ~np.isnan(chance)
            self.chance_sums[s] += chance[ok].sum()
            self.chance_counts[s] += int(ok.sum())
        self._batch = (ids, repeat_pairs(ids), window, torch.as_tensor(g, device=device))

    def add(self, layer: int, pattern: torch.Tensor) -> None:
        """One layer's patterns [B, H, n, n] for the batch begun."""
        ids, pairs, window, g = self._batch
        stats = statistic_sums(pattern, ids, 0, NAMES, pairs)
        rows = np.stack([stats[name][1] for name in NAMES])             # [S, B]
        sums = torch.stack([stats[name][0] for name in NAMES])          # [S, B, H]
        defined = torch.as_tensor(rows > 0, device=sums.device)[..., None]
        counts = torch.as_tensor(np.maximum(rows, 1), dtype=torch.float64, device=sums.device)[..., None]
        scores = torch.where(defined, sums / counts, torch.zeros((), dtype=sums.dtype, device=sums.device))
        self._pending.append((layer, scores.sum(1), defined.sum(1).expand(-1, self.n_heads)))
        self._pairs(layer, pattern, g.to(pattern.device), window)

    def _pairs(self, layer: int, p: torch.Tensor, g: torch.Tensor, window: int) -> None:
        B, H, n, _ = p.shape
        if n < 2:
            return
        best, key = p[..., 1:].max(dim=-1)                              # [B, H, n]: each query's strongest key >= 1
        seen = torch.arange(1, n + 1, device=p.device, dtype=p.dtype) if self.causal else \
            torch.full((n,), float(n), device=p.device, dtype=p.dtype)
        lift = (best - 1.0 / seen)[:, :, 1:]                            # queries i >= 1
        ids = g[:, 1:, None] * window + (key[:, :, 1:] + 1).permute(0, 2, 1)  # [B, n-1, H]
        values = lift.permute(1, 0, 2).reshape(H, -1)                   # [H, B * (n-1)]: increasing ids
        if layer not in self.pairs:
            saved = self.saved_pairs.get(layer)
            self.pairs[layer] = TopK(H, self.k, p.device) if saved is None else TopK.of(*saved, p.device)
        self.pairs[layer].add(values, ids.permute(2, 0, 1).reshape(H, -1))

    def finish(self) -> None:
        """Fold the batch's per-layer sums into the float64 totals (one transfer per batch)."""
        for layer, sums, counts in self._pending:
            self.sums[layer] += sums.cpu().numpy()
            self.counts[layer] += counts.cpu().numpy()
        self._pending.clear()
        self._batch = None
