"""Expert interventions against transformers: an expert switched off, forced, or its router logit scaled.

Switching expert E of layer L off equals transformers with that expert's router column forced to -inf (the
router's output patched where transformers computes it): the token's experts are drawn from the rest and
their weights renormalise as the family's code does. For DeepSeek-V3's sigmoid router, whose choice adds a
bias, the reference also gets -inf for that expert's bias (so it cannot be chosen at weight 0).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from decoder_reference import IDS, build, reference_greedy, save_and_open
from moe_reference import EAGER, routers

from explorer.core.generation.generate import generate
from explorer.core.generation.sampling import SamplingParams
from explorer.core.interventions.apply import run
from explorer.core.interventions.spec import Intervention, InterventionError, check, parse_spec
from explorer.core.trace import CaptureSpec

pytest.importorskip("transformers")
TOL = 1e-4


def patch_router(monkeypatch, model, moe_index: int, expert: int, change, positions=None) -> None:
    """transformers' router of its ``moe_index``-th MoE layer computes its logits, then ``change`` is applied
    to ``expert``'s column (at ``positions``, or every token)."""
    target = routers(model)[moe_index].weight
    linear = torch.nn.functional.linear

    def patched(x, weight, bias=None):
        out = linear(x, weight, bias)
        if weight is target:
            out = out.clone()
            rows = slice(None) if positions is None else list(positions)
            out[..., rows, expert] = change(out[..., rows, expert])
        return out

    monkeypatch.setattr(torch.nn.functional, "linear", patched)


def reference_logits(model, ids=IDS) -> np.ndarray:
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].numpy()


def minus_inf(column):
    return torch.full_like(column, float("-inf"))


@pytest.fixture(scope="module")
def mixtral(tmp_path_factory):
    model = build("MixtralConfig", "MixtralForCausalLM", num_hidden_layers=3, num_key_value_heads=2,
                  num_local_experts=6, num_experts_per_tok=2, **EAGER)
    return model, save_and_open(model, tmp_path_factory.mktemp("mixtral"))


def test_an_expert_off_equals_its_router_column_at_minus_infinity(mixtral, monkeypatch):
    model, loaded = mixtral
    before = loaded.trace_ids(IDS)
    used = np.unique(before["blocks.1.moe.experts"])
    expert = int(used[0])                                        # an expert some tokens chose
    off = [Intervention("expert", 1, expert, "zero")]
    ours = run(loaded.model, IDS, off).numpy()
    baseline = reference_logits(model)
    patch_router(monkeypatch, model, 1, expert, minus_inf)
    theirs = reference_logits(model)
    assert np.abs(theirs - baseline).max() > 1e-3                 # switching it off changes the logits
    assert np.abs(ours - theirs).max() <= TOL
    after = loaded.trace_ids(IDS, interventions=off)
    assert expert not in after["blocks.1.moe.experts"]
    assert np.allclose(after["blocks.1.moe.weights"].sum(-1), 1.0, atol=1e-6)   # renormalised over the rest
    params = SamplingParams(temperature=0.0, max_new_tokens=6, stop_at_eos=False)
    steps = generate(loaded, IDS, params, interventions=off).token_ids
    assert steps == reference_greedy(model, IDS, 6)               # the patch holds for every generated token


def test_an_expert_off_at_one_token_only(mixtral, monkeypatch):
    model, loaded = mixtral
    before = loaded.trace_ids(IDS)
    expert = int(before["blocks.2.moe.experts"][5, 0])             # token 5's first choice in layer 2
    off = [Intervention("expert", 2, expert, "zero", positions=(5,))]
    ours = run(loaded.model, IDS, off).numpy()
    patch_router(monkeypatch, model, 2, expert, minus_inf, positions=[5])
    assert np.abs(ours - reference_logits(model)).max() <= TOL
    after = loaded.trace_ids(IDS, interventions=off)
    assert expert not in after["blocks.2.moe.experts"][5]
    assert np.array_equal(after["blocks.2.moe.experts"][:5], before["blocks.2.moe.experts"][:5])


def test_a_scaled_router_logit_equals_the_scaled_column(mixtral, monkeypatch):
    model, loaded = mixtral
    ours = run(loaded.model, IDS, [Intervention("expert", 0, 3, "scale", amount=2.5)]).numpy()
    patch_router(monkeypatch, model, 0, 3, lambda column: column * 2.5)
    assert np.abs(ours - reference_logits(model)).max() <= TOL


