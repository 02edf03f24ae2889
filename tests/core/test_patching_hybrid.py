"""Activation patching and its linear estimate on a hybrid model (Gated DeltaNet, Mamba-2 and attention layers).

What a user sees: patching the residual stream at a position restores exactly what a whole forward pass with that
patch restores (the recurrent layers' state is not cut from a prefix: their runs start at the first token); the
head grid has entries on the attention layer only; attribution patching runs on the same model."""

from __future__ import annotations

import numpy as np
import torch
from test_mixers import hybrid

from explorer.core.interventions.apply import record_sites, run
from explorer.core.interventions.attribution import attribution_patching
from explorer.core.interventions.patching import activation_patching, patch_for

CLEAN = [3, 17, 5, 29, 11, 2, 38, 7]
CORRUPT = [3, 17, 9, 29, 11, 2, 38, 7]


def test_resid_and_head_patching_on_a_hybrid_equal_whole_runs():
    model = hybrid().model
    result = activation_patching(model, CLEAN, CORRUPT, target=5, distractor=6, batch_size=4)
    L = model.cfg.n_layers
    assert np.all(result.heads[:2] == 0) and np.abs(result.heads[2]).max() > 0    # heads: the attention layer's
    clean, _ = record_sites(model, CLEAN, {("resid_pre", layer) for layer in range(L)})
    for layer, position in ((1, 2), (2, 2), (0, 5)):
        iv = patch_for(("resid", layer, position), clean, L)
        with torch.inference_mode():
            logits = run(model, CORRUPT, [iv])[-1]
        m = float(logits[5] - logits[6])
        expected = (m - result.corrupt_metric) / (result.clean_metric - result.corrupt_metric)
        assert abs(result.resid[layer, position] - expected) < 1e-5
    estimate = attribution_patching(model, CLEAN, CORRUPT, target=5, distractor=6)
    assert estimate.heads.shape == result.heads.shape and np.all(estimate.heads[:2] == 0)
    assert np.isfinite(estimate.resid).all()
