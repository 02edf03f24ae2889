"""The per-layer plan: each block's mixer, attention reach, rotary and FFN kind, read from flat config keys.

What a user sees: a configuration whose layers differ (sliding, chunked, without rotary, dense or mixture
of experts) builds a model whose every layer does what its plan says, whose cached generation equals the
whole pass, whose trace derives every layer's scores and block internals as the forward pass computed them,
and whose configuration is still flat keys on disk.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from explorer.core.checkpoint.validate import parameter_count
from explorer.core.config import ModelConfig
from explorer.core.errors import CheckpointError
from explorer.core.generation.generate import generate
from explorer.core.generation.sampling import SamplingParams
from explorer.core.loaded import LoadedModel
from explorer.core.model import Transformer, causal_mask
from explorer.core.tokenize.base import VocabTokenizer
from explorer.core.trace import CaptureSpec

BASE = dict(arch="mixed", vocab_size=40, n_ctx=64, d_model=32, n_layers=6, n_heads=4, n_kv_heads=2, d_head=8,
            d_ff=48, norm="rmsnorm", positions="rotary", gated_ffn=True, activation="silu", attn_bias=False,
            mlp_bias=False, tie_embeddings=False)
# every per-layer fact at once: a sliding layer, two chunked ones, NoPE layers with Llama 4's temperature,
# q/k norms only where the rotary is, and mixtures of experts (one with a shared expert) between dense FFNs
MIXED = dict(BASE, sliding_window=3, sliding_layers=(1,), attention_chunk=4, chunked_layers=(2, 4),
             nope_layers=(3, 5), attn_temperature=0.5, attn_temperature_floor=4.0, qk_norm="head_unscaled",
             qk_norm_layers=(0, 1, 2, 4), moe_layers=(1, 3, 4), n_experts=6, experts_per_token=2, d_expert=16,
             d_shared=24, moe_norm_topk=True)
IDS = [3, 17, 5, 29, 11, 2, 38, 7, 7, 21, 14, 33, 9]


def spread(model: torch.nn.Module, seed: int = 0) -> None:
    """Unit-scale random weights (the experts' banks start at zero), norms near 1."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "ln" in name or "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[-1]))


def loaded(cfg: ModelConfig) -> LoadedModel:
    model = Transformer(cfg).eval()
    spread(model)
    tokenizer = VocabTokenizer([f"w{i}" for i in range(cfg.vocab_size)], split="words", name="words")
    return LoadedModel(model, tokenizer, "mixed", "test", "mixed")


def test_the_plan_reads_each_layers_facts_from_the_flat_keys():
    cfg = ModelConfig(**MIXED)
    kinds = [(p.attention, p.window, p.rotary, p.temperature, p.qk_norm, p.ffn) for p in cfg.plan]
    assert kinds == [("full", None, True, False, "head_unscaled", "dense"),
                     ("sliding", 3, True, False, "head_unscaled", "moe"),
                     ("chunked", 4, True, False, "head_unscaled", "dense"),
                     ("full", None, False, True, "none", "moe"),
                     ("chunked", 4, True, False, "head_unscaled", "moe"),
                     ("full", None, False, True, "none", "dense")]
    assert [p.d_ff for p in cfg.plan] == [48, 0, 48, 0, 0, 48] and cfg.layer(3) is cfg.plan[3]
    assert cfg.layer(1).describe() == "layer 1: sliding attention (window 3), mixture of experts"
    assert cfg.layer(3).describe() == "layer 3: full attention, no rotary, mixture of experts"


def test_the_configuration_stays_flat_keys_and_round_trips():
    cfg = ModelConfig(**MIXED)
    data = json.loads(cfg.to_json())
    assert all(not isinstance(v, dict) for v in data.values())     # flat: no nested sections on disk
    assert data["moe_layers"] == [1, 3, 4] and data["chunked_layers"] == [2, 4] and data["nope_layers"] == [3, 5]
    again = ModelConfig.from_dict(data)
    assert again == cfg and again.plan == cfg.plan


def test_a_plain_config_plans_the_same_block_everywhere():
    cfg = ModelConfig(**dict(BASE, sliding_window=4, sliding_layers=(0, 2), rotary_base_local=10.0))
    assert {(p.rotary, p.ffn, p.d_ff, p.qk_norm) for p in cfg.plan} == {(True, "dense", 48, "none")}
    assert [p.attention for p in cfg.plan] == ["sliding", "full", "sliding", "full", "full", "full"]
    assert [p.local_rope for p in cfg.plan] == [True, False, True, False, False, False]  # Gemma 3's local base


@pytest.mark.parametrize("bad, message", [
    (dict(chunked_layers=(1,)), "chunked_layers need attention_chunk"),
    (dict(attention_chunk=4, chunked_layers=(1,), sliding_window=2, sliding_layers=(1,)), "both sliding and chunked"),
    (dict(nope_layers=(6,)), "nope_layers must name layers 0..5"),
    (dict(layer_mixers=("attention",) * 5), "one mixer per layer"),
    (dict(layer_mixers=("attention",) * 5 + ("lstm",)), "layer_mixers must be among"),
    (dict(moe_layers=(0,), n_experts=4, experts_per_token=5, d_expert=8), "experts_per_token (5) <= n_experts (4)"),
    (dict(moe_layers=(0,), n_experts=6, experts_per_token=2, d_expert=8, moe_groups=4), "must split into moe_groups"),
    (dict(moe_layers=(0,), n_experts=4, experts_per_token=3, d_expert=8, moe_router="sparsemixer"), "chooses 2"),
    (dict(moe_layers="0"), "moe_layers must be a list of layer numbers"),
])
def test_an_inconsistent_plan_is_one_clear_line(bad, message):
    with pytest.raises(CheckpointError, match="invalid model configuration") as info:
        ModelConfig(**{**BASE, **bad})
    assert message in str(info.value)


def test_a_mixer_without_its_shapes_is_refused_in_one_line():
    with pytest.raises(CheckpointError, match="deltanet layers need delta_k_heads, delta_v_heads"):
        ModelConfig(**dict(BASE, layer_mixers=("attention", "deltanet") + ("attention",) * 4))
    cfg = ModelConfig(**dict(BASE, layer_mixers=("attention", "deltanet") + ("attention",) * 4, delta_k_heads=2,
                             delta_v_heads=4, delta_d_k=8, delta_d_v=8))
    assert cfg.layer(1).mixer == "deltanet" and cfg.layer(1).is_recurrent
    assert Transformer(cfg).blocks[1].mixer is not None


def test_chunked_mask_keeps_each_query_in_its_own_block():
    mask = causal_mask(6, 6, chunk=3)
    sees = [[j for j in range(6) if not mask[i, j]] for i in range(6)]
    assert sees == [[0], [0, 1], [0, 1, 2], [3], [3, 4], [3, 4, 5]]
    step = causal_mask(1, 5, chunk=3)          # the 5th token (position 4) with a cache of 4: block 3..5
    assert [j for j in range(5) if not step[0, j]] == [3, 4]


def test_parameter_count_follows_the_plan():
    cfg = ModelConfig(**MIXED)
    assert parameter_count(cfg) == Transformer(cfg).num_parameters()
    dense = ModelConfig(**BASE)
    assert parameter_count(cfg) != parameter_count(dense)


def test_every_layer_runs_as_planned_and_the_cache_gives_the_same_tokens():
    model = loaded(ModelConfig(**MIXED))
    full = model.trace_ids(IDS, CaptureSpec.everything())
    # the NoPE layers' q is the unrotated projection times the temperature; the others turn
    assert "blocks.3.attn.q_norm.mean_square" not in full and "blocks.2.attn.q_norm.mean_square" in full
    for layer, kind in ((2, "chunked"), (1, "sliding")):
        pattern = full[f"blocks.{layer}.attn.pattern"]
        reach = 4 if kind == "chunked" else 3
        for i in range(len(IDS)):
            visible = np.nonzero(pattern[0, i] > 0)[0]
            lowest = (i // reach) * reach if kind == "chunked" else max(0, i - reach + 1)
            assert visible.min() >= lowest and visible.max() == i
    params = SamplingParams(temperature=0.0, max_new_tokens=8, stop_at_eos=False)
    cached = generate(model, IDS, params, use_cache=True).token_ids
    assert cached == generate(model, IDS, params, use_cache=False).token_ids


def test_a_compact_trace_derives_every_layer_as_the_forward_pass_computed_it():
    model = loaded(ModelConfig(**MIXED))
    full = model.trace_ids(IDS, CaptureSpec.everything())
    compact = model.trace_ids(IDS, CaptureSpec.compact())
    for layer in range(6):
        for head in range(4):
            assert np.abs(compact.head(layer, head) - full[f"blocks.{layer}.attn.pattern"][head]).max() < 1e-6
        for site in ("attn.z", "attn.out", "mlp.out"):
            key = f"blocks.{layer}.{site}"
            assert np.abs(compact[key] - full[key]).max() < 1e-5, key
    assert "blocks.0.mlp.post" in compact and "blocks.1.mlp.post" not in compact       # dense vs experts
    assert "blocks.1.moe.router_logits" in compact and "blocks.0.moe.router_logits" not in compact


def test_latent_attention_decodes_with_the_cache_as_the_whole_pass():
    cfg = ModelConfig(**dict(BASE, n_kv_heads=None, d_head=10, rotary_dim=4, d_head_v=6, kv_lora_rank=8,
                             q_lora_rank=12, moe_layers=(2, 3), n_experts=4, experts_per_token=2, d_expert=16,
                             moe_router="sigmoid_topk", moe_choice_bias=True, moe_groups=2, moe_topk_groups=1,
                             moe_norm_topk=True, moe_scale=2.5, d_shared=16))
    model = loaded(cfg)
    full = model.trace_ids(IDS, CaptureSpec.everything())
    assert full["blocks.0.attn.q"].shape == (4, len(IDS), 10) and full["blocks.0.attn.v"].shape == (4, len(IDS), 6)
    assert full["blocks.0.attn.z"].shape == (4, len(IDS), 6)
    compact = model.trace_ids(IDS, CaptureSpec.compact())
    assert np.abs(compact.head(1, 2) - full["blocks.1.attn.pattern"][2]).max() < 1e-6
    params = SamplingParams(temperature=0.0, max_new_tokens=8, stop_at_eos=False)
    assert generate(model, IDS, params, use_cache=True).token_ids == generate(model, IDS, params,
                                                                              use_cache=False).token_ids
