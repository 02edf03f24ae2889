"""The rest of the app's core on mixture-of-experts models: the diagram's router / experts / shared boxes with
their shapes and live summaries, the tour's step through the chosen experts, compare, the timeline, steering."""

from __future__ import annotations

import numpy as np
from test_expert_analysis import IDS, loaded

from explorer.core.analysis.compare import compare_traces
from explorer.core.analysis.timeline import trace_at_step
from explorer.core.diagram.boxes import EXPERTS, build_diagram
from explorer.core.diagram.summaries import box_summary
from explorer.core.diagram.tour import tour_steps
from explorer.core.features.steering import steer
from explorer.core.interventions.spec import Intervention
from explorer.core.trace import CaptureSpec


def test_the_diagram_draws_router_experts_and_shared_expert_with_their_shapes():
    model = loaded()
    n = len(IDS)
    diagram = build_diagram(model.config, n)
    router, experts, shared = (diagram.box(f"L2.moe.{name}") for name in ("router", "experts", "shared"))
    assert (router.shape, experts.shape, shared.shape) == ((n, 6), (n, 2, 16), (n, 24))
    assert router.title == "Router → top 2 of 6 experts" and router.panel == experts.panel == EXPERTS
    assert any("renormalised" in line for line in router.details) and "d_model → 16 → d_model" in experts.details[0]
    assert diagram.box("L1.ffn.in").shape == (n, 48)                        # the dense layer between them
    trace = model.trace_ids(IDS)
    chosen = trace["blocks.2.moe.experts"][3]
    summary = box_summary(router, trace, 3)
    assert summary.text.startswith(f"experts {int(chosen[0])} (") and summary.value == trace["blocks.2.moe.weights"][3][0]
    assert box_summary(shared, trace, 3).text.startswith("‖x‖ = ")


def test_the_tour_steps_through_the_tokens_experts():
    model = loaded()
    trace = model.trace_ids(IDS)
    step = next(s for s in tour_steps(trace, 5, layer=2) if s.name == "ffn")
    experts, weights = trace["blocks.2.moe.experts"][5], trace["blocks.2.moe.weights"][5]
    assert step.values == {f"expert_{int(e)}": float(w) for e, w in zip(experts, weights)}
    assert step.panel == EXPERTS and "mixture of 6 experts" in step.text and any("beat" in line for line in step.lines)
    dense = next(s for s in tour_steps(trace, 5, layer=1) if s.name == "ffn")
    assert dense.title == "9. The FFN's strongest neurons"


def test_compare_timeline_and_steering_work_on_experts():
    model = loaded()
    base = model.trace_ids(IDS, CaptureSpec.full())
    off = model.trace_ids(IDS, CaptureSpec.full(), interventions=[Intervention("expert", 0, 1, "zero")])
    comparison = compare_traces(base, off)
    assert comparison.resid_cos.shape == (4, len(IDS)) and np.isfinite(comparison.logit_kl).all()
    assert comparison.resid_cos[0].min() > 0.9999                           # the embeddings are untouched
    prefix = trace_at_step(base, 8, 2)                                       # the first 10 tokens, cut
    short = model.trace_ids(IDS[:10], CaptureSpec.full())
    for key in ("blocks.2.moe.router_logits", "blocks.2.moe.experts", "blocks.2.mlp.out", "logits"):
        assert np.abs(np.asarray(prefix[key], np.float64) - short[key]).max() < 1e-5, key
    vector = np.random.default_rng(0).standard_normal(32).astype(np.float32)
    steered = model.trace_ids(IDS, CaptureSpec.full(), interventions=[steer(1, vector, 4.0)])
    assert not np.array_equal(steered["blocks.2.moe.experts"], base["blocks.2.moe.experts"]) or \
        np.abs(steered["blocks.2.moe.weights"] - base["blocks.2.moe.weights"]).max() > 1e-3
