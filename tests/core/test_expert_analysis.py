"""The pure functions an Experts view draws: routing map, lanes, load, the top-k margin and its warning, each
expert's direct effect on a logit, and expert-level attribution patching."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from explorer.core.analysis.dla import direct_logit_attribution
from explorer.core.analysis.experts import (
    close_calls,
    expert_load,
    expert_logit_effects,
    flip_tolerance,
    lanes,
    load_by_layer,
    routing_map,
    topk_margin,
)
from explorer.core.config import ModelConfig
from explorer.core.interventions.apply import run
from explorer.core.interventions.expert_attribution import expert_attribution
from explorer.core.interventions.spec import Intervention
from explorer.core.loaded import LoadedModel
from explorer.core.model import Transformer
from explorer.core.tokenize.base import VocabTokenizer

SHAPE = dict(arch="moe", vocab_size=40, n_ctx=64, d_model=32, n_layers=3, n_heads=4, d_head=8, d_ff=48,
             norm="rmsnorm", positions="rotary", gated_ffn=True, activation="silu", attn_bias=False, mlp_bias=False,
             tie_embeddings=False, moe_layers=(0, 2), n_experts=6, experts_per_token=2, d_expert=16, d_shared=24,
             moe_norm_topk=True)
IDS = [3, 17, 5, 29, 11, 2, 38, 7, 7, 21, 14, 33, 9]
CORRUPT = [3, 17, 5, 29, 11, 2, 38, 4, 7, 21, 30, 33, 9]


def loaded(seed: int = 0, **overrides) -> LoadedModel:
    model = Transformer(ModelConfig(**{**SHAPE, **overrides})).eval()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            scale = 0.1 if ("ln" in name or "norm" in name) else 1 / math.sqrt(p.shape[-1])
            p.copy_((1.0 if scale == 0.1 else 0.0) + scale * torch.randn(p.shape, generator=gen))
    return LoadedModel(model, VocabTokenizer([f"w{i}" for i in range(40)], split="words"), "moe", "test", "moe")


@pytest.fixture(scope="module")
def moe():
    return loaded()


def test_routing_map_lanes_and_load_agree(moe):
    trace = moe.trace_ids(IDS)
    routing = routing_map(trace, 2)
    assert routing.weights.shape == (len(IDS), 6) and (routing.chosen.sum(1) == 2).all()
    assert np.allclose(routing.weights.sum(1), 1.0, atol=1e-6) and (routing.weights[~routing.chosen] == 0).all()
    lane = lanes(trace, 4)
    assert [entry.layer for entry in lane] == [0, 2]
    assert set(lane[1].experts) == set(np.nonzero(routing.chosen[4])[0].tolist())
    load = expert_load(trace, 2)
    assert load.tokens.sum() == 2 * len(IDS) and np.isclose(load.share.sum(), 1.0)
    assert np.allclose(load.weight, routing.weights.sum(0))
    assert load_by_layer(trace).shape == (2, 6)
    with pytest.raises(ValueError, match="layer 1 is not a mixture of experts"):
        routing_map(trace, 1)


def test_a_router_built_to_tie_gives_the_close_call_warning():
    tied = loaded(experts_per_token=1)
    with torch.no_grad():
        for layer in (0, 2):
            router = tied.model.blocks[layer].moe.router.weight
            router[1] = router[0]          # experts 0 and 1 always score the same ...
            router[2:] = 0.0               # ... and the others all 0: every token's first and second tie
    trace = tied.trace_ids(IDS)
    margin = topk_margin(trace, 0)
    assert (margin.margin <= 1e-6).all() and close_calls(trace, 0).all() and close_calls(trace, 2).all()
    clear = loaded(experts_per_token=1).trace_ids(IDS)   # a random router: no token is that close
    assert topk_margin(clear, 0).margin.min() > 1e-4 and not close_calls(clear, 0).any()
    # in bfloat16 the same margins would be within rounding for some tokens
    assert flip_tolerance("bfloat16", 1.0) > flip_tolerance("float32", 1.0) * 1000


def test_each_experts_direct_effect_adds_up_to_the_layers_ffn_term(moe):
    trace = moe.trace_ids(IDS)
    target = int(np.argmax(trace["logits"][-1]))
    dla = direct_logit_attribution(trace, target, -1, distractor=5)
    assert abs(dla.total - dla.logit) < 1e-3                             # the DLA holds on the MoE layers
    effects = expert_logit_effects(trace, target, -1, distractor=5)
    assert [e.layer for e in effects] == [0, 2]
    for entry in effects:
        assert abs(entry.effects.sum() + entry.shared - entry.total) < 1e-4
        assert abs(entry.total - dla.mlp[entry.layer]) < 1e-4
        assert entry.experts == tuple(int(e) for e in trace[f"blocks.{entry.layer}.moe.experts"][-1])


def test_expert_attribution_is_the_first_order_effect_of_patching_an_experts_outputs(moe):
    target, distractor, position = 12, 5, len(IDS) - 1
    result = expert_attribution(moe.model, IDS, CORRUPT, target, distractor, position)
    assert result.estimates.shape == (2, 6) and result.layers == (0, 2)
    clean, corrupt = moe.trace_ids(IDS), moe.trace_ids(CORRUPT)
    gap = result.clean_metric - result.corrupt_metric
    base = run(moe.model, CORRUPT)[position].double()
    m_corrupt = float(base[target] - base[distractor])
    assert abs(m_corrupt - result.corrupt_metric) < 1e-4
    checked = 0
    for row, layer in enumerate(result.layers):
        for expert in range(6):
            delta = np.zeros((len(IDS), 32))
            for trace, sign in ((clean, 1.0), (corrupt, -1.0)):
                out, experts = trace[f"blocks.{layer}.moe.expert_out"], trace[f"blocks.{layer}.moe.experts"]
                delta += sign * (out * (experts == expert)[..., None]).sum(1)
            if np.abs(delta).max() < 1e-6:
                assert result.estimates[row, expert] == 0.0
                continue
            eps = 1e-2   # a small step along the patch: the finite difference is the estimate's first-order term
            patched = corrupt[f"blocks.{layer}.mlp.out"] + eps * delta
            logits = run(moe.model, CORRUPT, [Intervention("mlp", layer, mode="patch", value=patched)])[position]
            slope = (float(logits[target] - logits[distractor]) - m_corrupt) / eps / gap
            assert abs(slope - result.estimates[row, expert]) < 0.02 * max(1.0, abs(slope)), (layer, expert)
            checked += 1
    assert checked >= 6
