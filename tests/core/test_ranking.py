"""The one ranking rule: highest first, ties by the lower id, for numpy arrays and torch rows."""

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from explorer.core.analysis.ranking import descending, rank_of, top_k_ids, top_k_rows


def test_top_k_rows_breaks_ties_by_lower_id():
    raw = torch.tensor([[1.0, 3.0, 3.0, 0.0, 3.0], [5.0, 1.0, 2.0, 2.0, 0.0]])
    assert top_k_rows(raw, 2).tolist() == [[1, 2], [0, 2]]
    assert top_k_rows(raw, 4).tolist() == [[1, 2, 4, 0], [0, 2, 3, 1]]


def test_top_k_ids_ties_nan_and_masked():
    x = np.array([1.0, 3.0, np.nan, 3.0, -np.inf, 2.0])
    assert top_k_ids(x, 3).tolist() == [1, 3, 5]
    assert top_k_ids(x, 10).tolist() == [1, 3, 5, 0, 2, 4]          # NaN counts as -inf, ties by id
    assert top_k_ids(x, 10, finite_only=True).tolist() == [1, 3, 5, 0]
    assert top_k_ids(x, 0).size == 0 and top_k_ids(x, 0).dtype == np.int64
    assert descending(x).tolist() == [1, 3, 5, 0, 2, 4]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-3, 3), min_size=1, max_size=40), st.integers(0, 45))
def test_top_k_ids_equals_a_full_stable_sort(values, k):
    x = np.array(values, dtype=np.float64)
    full = sorted(range(len(values)), key=lambda i: (-values[i], i))
    assert top_k_ids(x, k).tolist() == full[:k]
    for r, i in enumerate(full):
        assert rank_of(x, i) == r
