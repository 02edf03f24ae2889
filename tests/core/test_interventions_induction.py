"""Interventions on the bundled induction model: its induction heads do the copying, and patching finds them.

Measured (CPU, seeds 0-2 of the probe; the numbers the closing note reports):
* loss on the second copy of a repeated random sequence: 0.15-0.27 nats; head 1.2 switched off
  2.9-3.4; all four layer-1 heads off 8.3-9.3 (a model that copies nothing: ~8); the previous-token
  head 0.1 off 0.9-1.6;
* patching from the repeated sequence into one whose first copy is other tokens, for the last
  token's prediction: the stream entering layer 1 restores the whole difference (1.00) at one
  position only, the token after the earlier occurrence (where head 0.1 wrote "my previous token
  is ..."); layer 1's four heads together restore 1.00 of it, layer 0's 0.64-0.84; the stream
  after layer 1 has it at the target position.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from explorer.core.checkpoint import load_checkpoint
from explorer.core.interventions.apply import record_sites, run
from explorer.core.interventions.patching import activation_patching
from explorer.core.interventions.spec import Intervention
from tests.core.test_default_models import named_heads, repeated_tokens

SEEDS = (0, 1, 2)


@pytest.fixture(scope="module")
def induction():
    return load_checkpoint("induction", device="cpu")


def second_copy_loss(loaded, ids, interventions) -> float:
    logits = run(loaded.model, ids, interventions)
    losses = F.cross_entropy(logits[:-1], torch.tensor(ids[1:]), reduction="none")
    return losses[len(ids) // 2:].mean().item()


def test_switching_off_the_induction_heads_breaks_copying(induction) -> None:
    (prev_layer, prev_head), (ind_layer, ind_head) = named_heads()
    H = induction.config.n_heads
    rows = []
    for seed in SEEDS:
        ids = repeated_tokens(induction, seed=seed)
        rows.append([second_copy_loss(induction, ids, ivs) for ivs in (
            [], [Intervention("head", ind_layer, ind_head)],
            [Intervention("head", ind_layer, h) for h in range(H)],
            [Intervention("head", prev_layer, prev_head)])])
    clean, one, all_four, previous = np.mean(rows, axis=0)
    # measured means: 0.20, 3.06, 8.82, 1.30 nats
    assert clean < 0.5
    assert one > clean + 2.0, (clean, one)
    assert all_four > 7.5, all_four
    assert clean + 0.4 < previous < one, (previous, one)


def test_patching_localises_the_copy_on_layer_one(induction) -> None:
    L, H = induction.config.n_layers, induction.config.n_heads
    heads = []
    for seed in SEEDS:
        ids = repeated_tokens(induction, seed=seed)
        half = len(ids) // 2
        others = [t for t in repeated_tokens(induction, half=80, seed=100 + seed)[:80] if t not in ids][:half]
        corrupt = others + ids[half:]
        pos = len(ids) - 2
        res = activation_patching(induction.model, ids, corrupt, ids[pos + 1], position=pos)
        assert res.clean_metric > res.corrupt_metric + 8.0  # the repeat makes the next token ~10 logits likelier
        # entering layer 1 the difference sits at one position, the token after the earlier occurrence
        assert res.resid[1, half - 1] == pytest.approx(1.0, abs=0.02)
        assert np.abs(np.delete(res.resid[1], half - 1)).max() < 0.05
        assert res.resid[L, pos] == pytest.approx(1.0, abs=1e-5)
        assert abs(res.resid[1, pos]) < 0.05  # not yet at the target position: layer 1 moves it there
        clean_z, _ = record_sites(induction.model, ids, {("attn.z", layer) for layer in range(L)})
        together = []
        for layer in range(L):
            ivs = [Intervention("head", layer, h, "patch", value=clean_z[("attn.z", layer)][h]) for h in range(H)]
            logit = run(induction.model, corrupt, ivs)[pos, ids[pos + 1]].item()
            together.append((logit - res.corrupt_metric) / (res.clean_metric - res.corrupt_metric))
        assert together[1] == pytest.approx(1.0, abs=0.02) and together[0] < 0.9, together
        heads.append(res.heads)
    mean = np.mean(heads, axis=0)
    # one head alone restores little (the layer-1 heads share the work); layer 1's row carries more
    assert mean[1].sum() > mean[0].sum() + 0.15, mean
