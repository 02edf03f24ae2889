"""The tour's numbers are the Trace's: every step of "Follow this token" on the bundled shakespeare model, the
worked example and a Llama-shaped model (rotary, grouped K/V, RMSNorm, gated FFN)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from explorer.core import worked_example
from explorer.core.analysis.qk import qk_split
from explorer.core.checkpoint import load_checkpoint
from explorer.core.diagram.summaries import softmax
from explorer.core.diagram.tour import tour_steps

NAMES = ["tokens", "embedding", "position", "query", "score", "values", "residual", "norm", "ffn", "lens", "sampling"]


@pytest.fixture(scope="module")
def shakespeare():
    loaded = load_checkpoint("shakespeare", device="cpu")
    return loaded, loaded.trace("To be, or not to be, that is the question")


@pytest.fixture(scope="module")
def worked():
    loaded = load_checkpoint(worked_example.NAME, device="cpu")
    return loaded, loaded.trace(worked_example.PROMPT)


@pytest.fixture(scope="module")
def llama():
    from test_diagram import IDS, _tiny

    loaded = _tiny("llama")
    return loaded, loaded.trace_ids(IDS)


def _check_every_step(loaded, trace, t, layer, head):
    steps = tour_steps(trace, t, layer, head, loaded.tokenizer)
    assert [s.name for s in steps] == NAMES
    sentences = [len(re.split(r"(?<=[.!?)])\s+(?=[A-Z(])", s.text.strip())) for s in steps]
    assert all(s.token == t for s in steps) and all(2 <= k <= 3 for k in sentences), sentences
    by = {s.name: s for s in steps}
    cfg, p = trace.config, f"blocks.{layer}."
    assert by["tokens"].values["id"] == trace.token_ids[t]
    assert by["embedding"].values["norm"] == pytest.approx(float(np.linalg.norm(trace["embed"][t])), rel=1e-6)
    scores, pattern = trace.head(layer, head, "scores")[t], trace.head(layer, head, "pattern")[t]
    for key, value in by["query"].values.items():
        if key.startswith("score_"):
            assert value == scores[int(key[6:])]
    one = by["score"]
    j = int(one.values["j"])
    assert one.values["trace_score"] == scores[j] and one.values["trace_weight"] == pattern[j]
    # the score computed by hand (q·k, the scale, the bias, the cap) equals blocks.L.attn.scores[h, i, j]
    np.testing.assert_allclose(one.values["score"], trace[p + "attn.scores"][head, t, j], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(one.values["weight"], trace[p + "attn.pattern"][head, t, j], rtol=1e-5, atol=1e-7)
    assert (one.panel, one.layer, one.head) == ("attention", layer, head)
    # why it attends there: the largest term of the exact split, whose terms add up to the score before any cap
    split = qk_split(trace, layer, head, t, j)
    top = split.terms(1)[0]
    assert one.values["why_value"] == top.value and f"{top.label}, {top.value:+.4f}" in one.lines[-1]
    assert one.values["why_total"] == pytest.approx(float(split.score), rel=1e-4, abs=1e-5)
    z = trace[p + "attn.z"][head, t]
    np.testing.assert_allclose([by["values"].values[f"z{i}"] for i in range(min(4, z.size))], z[:4],
                               rtol=1e-5, atol=1e-6)
    res = by["residual"].values
    np.testing.assert_allclose(res["sum_norm"], res["trace_mid_norm"], rtol=1e-5)
    norm = by["norm"].values
    if "var" in norm:
        np.testing.assert_allclose([norm["mean"], norm["var"]], [norm["computed_mean"], norm["computed_var"]],
                                   rtol=1e-4, atol=1e-6)
    elif "mean_square" in norm:
        np.testing.assert_allclose(norm["mean_square"], norm["computed_mean_square"], rtol=1e-4)
    post = trace[p + "mlp.post"][t] if cfg.has_ffn else None
    for key, value in by["ffn"].values.items():
        assert value == post[int(key[7:])] and value >= np.sort(post)[-3]
    probs = softmax(trace["logits"][t])
    assert by["lens"].values["top_prob"] == pytest.approx(float(probs.max()))
    assert by["sampling"].values["greedy_id"] == int(np.argmax(probs))
    return by


def test_every_step_on_shakespeare_equals_the_trace(shakespeare):
    loaded, trace = shakespeare
    by = _check_every_step(loaded, trace, 6, 2, 1)
    assert "position 6 vector" in by["position"].lines[0]
    assert by["position"].values["norm"] == pytest.approx(float(np.linalg.norm(trace["pos_embed"][6])), rel=1e-6)
    assert by["lens"].lines and by["lens"].lines[-1].startswith("output: ")
    assert by["norm"].title == "8. The norm (LayerNorm)" and len(by["ffn"].values) == 3


def test_the_worked_example_reproduces_the_articles_hand_computation(worked):
    loaded, trace = worked
    by = _check_every_step(loaded, trace, 0, 0, 0)
    # "Today" against its strongest key: the article's scaled score row is [-0.262, 0.415, 0.243]
    assert by["score"].values["j"] == 1
    assert by["score"].values["score"] == pytest.approx(0.415, abs=2e-3)
    assert by["score"].values["scale"] == pytest.approx(0.5)
    assert by["norm"].values == {} and by["ffn"].values == {}  # no norm, no FFN: the steps say so
    assert "encoder" in by["position"].text


def test_every_step_on_a_llama_shaped_model_equals_the_trace(llama):
    loaded, trace = llama
    by = _check_every_step(loaded, trace, 5, 1, 3)
    assert "rad" in by["position"].lines[0] and by["norm"].title == "8. The norm (RMSNorm)"
