"""explorer.core.generation.candidates: one recorded step re-scored for the generation pane's chart
(the candidate table) and the controls described in words; headless, no model."""

from __future__ import annotations

import numpy as np
import pytest

from explorer.core.generation.candidates import (
    N_CANDIDATES,
    candidate_table,
    controls_equal,
    describe_params,
)
from explorer.core.generation.generate import Step
from explorer.core.generation.sampling import SamplingParams, StepScores, softmax


def make_step(logits, token_id: int, params: SamplingParams | None = None, previous=()) -> Step:
    scores = StepScores(np.asarray(logits, dtype=np.float32), params or SamplingParams(), tuple(previous), token_id)
    return Step(0, token_id, f"t{token_id}", scores, 0.0, 0, 0.0)


def test_the_table_is_ordered_by_probability_after_the_controls_and_lists_the_chosen_token():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=100)
    chosen = int(np.argsort(logits)[10])  # an unlikely token: outside both top-20 lists
    step = make_step(logits, chosen)
    params = SamplingParams(temperature=0.7, top_k=5)
    table = candidate_table(step, params)
    assert len(table.ids) == N_CANDIDATES and table.ids.dtype == np.int64
    assert table.ids[-1] == chosen and table.chosen_row == N_CANDIDATES - 1  # it takes the last row
    top5 = np.argsort(-logits)[:5]
    assert table.ids[:5].tolist() == top5.tolist()  # the survivors first, most likely first
    assert np.all(np.diff(table.after) <= 0) and table.num_possible == 5 and table.vocab_size == 100
    np.testing.assert_allclose(table.before, softmax(logits)[table.ids], rtol=1e-6)
    assert table.chosen_after == (None, 0.0)  # removed by top-k
    assert table.chosen_before == pytest.approx(float(softmax(logits)[chosen]), rel=1e-6)
    rank, prob = step.scores.rank_and_prob(int(top5[2]), params)
    assert candidate_table(make_step(logits, int(top5[2])), params).chosen_after == (rank, pytest.approx(prob))


def test_ties_are_broken_by_the_lower_id_and_removed_tokens_stay_out():
    logits = np.zeros(50)
    logits[[7, 3, 40]] = 2.0  # equal logits: listed 3, 7, 40
    logits[45:] = -np.inf  # vocabulary padding: never a candidate
    table = candidate_table(make_step(logits, 40), SamplingParams(), n=6)
    assert table.ids.tolist() == [3, 7, 40, 0, 1, 2]
    assert table.chosen_row == 2 and table.chosen_after[0] == 2
    assert table.num_possible == 45
    raw = softmax(make_step(logits, 40).scores.logits)
    np.testing.assert_array_equal(candidate_table(make_step(logits, 40), SamplingParams(), 6, raw).ids, table.ids)


def test_describe_params_names_only_the_controls_that_are_on():
    assert describe_params(SamplingParams()) == "T 1"
    assert describe_params(SamplingParams(temperature=0.0)) == "greedy (T 0)"
    assert describe_params(SamplingParams(temperature=0.7, top_k=40, top_p=0.9, min_p=0.05,
                                          repetition_penalty=1.2)) == \
        "T 0.7 · top-k 40 · top-p 0.9 · min-p 0.05 · penalty 1.2"


def test_controls_equal_ignores_the_seed_and_the_lengths():
    a = SamplingParams(temperature=0.7, top_k=5, seed=1, max_new_tokens=10)
    assert controls_equal(a, a.replace(seed=2, max_new_tokens=99, stop_at_eos=False))
    assert not controls_equal(a, a.replace(top_p=0.5))
