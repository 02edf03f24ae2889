"""Head statistics on hand-computed attention patterns."""

from __future__ import annotations

import math

import numpy as np
import pytest

from explorer.core.analysis.attention import (
    STATISTICS,
    first_token_attention,
    head_statistics,
    induction_score,
    pattern_entropy,
    previous_token_score,
)


def uniform_causal(n: int) -> np.ndarray:
    """Row i attends equally to keys 0..i."""
    return np.tril(np.ones((n, n))) / np.arange(1, n + 1)[:, None]


def previous_token_pattern(n: int) -> np.ndarray:
    p = np.zeros((n, n))
    p[0, 0] = 1.0
    p[np.arange(1, n), np.arange(n - 1)] = 1.0
    return p


# --- entropy ---------------------------------------------------------------------------------------

def test_entropy_of_one_hot_rows_is_zero() -> None:
    assert pattern_entropy(np.eye(4)) == 0.0
    assert pattern_entropy(previous_token_pattern(5)) == 0.0


def test_entropy_of_uniform_causal_pattern() -> None:
    # row i is uniform over i + 1 keys: entropy ln(i + 1); rows 0..3 -> mean of ln1, ln2, ln3, ln4
    expected = (0 + math.log(2) + math.log(3) + math.log(4)) / 4
    assert pattern_entropy(uniform_causal(4)) == pytest.approx(expected)


def test_entropy_by_hand() -> None:
    p = np.array([[1.0, 0.0, 0.0],
                  [0.5, 0.5, 0.0],
                  [0.25, 0.25, 0.5]])
    # rows: 0, ln 2, 2 * 0.25 ln 4 + 0.5 ln 2 = 1.5 ln 2
    assert pattern_entropy(p) == pytest.approx((0 + math.log(2) + 1.5 * math.log(2)) / 3)


# --- first token and previous token -----------------------------------------------------------------

def test_first_token_attention() -> None:
    p = np.array([[1.0, 0.0, 0.0],
                  [0.75, 0.25, 0.0],
                  [0.5, 0.25, 0.25]])
    assert first_token_attention(p) == pytest.approx((0.75 + 0.5) / 2)  # row 0 is not counted
    assert first_token_attention(uniform_causal(4)) == pytest.approx((1 / 2 + 1 / 3 + 1 / 4) / 3)


def test_previous_token_score() -> None:
    assert previous_token_score(previous_token_pattern(6)) == 1.0
    assert previous_token_score(np.eye(5)) == 0.0
    p = np.array([[1.0, 0.0, 0.0],
                  [0.75, 0.25, 0.0],
                  [0.5, 0.3, 0.2]])
    assert previous_token_score(p) == pytest.approx((0.75 + 0.3) / 2)


def test_single_token_statistics_are_nan() -> None:
    one = np.ones((1, 1))
    assert pattern_entropy(one) == 0.0
    assert math.isnan(first_token_attention(one))
    assert math.isnan(previous_token_score(one))


# --- induction -------------------------------------------------------------------------------------

def test_perfect_induction_head_scores_one() -> None:
    # tokens: A B C D A B C D; position i >= 4 should attend to i - 3 (the token after its earlier copy)
    ids = [1, 2, 3, 4, 1, 2, 3, 4]
    n = len(ids)
    p = uniform_causal(n)
    for i in range(4, n):
        p[i] = 0.0
        p[i, i - 3] = 1.0
    assert induction_score(p, ids) == pytest.approx(1.0)
    # a previous-token head on the same tokens has no induction score
    assert induction_score(previous_token_pattern(n), ids) == 0.0


