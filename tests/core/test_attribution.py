"""Attribution patching against exact activation patching.

* A linear toy (no norms, attention patterns that do not depend on the input, no FFN): the metric is
  linear in every activation, so the linear estimate is the exact patch (to 1e-5).
* The bundled induction model (seeds 0-2 of the repeated-sequence probe, the clean run's next token
  at the second-to-last position). Measured on CPU:
    Pearson(estimate, exact) over every cell of both grids 0.49 / 0.83 / 0.64 (mean 0.65),
    over the head grid alone 0.67 / 0.90 / 0.91 (mean 0.83).
  The estimate misses what a saturated softmax hides (the stream entering layer 1 at the token after
  the earlier occurrence restores 1.00 exactly, the estimate ~0: the corrupted run's induction head
  gives that key almost no weight, so its gradient there is ~0), the known weakness of attribution
  patching; the exact patch of the top-k cells is the check the panel offers.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from explorer.core.checkpoint import load_checkpoint
from explorer.core.config import ModelConfig
from explorer.core.interventions.attribution import attribution_patching, top_cells
from explorer.core.interventions.patching import activation_patching
from explorer.core.interventions.spec import InterventionError
from explorer.core.model import Transformer
from tests.core.test_default_models import repeated_tokens


def linear_toy() -> Transformer:
    """Attention-only, no norms; W_Q = W_K = 0 so every pattern is uniform over the earlier keys:
    the logits are a linear function of every residual stream and every head's output."""
    cfg = ModelConfig(vocab_size=23, n_ctx=16, d_model=12, n_layers=3, n_heads=3, d_head=4, d_ff=0,
                      norm="none", attn_only=True)
    torch.manual_seed(0)
    model = Transformer(cfg).eval()
    with torch.no_grad():
        for block in model.blocks:
            block.attn.W_Q.weight.zero_()
            block.attn.W_K.weight.zero_()
    return model


@pytest.mark.parametrize("distractor, position", [(4, -1), (None, 5)])
def test_the_estimate_is_the_exact_patch_on_a_linear_toy(distractor, position) -> None:
    model = linear_toy()
    clean, corrupt = [1, 2, 3, 4, 5, 6, 7, 8], [1, 2, 9, 4, 5, 11, 7, 8]
    estimate = attribution_patching(model, clean, corrupt, 3, distractor, position)
    exact = activation_patching(model, clean, corrupt, 3, distractor, position)
    assert estimate.clean_metric == pytest.approx(exact.clean_metric, abs=1e-5)
    assert estimate.corrupt_metric == pytest.approx(exact.corrupt_metric, abs=1e-5)
    assert np.abs(exact.resid).max() > 0.1 and np.abs(exact.heads).max() > 0.1  # something to estimate
    np.testing.assert_allclose(estimate.resid, exact.resid, atol=1e-5)
    np.testing.assert_allclose(estimate.heads, exact.heads, atol=1e-5)
    # the time estimate counts exactly what the exact grid runs
    assert estimate.exact_runs == exact.runs
    assert estimate.exact_forwards * (exact.position + 1) == pytest.approx(exact.positions_run)
    assert estimate.forward_seconds > 0 and estimate.exact_seconds() > estimate.forward_seconds


def test_the_estimate_leaves_the_model_as_it_was() -> None:
    model = linear_toy()
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    free = attribution_patching(model, [1, 2, 3, 4], [1, 5, 3, 4], 3)
    with torch.inference_mode():  # a caller inside inference mode gets the same numbers, and keeps its mode
        inside = attribution_patching(model, [1, 2, 3, 4], [1, 5, 3, 4], 3)
        assert torch.is_inference_mode_enabled()
    np.testing.assert_array_equal(free.resid, inside.resid)
    assert all(p.grad is None for p in model.parameters())  # no parameter's gradient was computed
    assert all(torch.equal(p, before[name]) for name, p in model.named_parameters())


