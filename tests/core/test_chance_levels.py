"""Chance levels of head statistics: the closed forms equal each statistic applied to the uniform
pattern, and a few values worked out by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from explorer.core.analysis.attention import STATISTICS
from explorer.core.analysis.chance import chance_level, uniform_pattern


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("seed", range(6))
def test_closed_forms_equal_the_statistics_on_the_uniform_pattern(seed, causal):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    ids = rng.integers(0, int(rng.integers(2, 12)), size=n)
    pattern = uniform_pattern(n, causal)
    assert np.allclose(pattern.sum(axis=1), 1.0)
    for name, fn in STATISTICS.items():
        want, got = fn(pattern, ids), chance_level(name, ids, causal)
        assert (math.isnan(want) and math.isnan(got)) or got == pytest.approx(want, abs=1e-12), name


def test_values_by_hand():
    # A B A B: query 2 (A) sees 3 keys, one after an earlier A (key 1): 1/3; query 3 (B): key 2 of 4: 1/4
    assert chance_level("induction", [5, 7, 5, 7]) == pytest.approx((1 / 3 + 1 / 4) / 2)
    assert chance_level("previous_token", [1, 2, 3]) == pytest.approx((1 / 2 + 1 / 3) / 2)
    assert chance_level("entropy", [1, 2]) == pytest.approx(math.log(2) / 2)
    assert math.isnan(chance_level("induction", [1, 2, 3]))  # nothing repeats
    assert math.isnan(chance_level("previous_token", [4]))
    with pytest.raises(ValueError, match="unknown head statistic"):
        chance_level("nonsense", [1, 2])


def test_a_long_prompt_is_cheap():
    ids = np.arange(2048) % 50  # repeats every 50 tokens
    value = chance_level("induction", ids)
    assert 0 < value < 0.1  # roughly (occurrences so far) / (keys seen): about 1/50