def test_a_forced_expert_joins_every_tokens_top_k_with_its_own_weight(mixtral):
    _, loaded = mixtral
    forced = loaded.trace_ids(IDS, CaptureSpec.full(), interventions=[Intervention("expert", 1, 4, "force")])
    experts, weights = forced["blocks.1.moe.experts"], forced["blocks.1.moe.weights"]
    assert (experts == 4).any(axis=1).all()
    logits = forced["blocks.1.moe.router_logits"].astype(np.float64)
    chosen = np.take_along_axis(logits, experts, axis=1)           # Mixtral: the softmax of the chosen two
    expected = np.exp(chosen - chosen.max(1, keepdims=True))
    assert np.abs(weights - expected / expected.sum(1, keepdims=True)).max() < 1e-5


@pytest.mark.parametrize("family", ["qwen2_moe", "gpt_oss", "phimoe"])
def test_off_against_the_reference_in_other_routers(family, tmp_path, monkeypatch):
    config, cls, kw = {
        "qwen2_moe": ("Qwen2MoeConfig", "Qwen2MoeForCausalLM", dict(num_experts=6, moe_intermediate_size=24,
                                                                    shared_expert_intermediate_size=40)),
        "gpt_oss": ("GptOssConfig", "GptOssForCausalLM", dict(num_local_experts=6, head_dim=16, sliding_window=4)),
        "phimoe": ("PhimoeConfig", "PhimoeForCausalLM", dict(num_local_experts=6, router_jitter_noise=0.3)),
    }[family]
    model = build(config, cls, num_key_value_heads=2, num_experts_per_tok=2, **kw, **EAGER)
    loaded = save_and_open(model, tmp_path)
    expert = int(loaded.trace_ids(IDS)["blocks.1.moe.experts"][3, 0])
    ours = run(loaded.model, IDS, [Intervention("expert", 1, expert, "zero")]).numpy()
    patch_router(monkeypatch, model, 1, expert, minus_inf)
    assert np.abs(ours - reference_logits(model)).max() <= TOL


def test_off_in_deepseek_v3s_biased_sigmoid_router(tmp_path, monkeypatch):
    model = build("DeepseekV3Config", "DeepseekV3ForCausalLM", n_routed_experts=8, num_experts_per_tok=2,
                  moe_intermediate_size=24, n_shared_experts=1, first_k_dense_replace=0, n_group=2, topk_group=1,
                  kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=12, num_key_value_heads=4,
                  q_lora_rank=None, **EAGER)
    with torch.no_grad():
        for m in model.modules():
            if hasattr(m, "e_score_correction_bias"):
                m.e_score_correction_bias.copy_(torch.linspace(0.4, -0.4, 8))
    loaded = save_and_open(model, tmp_path)
    expert = int(loaded.trace_ids(IDS)["blocks.0.moe.experts"][2, 0])
    ours = run(loaded.model, IDS, [Intervention("expert", 0, expert, "zero")]).numpy()
    patch_router(monkeypatch, model, 0, expert, minus_inf)
    with torch.no_grad():
        routers(model)[0].e_score_correction_bias[expert] = float("-inf")
    assert np.abs(ours - reference_logits(model)).max() <= TOL


def test_the_ablate_grammar_reads_expert_interventions(mixtral):
    _, loaded = mixtral
    off, forced, scaled = parse_spec("expert1:4"), parse_spec("expert2:0:force@3,5"), parse_spec("expert0:5:x0.5")
    assert (off.target, off.layer, off.index, off.mode, off.positions) == ("expert", 1, 4, "zero", None)
    assert (forced.mode, forced.positions) == ("force", (3, 5)) and (scaled.mode, scaled.amount) == ("scale", 0.5)
    assert [iv.label for iv in (off, forced, scaled)] == ["expert 1:4 off", "expert 2:0@3,5 force",
                                                          "expert 0:5 logit x0.5"]
    check([off, forced, scaled], loaded.config)
    with pytest.raises(InterventionError, match="expert 9 is outside 0-5"):
        check([parse_spec("expert1:9")], loaded.config)
    with pytest.raises(InterventionError, match="not mean-ablated"):
        parse_spec("expert1:2", "mean")
    with pytest.raises(InterventionError, match="mixture of experts"):
        check([parse_spec("mlp1:3")], loaded.config)
