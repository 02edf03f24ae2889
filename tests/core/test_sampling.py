"""Tests for explorer.core.generation.sampling (pure numpy sampling controls)."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from explorer.core.generation import sampling
from explorer.core.generation.sampling import (
    Distribution,
    SamplingParams,
    StepScores,
    apply_controls,
    make_rng,
    next_token,
    sample,
    softmax,
    top_candidates,
)

NEG_INF = -np.inf
# A small distribution with easy cumulative sums: 0.5, 0.75, 0.9, 1.0.
P4 = np.array([0.5, 0.25, 0.15, 0.1])
L4 = np.log(P4)


def kept(x: np.ndarray) -> list[int]:
    """Ids of the tokens that are still possible."""
    return [int(i) for i in np.flatnonzero(np.isfinite(x))]


# --------------------------------------------------------------------------- params


def test_defaults_turn_every_control_off() -> None:
    p = SamplingParams()
    assert (p.temperature, p.top_k, p.top_p, p.min_p, p.repetition_penalty) == (
        1.0, 0, 1.0, 0.0, 1.0,
    )
    assert p.seed is None and p.max_new_tokens == 64 and p.stop_at_eos is True
    assert p.stop_strings == ()
    assert not p.greedy
    logits = np.random.default_rng(0).normal(size=100)
    np.testing.assert_array_equal(apply_controls(logits, p, [1, 2, 3]), logits)


def test_greedy_property_and_replace() -> None:
    assert SamplingParams(temperature=0).greedy
    assert not SamplingParams(temperature=1e-3).greedy
    p = SamplingParams(top_k=5).replace(temperature=0.0)
    assert p.greedy and p.top_k == 5
    with pytest.raises(ValueError, match="top_p"):
        p.replace(top_p=0.0)


def test_params_are_frozen_and_stop_strings_become_a_tuple() -> None:
    p = SamplingParams(stop_strings=["\n\n", "END"])  # type: ignore[arg-type]
    assert p.stop_strings == ("\n\n", "END")
    with pytest.raises(Exception):
        p.temperature = 2.0  # type: ignore[misc]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"temperature": -0.1}, "temperature must be >= 0"),
        ({"temperature": float("nan")}, "temperature must be a finite number"),
        ({"temperature": float("inf")}, "temperature must be a finite number"),
        ({"temperature": "hot"}, "temperature must be a finite number"),
        ({"top_k": -1}, "top_k must be >= 0"),
        ({"top_k": 2.5}, "top_k must be an integer"),
        ({"top_p": 0.0}, r"top_p must be in \(0, 1\]"),
        ({"top_p": 1.01}, r"top_p must be in \(0, 1\]"),
        ({"top_p": -0.5}, r"top_p must be in \(0, 1\]"),
        ({"min_p": 1.0}, r"min_p must be in \[0, 1\)"),
        ({"min_p": -0.01}, r"min_p must be in \[0, 1\)"),
        ({"repetition_penalty": 0.0}, "repetition_penalty must be > 0"),
        ({"repetition_penalty": -1.2}, "repetition_penalty must be > 0"),
        ({"max_new_tokens": 0}, "max_new_tokens must be >= 1"),
        ({"max_new_tokens": True}, "max_new_tokens must be an integer"),
        ({"seed": -3}, "seed must be None or an integer >= 0"),
        ({"seed": 1.5}, "seed must be None or an integer >= 0"),
        ({"stop_at_eos": "yes"}, "stop_at_eos must be True or False"),
        ({"stop_strings": "END"}, "not a single string"),
        ({"stop_strings": ("ok", "")}, "non-empty strings"),
        ({"stop_strings": (3,)}, "non-empty strings"),
    ],
)
def test_invalid_params_raise_value_error(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SamplingParams(**kwargs)


def test_boundary_values_are_accepted() -> None:
    SamplingParams(temperature=0.0, top_k=0, top_p=1.0, min_p=0.0, max_new_tokens=1, seed=0)
    SamplingParams(top_p=1e-9, min_p=0.999, repetition_penalty=1e-3)
    p = SamplingParams(temperature=np.float32(0.5), top_k=np.int64(3))
    assert type(p.temperature) is float and type(p.top_k) is int


# ---------------------------------------------------------- each control by hand


def test_repetition_penalty_divides_positive_and_multiplies_negative() -> None:
    logits = np.array([2.0, -1.0, 0.5, 0.0, 3.0])
    p = SamplingParams(repetition_penalty=2.0)
    # id 1 appears twice but is penalised once; id 0 is positive, id 3 is zero.
    out = apply_controls(logits, p, previous_ids=[0, 1, 1, 3])
    np.testing.assert_allclose(out, [1.0, -2.0, 0.5, 0.0, 3.0])
    # A penalty below 1 rewards repetition.
    out = apply_controls(logits, SamplingParams(repetition_penalty=0.5), [0, 1])
    np.testing.assert_allclose(out, [4.0, -0.5, 0.5, 0.0, 3.0])


def test_repetition_penalty_ignores_ids_beyond_vocab_and_rejects_negative() -> None:
    logits = np.array([2.0, 1.0])
    out = apply_controls(logits, SamplingParams(repetition_penalty=2.0), [1, 7, 50000])
    np.testing.assert_allclose(out, [2.0, 0.5])
    with pytest.raises(ValueError, match="previous_ids must be >= 0"):
        apply_controls(logits, SamplingParams(repetition_penalty=2.0), [0, -1])


def test_temperature_divides_logits() -> None:
    logits = np.array([2.0, 1.0, 0.0])
    out = apply_controls(logits, SamplingParams(temperature=0.5))
    np.testing.assert_allclose(out, [4.0, 2.0, 0.0])
    z = math.exp(4) + math.exp(2) + 1
    np.testing.assert_allclose(softmax(out), [math.exp(4) / z, math.exp(2) / z, 1 / z])
    hot = softmax(apply_controls(logits, SamplingParams(temperature=100.0)))
    assert hot.max() - hot.min() < 0.01  # very high temperature: nearly uniform


def test_temperature_zero_keeps_only_the_argmax_lowest_id_on_ties() -> None:
    logits = np.array([1.0, 3.0, 3.0, 0.0])
    out = apply_controls(logits, SamplingParams(temperature=0.0))
    np.testing.assert_array_equal(out, [NEG_INF, 3.0, NEG_INF, NEG_INF])


def test_top_k_keeps_the_k_highest() -> None:
    logits = np.array([1.0, 4.0, 2.0, 3.0])
    out = apply_controls(logits, SamplingParams(top_k=2))
    np.testing.assert_array_equal(out, [NEG_INF, 4.0, NEG_INF, 3.0])
    np.testing.assert_allclose(softmax(out)[[1, 3]], [math.e / (math.e + 1), 1 / (math.e + 1)])
    # k larger than the vocabulary keeps everything.
    np.testing.assert_array_equal(apply_controls(logits, SamplingParams(top_k=10)), logits)


def test_top_k_keeps_every_token_tied_with_the_kth() -> None:
    out = apply_controls(np.array([1.0, 3.0, 3.0, 0.0]), SamplingParams(top_k=1))
    assert kept(out) == [1, 2]


@pytest.mark.parametrize(
    ("top_p", "expected"),
    [(0.3, [0]), (0.6, [0, 1]), (0.8, [0, 1, 2]), (0.95, [0, 1, 2, 3])],
)
def test_top_p_keeps_the_smallest_nucleus_reaching_top_p(top_p: float, expected: list) -> None:
    out = apply_controls(L4, SamplingParams(top_p=top_p))
    assert kept(out) == expected
    np.testing.assert_allclose(out[expected], L4[expected])  # kept logits unchanged
    np.testing.assert_allclose(softmax(out)[expected], P4[expected] / P4[expected].sum())


def test_top_p_always_keeps_at_least_one_token() -> None:
    # The top token alone is far above a tiny top_p, and a flat distribution has
    # no token reaching it alone either: exactly one is kept, the lowest id.
    assert kept(apply_controls(L4, SamplingParams(top_p=1e-9))) == [0]
    assert kept(apply_controls(np.zeros(5), SamplingParams(top_p=1e-9))) == [0]
    assert kept(apply_controls(np.zeros(4), SamplingParams(top_p=0.5))) == [0, 1]
    # So small that 1 - top_p rounds to 1: every cumulative sum is <= it.
    assert kept(apply_controls(np.zeros(3), SamplingParams(top_p=1e-300))) == [0]


@pytest.mark.parametrize(("min_p", "expected"), [(0.25, [0, 1, 2]), (0.4, [0, 1]), (0.9, [0])])
def test_min_p_drops_tokens_below_min_p_times_top(min_p: float, expected: list) -> None:
    # Thresholds: 0.125, 0.2 and 0.45 against probabilities 0.5, 0.25, 0.15, 0.1.
    out = apply_controls(L4, SamplingParams(min_p=min_p))
    assert kept(out) == expected


def test_min_p_is_relative_to_the_top_probability() -> None:
    # The same absolute probability 0.1 survives min_p=0.25 next to a top of 0.3
    # (threshold 0.075) but not next to a top of 0.5 (threshold 0.125).
    flat = np.log([0.3, 0.3, 0.3, 0.1])
    peaked = np.log([0.5, 0.25, 0.15, 0.1])
    params = SamplingParams(min_p=0.25)
    assert 3 in kept(apply_controls(flat, params))
    assert 3 not in kept(apply_controls(peaked, params))
    # Scaling the logits by a constant shift changes nothing.
    np.testing.assert_array_equal(
        np.isfinite(apply_controls(peaked + 40.0, params)), np.isfinite(apply_controls(peaked, params))
    )


# ----------------------------------------------------------------------- order


def test_module_docstring_documents_the_order() -> None:
    doc = sampling.__doc__ or ""
    names = ["repetition penalty", "temperature", "top-k", "top-p", "min-p"]
    positions = [doc.index(f"**{name}**") for name in names]
    assert positions == sorted(positions)


def test_order_penalty_before_greedy() -> None:
    # Penalty first: 3 -> 1.5 loses to 2. Argmax first would pick id 0.
    out = apply_controls(np.array([3.0, 2.0]), SamplingParams(temperature=0, repetition_penalty=2.0), [0])
    assert kept(out) == [1]


def test_order_penalty_before_top_k() -> None:
    out = apply_controls(np.array([3.0, 2.0, 1.0]), SamplingParams(top_k=1, repetition_penalty=4.0), [0])
    assert kept(out) == [1]  # top-k first would have kept id 0


def test_order_temperature_before_top_p() -> None:
    logits = np.array([2.0, 1.0, 0.0])
    # At T=1 the probabilities are 0.665, 0.245, 0.090: top_p=0.7 keeps {0, 1}.
    assert kept(apply_controls(logits, SamplingParams(top_p=0.7))) == [0, 1]
    # At T=0.5 they are 0.867, 0.117, 0.016: the top token alone reaches 0.7.
    assert kept(apply_controls(logits, SamplingParams(temperature=0.5, top_p=0.7))) == [0]


def test_order_top_k_before_top_p() -> None:
    logits = np.log([0.5, 0.3, 0.2])
    params = SamplingParams(top_k=2, top_p=0.6)
    # Documented: top-k renormalises to 0.625, 0.375, then 0.625 alone reaches 0.6.
    assert kept(apply_controls(logits, params)) == [0]
    # The other order (top-p on 0.5, 0.3, 0.2 keeps two, then top-k keeps both).
    reverse = apply_controls(apply_controls(logits, SamplingParams(top_p=0.6)), SamplingParams(top_k=2))
    assert kept(reverse) == [0, 1]


def test_order_top_p_before_min_p() -> None:
    logits = np.log([0.4, 0.3, 0.2, 0.1])
    params = SamplingParams(top_p=0.75, min_p=0.3)
    # Documented: top-p keeps {0,1,2} (0.9 >= 0.75), min-p's threshold 0.133 of the
    # renormalised 0.444, 0.333, 0.222 removes nothing more.
    assert kept(apply_controls(logits, params)) == [0, 1, 2]
    # The other order: min-p drops id 3 first, then top-p on 0.444, 0.333, 0.222
    # reaches 0.75 with two tokens.
    reverse = apply_controls(apply_controls(logits, SamplingParams(min_p=0.3)), SamplingParams(top_p=0.75))
    assert kept(reverse) == [0, 1]


# ------------------------------------------------------------ Hugging Face parity

COMBOS = [
    # temperature, top_k, top_p, min_p, repetition_penalty
    (1.0, 0, 1.0, 0.0, 1.0),
    (0.7, 50, 0.9, 0.05, 1.3),
    (1.5, 0, 0.5, 0.0, 1.0),
    (0.3, 10, 1.0, 0.2, 0.8),
    (1.0, 0, 0.95, 0.1, 1.1),
    (2.0, 200, 0.99, 0.0, 2.0),
    (1.0, 1, 1.0, 0.0, 1.0),
    (1.0, 5000, 1.0, 0.0, 1.0),
    (0.9, 0, 0.01, 0.0, 1.0),
    (1.2, 0, 1.0, 0.5, 1.5),
    (0.5, 3, 0.3, 0.9, 1.2),
]


def _hf_reference(logits: np.ndarray, params: SamplingParams, previous_ids: list[int]) -> np.ndarray:
    import torch
    from transformers.generation import logits_process as lp

    processors = []
    if params.repetition_penalty != 1.0:
        processors.append(lp.RepetitionPenaltyLogitsProcessor(penalty=params.repetition_penalty))
    if params.temperature != 1.0:
        processors.append(lp.TemperatureLogitsWarper(temperature=params.temperature))
    if params.top_k > 0:
        processors.append(lp.TopKLogitsWarper(top_k=params.top_k, min_tokens_to_keep=1))
    if params.top_p < 1.0:
        processors.append(lp.TopPLogitsWarper(top_p=params.top_p, min_tokens_to_keep=1))
    if params.min_p > 0.0:
        processors.append(lp.MinPLogitsWarper(min_p=params.min_p, min_tokens_to_keep=1))
    scores = torch.from_numpy(logits.astype(np.float64)).unsqueeze(0)
    input_ids = torch.tensor([previous_ids], dtype=torch.long)
    for processor in processors:
        scores = processor(input_ids, scores)
    return scores[0].numpy()


@pytest.mark.parametrize("combo", COMBOS, ids=[str(c) for c in COMBOS])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_transformers_logits_processors(combo: tuple, seed: int) -> None:
    temperature, top_k, top_p, min_p, penalty = combo
    params = SamplingParams(
        temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, repetition_penalty=penalty
    )
    rng = np.random.default_rng(seed)
    vocab = 1000
    logits = rng.normal(scale=3.0, size=vocab).astype(np.float32)
    previous = [int(i) for i in rng.integers(0, vocab, size=60)]  # has duplicates
    ours = apply_controls(logits, params, previous)
    ref = _hf_reference(logits, params, previous)
    assert ours.dtype == np.float64 and ours.shape == (vocab,)
    np.testing.assert_array_equal(np.isfinite(ours), np.isfinite(ref))
    assert np.all(np.isneginf(ours[~np.isfinite(ours)]))
    finite = np.isfinite(ours)
    np.testing.assert_allclose(ours[finite], ref[finite], rtol=0, atol=1e-6)
    if 0 < top_k < vocab or top_p < 1.0 or min_p > 0.0:
        assert finite.sum() < vocab  # the comparison covered real filtering


# ----------------------------------------------------------------- properties


@settings(max_examples=200, deadline=None)
@given(
    logits=hnp.arrays(
        np.float64,
        st.integers(1, 30),
        elements=st.floats(-30, 30, allow_nan=False).map(lambda v: round(v, 1)),
    ),
    temperature=st.sampled_from([0.0, 0.3, 1.0, 2.5]),
    top_k=st.integers(0, 8),
    top_p=st.sampled_from([1e-6, 0.2, 0.5, 0.9, 1.0]),
    min_p=st.sampled_from([0.0, 0.05, 0.5, 0.99]),
    penalty=st.sampled_from([0.5, 1.0, 1.7]),
    previous=st.lists(st.integers(0, 40), max_size=10),
)
def test_controls_keep_an_upward_closed_nonempty_set(
    logits, temperature, top_k, top_p, min_p, penalty, previous
) -> None:
    params = SamplingParams(
        temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, repetition_penalty=penalty
    )
    out = apply_controls(logits, params, previous)
    penalised = apply_controls(logits, SamplingParams(repetition_penalty=penalty), previous)
    keep = np.isfinite(out)
    assert keep.any()
    assert keep[int(np.argmax(penalised))]  # the most likely token always survives
    # Whatever is kept, every strictly more likely token is kept too.
    lowest_kept = penalised[keep].min()
    assert keep[penalised > lowest_kept].all()
    if params.greedy:
        assert keep.sum() == 1
    else:
        np.testing.assert_allclose(out[keep], penalised[keep] / temperature)


# --------------------------------------------------------- softmax and -inf


def test_softmax_is_stable_and_handles_minus_inf() -> None:
    np.testing.assert_allclose(softmax(np.array([1000.0, 1000.0])), [0.5, 0.5])
    np.testing.assert_allclose(softmax(np.array([-1000.0, -1001.0])), [1 / (1 + math.exp(-1)), math.exp(-1) / (1 + math.exp(-1))])
    probs = softmax(np.array([0.0, NEG_INF, math.log(3.0), NEG_INF], dtype=np.float32))
    assert probs.dtype == np.float64
    np.testing.assert_allclose(probs, [0.25, 0.0, 0.75, 0.0])
    assert probs[1] == 0.0 and probs[3] == 0.0


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (np.array([NEG_INF, NEG_INF]), "all -inf"),
        (np.array([0.0, np.nan]), "NaN"),
        (np.array([0.0, np.inf]), r"\+inf"),
        (np.zeros((2, 3)), "1-D"),
        (np.zeros(0), "non-empty"),
    ],
)
def test_bad_logits_raise(bad: np.ndarray, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        softmax(bad)
    with pytest.raises(ValueError, match=message):
        apply_controls(bad, SamplingParams())


def test_controls_with_minus_inf_in_the_input() -> None:
    logits = np.array([NEG_INF, 2.0, NEG_INF, 1.0, 0.0])
    # top_k above the number of finite tokens keeps exactly the finite ones.
    assert kept(apply_controls(logits, SamplingParams(top_k=4))) == [1, 3, 4]
    # Penalty leaves -inf alone; top-p and min-p see only the finite part.
    out = apply_controls(logits, SamplingParams(repetition_penalty=2.0, top_p=0.99, min_p=0.1), [0, 1])
    assert out[0] == NEG_INF and out[1] == 1.0
    assert kept(out) == [1, 3, 4]  # 0.42, 0.42, 0.16 after the penalty
    assert kept(apply_controls(logits, SamplingParams(temperature=0))) == [1]


def test_input_is_not_modified() -> None:
    logits = np.array([3.0, 1.0, 2.0], dtype=np.float32)
    copy = logits.copy()
    out = apply_controls(logits, SamplingParams(temperature=0.5, top_k=1, repetition_penalty=3.0), [0])
    np.testing.assert_array_equal(logits, copy)
    assert out.dtype == np.float64


# --------------------------------------------------------------------- sample


def test_same_seed_gives_the_same_samples() -> None:
    logits = np.random.default_rng(3).normal(size=500)
    a = make_rng(123)
    b = make_rng(123)
    first = [sample(logits, a) for _ in range(300)]
    second = [sample(logits, b) for _ in range(300)]
    assert first == second


def test_different_seeds_give_different_samples() -> None:
    logits = np.zeros(1000)  # uniform: expected agreement is 0.3 draws out of 300
    a, b = make_rng(1), make_rng(2)
    first = [sample(logits, a) for _ in range(300)]
    second = [sample(logits, b) for _ in range(300)]
    assert sum(x == y for x, y in zip(first, second)) < 10
    # Several seeds all give distinct streams.
    streams = {tuple(sample(logits, rng) for _ in range(20)) for rng in map(make_rng, range(10))}
    assert len(streams) == 10


def test_samples_follow_the_distribution_and_skip_removed_tokens() -> None:
    probs = np.array([0.5, 0.0, 0.3, 0.2])
    logits = np.log(probs, where=probs > 0, out=np.full(4, NEG_INF))
    rng = make_rng(7)
    counts = np.bincount([sample(logits, rng) for _ in range(20000)], minlength=4)
    assert counts[1] == 0
    np.testing.assert_allclose(counts / counts.sum(), probs, atol=0.015)


def test_sample_draws_exactly_one_number_per_call() -> None:
    only = np.array([NEG_INF, 0.5, NEG_INF])
    rng = make_rng(11)
    assert sample(only, rng) == 1
    reference = make_rng(11)
    reference.random()
    assert rng.random() == reference.random()


def test_greedy_equals_temperature_zero_equals_argmax() -> None:
    gen = np.random.default_rng(5)
    for _ in range(20):
        logits = gen.normal(size=300)
        best = int(np.argmax(logits))
        params = SamplingParams(temperature=0.0, top_k=40, top_p=0.9)
        assert next_token(logits, params) == best  # no rng needed when greedy
        assert sample(logits, greedy=True) == best
        # Temperature 0 leaves one token, so ordinary sampling must pick it too.
        assert sample(apply_controls(logits, params), make_rng(0)) == best
    assert sample(np.array([1.0, 5.0, 5.0]), greedy=True) == 1


def test_sample_without_rng_needs_greedy() -> None:
    with pytest.raises(ValueError, match="rng"):
        sample(np.zeros(3))


def test_make_rng() -> None:
    assert isinstance(make_rng(), np.random.Generator)
    assert make_rng(5).random() == make_rng(5).random()
    with pytest.raises(ValueError, match="seed"):
        make_rng(-1)


def test_next_token_uses_the_controls() -> None:
    logits = np.array([5.0, 4.9, 0.0])
    params = SamplingParams(top_k=1, repetition_penalty=10.0)
    rng = make_rng(0)
    assert {next_token(logits, params, [0], rng) for _ in range(50)} == {1}


# ------------------------------------------------------------- distributions


def test_top_candidates_sorted_with_full_softmax_probs() -> None:
    logits = np.array([0.0, 2.0, 1.0, 2.0, NEG_INF, -1.0])
    dist = top_candidates(logits, n=3, chosen_id=5)
    assert isinstance(dist, Distribution)
    np.testing.assert_array_equal(dist.ids, [1, 3, 2])  # tie 1/3 broken by lower id
    np.testing.assert_array_equal(dist.logits, [2.0, 2.0, 1.0])
    full = softmax(logits)
    np.testing.assert_allclose(dist.probs, full[[1, 3, 2]])
    assert dist.covered_mass == pytest.approx(full[[1, 2, 3]].sum())
    assert len(dist) == 3 and dist.vocab_size == 6 and dist.num_possible == 5
    assert dist.chosen_id == 5 and dist.chosen_rank == 4
    assert dist.chosen_prob == pytest.approx(full[5])
    assert dist.rank_of(3) == 1 and dist.rank_of(0) is None
    assert dist.prob_of(2) == pytest.approx(full[2]) and dist.prob_of(4) is None
    assert dist.ids.dtype == np.int64
    with pytest.raises(ValueError):
        dist.probs[0] = 1.0  # read-only


def test_top_candidates_leaves_out_removed_tokens() -> None:
    dist = top_candidates(np.array([NEG_INF, 1.0, NEG_INF, 0.0]), n=10, chosen_id=0)
    np.testing.assert_array_equal(dist.ids, [1, 3])
    assert dist.chosen_rank is None and dist.chosen_prob == 0.0


def test_top_candidates_entropy_and_ties_across_the_cut() -> None:
    dist = top_candidates(np.zeros(8), n=3)
    np.testing.assert_array_equal(dist.ids, [0, 1, 2])
    assert dist.entropy == pytest.approx(math.log(8))
    assert top_candidates(np.array([0.0, 9.0]), n=1).entropy < 0.01
    assert len(top_candidates(np.zeros(8), n=0)) == 0
    with pytest.raises(ValueError, match="token id"):
        top_candidates(np.zeros(8), chosen_id=8)
    with pytest.raises(ValueError, match="n must be"):
        top_candidates(np.zeros(8), n=-1)


# ------------------------------------------------------------------ StepScores


def test_step_scores_rescore_with_new_controls() -> None:
    raw = np.log(np.array([0.5, 0.25, 0.15, 0.1], dtype=np.float32))
    step = StepScores(raw, SamplingParams(top_k=2), previous_ids=(2,), chosen_id=1)
    assert step.logits.dtype == np.float32 and step.vocab_size == 4
    before, after = step.rescore()
    np.testing.assert_array_equal(before.ids, [0, 1, 2, 3])
    np.testing.assert_allclose(before.probs, [0.5, 0.25, 0.15, 0.1], rtol=1e-6)
    np.testing.assert_array_equal(after.ids, [0, 1])
    np.testing.assert_allclose(after.probs, [2 / 3, 1 / 3], rtol=1e-6)
    assert after.chosen_rank == 1 and before.chosen_rank == 1
    # New controls: the recorded params are not used, the raw logits are.
    before2, after2 = step.rescore(SamplingParams(min_p=0.25), n=2)
    np.testing.assert_array_equal(before2.ids, [0, 1])
    np.testing.assert_allclose(before2.probs, before.probs[:2])
    assert after2.num_possible == 3 and len(after2) == 2
    np.testing.assert_allclose(after2.probs, np.array([0.5, 0.25]) / 0.9, rtol=1e-6)


def test_step_scores_penalty_uses_recorded_previous_ids() -> None:
    step = StepScores(np.array([2.0, 1.9, 0.0]), previous_ids=[0])
    _, after = step.rescore(SamplingParams(repetition_penalty=2.0))
    np.testing.assert_array_equal(after.ids, [1, 0, 2])
    np.testing.assert_allclose(step.processed(SamplingParams(repetition_penalty=2.0)), [1.0, 1.9, 0.0], rtol=1e-6)


def test_step_scores_rank_and_prob() -> None:
    raw = np.log(np.array([0.5, 0.25, 0.15, 0.1]))
    step = StepScores(raw)
    rank, prob = step.rank_and_prob(2)
    assert rank == 2 and prob == pytest.approx(0.15, rel=1e-6)
    rank, prob = step.rank_and_prob(2, SamplingParams(top_p=0.8))
    assert rank == 2 and prob == pytest.approx(0.15 / 0.9, rel=1e-6)
    assert step.rank_and_prob(3, SamplingParams(top_p=0.8)) == (None, 0.0)
    assert step.rank_and_prob(1, SamplingParams(temperature=0)) == (None, 0.0)
    assert step.rank_and_prob(0, SamplingParams(temperature=0)) == (0, 1.0)
    with pytest.raises(ValueError, match="token id"):
        step.rank_and_prob(4)


def test_step_scores_keeps_its_own_read_only_copy() -> None:
    source = np.array([1.0, 2.0, 3.0])
    step = StepScores(source)
    source[0] = 100.0
    assert step.logits[0] == 1.0
    with pytest.raises(ValueError):
        step.logits[0] = 5.0
    with pytest.raises(ValueError, match="NaN"):
        StepScores(np.array([np.nan, 1.0]))
    with pytest.raises(ValueError, match="token id"):
        StepScores(source, chosen_id=3)


# ------------------------------------------------------------------ big vocab


def test_gpt2_sized_vocab_works() -> None:
    """Every control together on a GPT-2-sized vocabulary (speed is measured in benchmarks/, not here)."""
    vocab = 50257
    gen = np.random.default_rng(0)
    logits = gen.normal(scale=4.0, size=vocab).astype(np.float32)
    previous = [int(i) for i in gen.integers(0, vocab, size=1024)]
    params = SamplingParams(
        temperature=0.8, top_k=0, top_p=0.95, min_p=0.01, repetition_penalty=1.2
    )
    step = StepScores(logits, params, tuple(previous), chosen_id=int(np.argmax(logits)))
    token = next_token(logits, params, previous, make_rng(0))
    before, after = step.rescore()
    rank, prob = step.rank_and_prob(token)
    assert 0 <= token < vocab and len(before) == 20 and after.num_possible < vocab
    assert rank is not None and prob > 0


# --------------------------------------------------------------------- purity


def _module_level_imports(path: str) -> set[str]:
    tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    names = set()
    for node in tree.body:  # module level: a function-local import is not paid at import time
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            names.add(node.module or "")
    return names


def test_module_imports_only_numpy_and_the_standard_library() -> None:
    from explorer.core.analysis import ranking

    names = _module_level_imports(sampling.__file__)
    ours = {"explorer.core.analysis.ranking", "explorer.core.errors"}
    roots = {name.split(".")[0] for name in names if name not in ours}
    assert roots <= {"__future__", "dataclasses", "math", "collections", "typing", "numpy"}, roots
    # the errors it raises (issue 34: ArgumentError) come from a module of the standard library's only
    from explorer.core import cancel, errors

    for module in (errors, cancel):
        roots = {name.split(".")[0] for name in _module_level_imports(module.__file__)}
        assert roots <= {"__future__", "explorer", "threading", "collections", "typing"}, roots
    # the one project module it uses (the shared ranking rule) is numpy-only as well
    ranking_roots = {name.split(".")[0] for name in _module_level_imports(ranking.__file__)}
    assert ranking_roots <= {"__future__", "numpy"}, ranking_roots