def test_bad_input_is_one_clear_line() -> None:
    model = linear_toy()
    with pytest.raises(InterventionError, match="same length"):
        attribution_patching(model, [1, 2, 3], [1, 2], 3)
    with pytest.raises(InterventionError, match="nothing for patching to restore"):
        attribution_patching(model, [1, 2, 3], [1, 2, 3], 3)
    with pytest.raises(InterventionError, match="outside the vocabulary"):
        attribution_patching(model, [1, 2, 3], [1, 4, 3], 99)


@pytest.fixture(scope="module")
def induction():
    return load_checkpoint("induction", device="cpu")


def probe(loaded, seed: int) -> tuple[list[int], list[int], int]:
    ids = repeated_tokens(loaded, seed=seed)
    half = len(ids) // 2
    others = [t for t in repeated_tokens(loaded, half=80, seed=100 + seed)[:80] if t not in ids][:half]
    return ids, others + ids[half:], len(ids) - 2


def test_the_estimate_correlates_with_exact_patching_on_the_induction_model(induction) -> None:
    every, heads = [], []
    for seed in (0, 1, 2):
        clean, corrupt, pos = probe(induction, seed)
        estimate = attribution_patching(induction.model, clean, corrupt, clean[pos + 1], position=pos)
        exact = activation_patching(induction.model, clean, corrupt, clean[pos + 1], position=pos)
        assert estimate.clean_metric == pytest.approx(exact.clean_metric, abs=1e-4)
        assert estimate.corrupt_metric == pytest.approx(exact.corrupt_metric, abs=1e-4)
        a = np.concatenate([estimate.resid[:, :pos + 1].ravel(), estimate.heads.ravel()])
        e = np.concatenate([exact.resid[:, :pos + 1].ravel(), exact.heads.ravel()])
        every.append(np.corrcoef(a, e)[0, 1])
        heads.append(np.corrcoef(estimate.heads.ravel(), exact.heads.ravel())[0, 1])
        # cells exact patching does not run (later positions, the final stream before pos) are 0 in both
        assert np.all(estimate.resid[:, pos + 1:] == 0) and np.all(estimate.resid[-1, :pos] == 0)
        # the top-k of the estimate, patched exactly, are the full grid's values at those cells
        picked = top_cells(estimate, 6)
        assert ("resid", induction.config.n_layers, pos) in picked  # the final stream at the target
        checked = activation_patching(induction.model, clean, corrupt, clean[pos + 1], position=pos, cells=picked)
        assert checked.runs <= len(picked)
        for kind, layer, index in picked:
            grid = "resid" if kind == "resid" else "heads"
            assert getattr(checked, grid)[layer, index] == pytest.approx(getattr(exact, grid)[layer, index], abs=1e-5)
    # measured: every cell 0.49 / 0.83 / 0.64, heads 0.67 / 0.90 / 0.91
    assert min(every) > 0.4 and np.mean(every) > 0.55, every
    assert min(heads) > 0.6 and np.mean(heads) > 0.75, heads


@pytest.mark.parametrize("changes", [dict(final_softcap=3.0, logit_scale=0.5, unembed_bias=True, tie_embeddings=False),
                                     dict(d_embed=8)])
def test_the_metric_from_two_rows_is_the_models_own(changes) -> None:
    """The estimate reads only the target's and the distractor's un-embedding rows (after the scale,
    the soft-cap, the bias), or the whole un-embedding where it is more than a matrix (OPT-350m's projection)."""
    cfg = ModelConfig(vocab_size=23, n_ctx=16, d_model=12, n_layers=2, n_heads=3, d_head=4, d_ff=16, **changes)
    torch.manual_seed(1)
    model = Transformer(cfg).eval()
    with torch.no_grad():
        if model.unembed.bias is not None:
            model.unembed.bias.normal_()
    clean, corrupt = [1, 2, 3, 4, 5, 6], [1, 7, 3, 4, 5, 6]
    for distractor in (None, 9):
        estimate = attribution_patching(model, clean, corrupt, 3, distractor)
        exact = activation_patching(model, clean, corrupt, 3, distractor)
        assert estimate.clean_metric == pytest.approx(exact.clean_metric, abs=1e-5)
        assert estimate.corrupt_metric == pytest.approx(exact.corrupt_metric, abs=1e-5)
