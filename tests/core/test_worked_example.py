"""The built-in worked example reproduces the seed article's single-head walkthrough."""

from __future__ import annotations

import numpy as np
import pytest

from explorer.core import worked_example
from explorer.core.checkpoint import load_checkpoint

# The article's printed matrices for "Today is sunday" (rounded to 3 decimals; some of its
# unscaled scores are off by up to 0.0012, so compare scores after scaling, as it printed them).
Q = [[0.694, 0.555, 0.236, -0.082], [0.877, -0.625, -0.57, -0.745], [0.984, 0.6, 0.264, -0.565]]
K = [[-0.409, -0.828, 0.788, -0.419], [0.863, 0.552, 0.022, 0.992], [0.164, 0.506, 0.283, -0.291]]
V = [[-0.373, -0.581, 0.068, -0.877], [-0.229, -0.712, -0.348, -0.073], [0.38, -0.246, -0.266, 0.453]]
SCALED = [[-0.262, 0.415, 0.243], [0.011, -0.17, -0.058], [-0.227, 0.313, 0.352]]
PATTERN = [[0.216, 0.426, 0.358], [0.361, 0.302, 0.337], [0.222, 0.381, 0.397]]
HEAD = [[-0.042, -0.517, -0.229, -0.058], [-0.076, -0.508, -0.17, -0.186], [-0.02, -0.498, -0.223, -0.043]]


@pytest.fixture(scope="module")
def trace():
    return load_checkpoint(worked_example.NAME, device="cpu").trace(worked_example.PROMPT)


def test_tokens_are_the_three_words(trace):
    assert trace.tokens == ("Today", "is", "sunday")
    assert trace.token_ids.tolist() == [0, 1, 2]


@pytest.mark.parametrize("key, expected", [("blocks.0.attn.q", Q), ("blocks.0.attn.k", K), ("blocks.0.attn.v", V)])
def test_projections_equal_the_article(trace, key, expected):
    np.testing.assert_allclose(trace[key][0], expected, atol=5e-4)


def test_scores_pattern_and_head_output_equal_the_article(trace):
    np.testing.assert_allclose(trace["blocks.0.attn.scores"][0], SCALED, atol=1e-3)
    np.testing.assert_allclose(trace["blocks.0.attn.pattern"][0], PATTERN, atol=1e-3)
    np.testing.assert_allclose(trace["blocks.0.attn.z"][0], HEAD, atol=1.5e-3)


def test_exact_arithmetic_by_hand(trace):
    """The same numbers computed from scratch with numpy, to float32 precision."""
    X = np.eye(4)[:3]
    q, k, v = X @ np.array(worked_example.W_Q), X @ np.array(worked_example.W_K), X @ np.array(worked_example.W_V)
    scores = q @ k.T / np.sqrt(4)
    pattern = np.exp(scores) / np.exp(scores).sum(1, keepdims=True)
    np.testing.assert_allclose(trace["blocks.0.attn.scores"][0], scores, atol=1e-6)
    np.testing.assert_allclose(trace["blocks.0.attn.pattern"][0], pattern, atol=1e-6)
    np.testing.assert_allclose(trace["blocks.0.attn.z"][0], pattern @ v, atol=1e-6)
    # no mask: an encoder attends in both directions
    assert (trace["blocks.0.attn.pattern"][0] > 0).all()


def test_unknown_word_is_a_clear_error():
    from explorer.core.errors import TokenizerError

    loaded = load_checkpoint(worked_example.NAME, device="cpu")
    with pytest.raises(TokenizerError, match="monday"):
        loaded.trace("Today is monday")