def test_induction_by_hand() -> None:
    ids = [7, 8, 7, 9, 7]
    p = np.array([[1.0, 0.0, 0.0, 0.0, 0.0],
                  [0.5, 0.5, 0.0, 0.0, 0.0],
                  [0.2, 0.6, 0.2, 0.0, 0.0],   # i=2: token 7 occurred at j=0 -> p[2, 1] = 0.6
                  [0.25, 0.25, 0.25, 0.25, 0.0],  # token 9 never occurred before: not counted
                  [0.1, 0.3, 0.1, 0.4, 0.1]])  # i=4: j in {0, 2} -> p[4, 1] + p[4, 3] = 0.7
    assert induction_score(p, ids) == pytest.approx((0.6 + 0.7) / 2)


def test_induction_ignores_the_immediately_preceding_copy() -> None:
    # j must be <= i - 2: for "5 5", j = i - 1 would point at the query itself
    ids = [3, 5, 5]
    assert math.isnan(induction_score(uniform_causal(3), ids))


def test_induction_is_nan_without_repeats() -> None:
    assert math.isnan(induction_score(uniform_causal(5), [1, 2, 3, 4, 5]))


def test_shape_checks() -> None:
    with pytest.raises(ValueError):
        pattern_entropy(np.ones((2, 3)))
    with pytest.raises(ValueError):
        induction_score(uniform_causal(3), [1, 2])


# --- every head of a trace -------------------------------------------------------------------------

class FakeTrace:
    """What head_statistics reads: config.n_layers / n_heads, token_ids and head(layer, head, kind)."""

    def __init__(self, patterns: np.ndarray, token_ids: list[int]) -> None:
        self.patterns = patterns

        class Cfg:
            n_layers, n_heads = patterns.shape[:2]
        self.config = Cfg()
        self.token_ids = np.asarray(token_ids)

    def head(self, layer: int, head: int, kind: str = "pattern") -> np.ndarray:
        assert kind == "pattern"
        return self.patterns[layer, head]


def test_head_statistics_on_fake_trace() -> None:
    ids = [1, 2, 3, 1, 2, 3]
    n = len(ids)
    induction = uniform_causal(n)
    for i in range(3, n):
        induction[i] = 0.0
        induction[i, i - 2] = 1.0
    patterns = np.stack([np.stack([previous_token_pattern(n), uniform_causal(n)]),
                         np.stack([np.eye(n), induction])])        # [L=2, H=2, n, n]
    trace = FakeTrace(patterns, ids)
    prev = head_statistics(trace, "previous_token")
    assert prev.shape == (2, 2) and prev.dtype == np.float64
    assert prev[0, 0] == 1.0 and prev[1, 0] == 0.0
    ind = head_statistics(trace, "induction")
    assert ind[1, 1] == pytest.approx(1.0)
    assert np.argmax(ind) == 3
    ent = head_statistics(trace, "entropy")
    assert ent[0, 0] == 0.0 and ent[0, 1] > 0
    assert head_statistics(trace, lambda p, t: float(p.shape[0] + len(t)))[1, 1] == 2 * n
    assert set(STATISTICS) == {"entropy", "first_token", "previous_token", "duplicate_token", "induction"}
    with pytest.raises(ValueError):
        head_statistics(trace, "nonsense")


def test_head_statistics_on_a_real_trace() -> None:
    """Patterns derived from a real (random) model's q and k: rows sum to 1, scores in range."""
    import torch

    from explorer.core.config import ModelConfig
    from explorer.core.model import Transformer
    from explorer.core.trace import capture

    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=20, n_ctx=16, d_model=16, n_layers=2, n_heads=2, d_head=8, d_ff=0, attn_only=True)
    model = Transformer(cfg).eval()
    ids = [3, 4, 5, 6, 3, 4, 5, 6]
    trace, _ = capture(model, ids, [str(i) for i in ids])
    for name in STATISTICS:
        table = head_statistics(trace, name)
        assert table.shape == (2, 2)
        assert np.all(np.isfinite(table))
    assert np.all((head_statistics(trace, "previous_token") >= 0) & (head_statistics(trace, "previous_token") <= 1))
    entropy = head_statistics(trace, "entropy")
    assert np.all(entropy >= 0) and np.all(entropy <= math.log(len(ids)))
