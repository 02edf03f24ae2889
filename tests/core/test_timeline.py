"""The timeline of a generation from one trace of the whole sequence, and the journey of a generated token."""

from __future__ import annotations

import numpy as np
import pytest

from explorer.core.analysis.residual import logit_lens
from explorer.core.analysis.timeline import estimate_nbytes, journey, trace_at_step, why_not_sliceable
from explorer.core.checkpoint import load_checkpoint
from explorer.core.generation.generate import generate
from explorer.core.generation.sampling import SamplingParams
from explorer.core.trace import CaptureSpec

STEPS = 6


def _tiny(model_type):
    pytest.importorskip("transformers")
    from decoder_reference import VOCAB
    from test_in_memory_families import tiny

    from explorer.core.checkpoint.in_memory import register
    from explorer.core.tokenize.base import VocabTokenizer

    return load_checkpoint(register(tiny(model_type), VocabTokenizer([f"w{i}" for i in range(VOCAB)])), device="cpu")


# the bundled GPT-2-style model; Mistral (rotary, a sliding window of 4, grouped K/V); Gemma 2
# (soft caps, sandwich norms, windows on every other layer); OLMo 2 (q/k norms over all heads)
MODELS = ["shakespeare", "mistral", "gemma2", "olmo2"]


@pytest.fixture(scope="module", params=MODELS)
def run(request):
    loaded = load_checkpoint("shakespeare", device="cpu") if request.param == "shakespeare" else _tiny(request.param)
    prompt = loaded.encode("To be, or not to be")[0] if request.param == "shakespeare" else [5, 17, 99, 3, 50]
    params = SamplingParams(temperature=0.0, max_new_tokens=STEPS, stop_at_eos=False)
    generated = generate(loaded, list(prompt), params).token_ids
    assert len(generated) == STEPS
    return loaded, list(prompt), list(generated)


@pytest.mark.parametrize("spec", ["everything", "full", "compact"])
def test_the_timeline_at_step_t_equals_a_fresh_trace_of_prompt_plus_t_tokens(run, spec):
    loaded, prompt, generated = run
    capture = getattr(CaptureSpec, spec)()
    whole = loaded.trace_ids(prompt + generated, capture)
    assert why_not_sliceable(whole) is None
    for t in (0, 1, 3, STEPS):
        at = trace_at_step(whole, len(prompt), t)
        fresh = loaded.trace_ids(prompt + generated[:t], capture)
        assert list(at.token_ids) == prompt + generated[:t] and at.tokens == fresh.tokens
        assert sorted(at.stored_keys()) == sorted(fresh.stored_keys())
        for key in fresh.stored_keys():
            assert at[key].shape == fresh[key].shape, key
            np.testing.assert_allclose(at[key], fresh[key], rtol=1e-5, atol=1e-5, err_msg=key)
        L, H = loaded.config.n_layers, loaded.config.n_heads
        for layer in range(L):  # derived views too: patterns from q and k, a block re-run from its input
            for head in range(H):
                np.testing.assert_allclose(at.head(layer, head), fresh.head(layer, head), rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(at[f"blocks.{layer}.attn.out"], fresh[f"blocks.{layer}.attn.out"],
                                       rtol=1e-5, atol=1e-5)


def test_the_journey_equals_the_lens_and_patterns_computed_directly(run):
    loaded, prompt, generated = run
    whole = loaded.trace_ids(prompt + generated, CaptureSpec.full())
    lens = logit_lens(whole, top=1)
    n = len(prompt)
    for t in (0, 2, STEPS - 1):
        j = journey(whole, n, t, top=2)
        q = n + t - 1
        assert j.token_id == generated[t] and j.position == n + t
        np.testing.assert_array_equal(j.ranks, lens.target_ranks[:, q])
        np.testing.assert_allclose(j.probs, lens.target_probs[:, q], rtol=1e-5, atol=1e-7)
        assert j.ranks[-1] == 0  # greedy: the model's own output ranks it first
        fresh = loaded.trace_ids(prompt + generated[:t], CaptureSpec.full())  # the model at step t
        for layer in range(loaded.config.n_layers):
            for head in range(loaded.config.n_heads):
                row = fresh.head(layer, head)[-1]
                np.testing.assert_allclose(j.attention[layer, head], row, rtol=1e-5, atol=1e-6)
                best = sorted(range(len(row)), key=lambda p: (-j.attention[layer, head, p], p))[:2]
                assert list(j.top_sources[layer, head]) == best
        assert j.first_top_layer() is not None and j.first_top_layer() <= loaded.config.n_layers


def test_the_journey_from_the_steps_own_trace_equals_the_one_from_the_whole_sequence(run):
    """While a generation streams in, step t is traced on its own: it ends before the token produced,
    whose id comes with the step; the journey is the same as from the whole sequence's trace."""
    loaded, prompt, generated = run
    whole = loaded.trace_ids(prompt + generated, CaptureSpec.full())
    n = len(prompt)
    for t in (0, 3, STEPS - 1):
        own = loaded.trace_ids(prompt + generated[:t], CaptureSpec.full())
        a, b = journey(whole, n, t, top=2), journey(own, n, t, top=2, token_id=generated[t])
        assert (a.token_id, a.position) == (b.token_id, b.position) == (generated[t], n + t)
        np.testing.assert_array_equal(a.ranks, b.ranks)
        np.testing.assert_allclose(a.probs, b.probs, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(a.attention, b.attention, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError):
        journey(loaded.trace_ids(prompt, CaptureSpec.full()), n, 0)  # no token id: nothing to follow


@pytest.mark.parametrize("spec", ["full", "compact"])
def test_the_size_of_a_longer_trace_is_estimated_from_a_shorter_one(run, spec):
    loaded, prompt, generated = run
    capture = getattr(CaptureSpec, spec)()
    short = loaded.trace_ids(prompt, capture)
    whole = loaded.trace_ids(prompt + generated, capture)
    assert abs(estimate_nbytes(short, whole.n_tokens) - whole.nbytes) <= 0.02 * whole.nbytes
    assert estimate_nbytes(short, short.n_tokens) == short.nbytes


def test_encoders_and_length_dependent_rotary_are_not_sliced():
    bert = _tiny("bert")
    reason = why_not_sliceable(bert.trace_ids([5, 17, 99]))
    assert reason is not None and "encoder" in reason
    with pytest.raises(ValueError, match="encoder"):
        trace_at_step(bert.trace_ids([5, 17, 99]), 1, 1)
    from dataclasses import replace

    from explorer.core.trace import Trace

    shakespeare = load_checkpoint("shakespeare", device="cpu").config
    dynamic = replace(shakespeare, positions="rotary", rope_scaling=(("factor", 2.0), ("max_position_embeddings", 64),
                                                                       ("rope_type", "dynamic")))
    reason = why_not_sliceable(Trace([1, 2], ["a", "b"], dynamic, {}))
    assert reason is not None and "dynamic" in reason
    assert why_not_sliceable(Trace([1, 2], ["a", "b"], shakespeare, {})) is None


def test_control_stages_say_which_sampling_control_changed_the_choice():
    from explorer.core.analysis.timeline import control_stages
    from explorer.core.generation.sampling import SamplingParams, StepScores

    logits = np.log(np.array([0.5, 0.3, 0.15, 0.05]))
    # token 2 was drawn at temperature 2 with top-k 3: the temperature raised it, top-k kept it
    stages = control_stages(StepScores(logits, SamplingParams(temperature=2.0, top_k=3), (), chosen_id=2))
    assert [s.control for s in stages] == ["model", "temperature", "top-k"]
    assert [s.chosen_rank for s in stages] == [2, 2, 2] and stages[0].chosen_prob == pytest.approx(0.15)
    assert stages[1].chosen_prob > stages[0].chosen_prob and stages[2].chosen_prob > stages[1].chosen_prob
    assert [s.changed for s in stages] == [False, False, False] and all(s.top_id == 0 for s in stages)
    # a repetition penalty on token 0 makes token 1 the most likely, and greedy then picks it
    stages = control_stages(StepScores(logits, SamplingParams(temperature=0.0, repetition_penalty=3.0), (0,),
                                       chosen_id=1))
    assert [s.control for s in stages] == ["model", "repetition penalty", "greedy"]
    assert [s.chosen_rank for s in stages] == [1, 0, 0] and [s.top_id for s in stages] == [0, 1, 1]
    assert [s.changed for s in stages] == [False, True, False] and stages[-1].chosen_prob == pytest.approx(1.0)
    removed = control_stages(StepScores(logits, SamplingParams(top_k=1), (), chosen_id=0))
    assert removed[-1].chosen_rank == 0
    assert control_stages(StepScores(logits, SamplingParams(top_k=1), (), chosen_id=3))[-1].chosen_rank is None
