"""A mixture of experts' trace keys: stored, derived on demand (exactly), sized, and exported under
TransformerLens' names."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from decoder_reference import IDS, build, save_and_open
from moe_reference import EAGER

from explorer.core.interop import read_trace_safetensors, write_trace_safetensors
from explorer.core.moe import glu
from explorer.core.trace import CaptureSpec, estimate_nbytes

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def qwen2(tmp_path_factory):
    model = build("Qwen2MoeConfig", "Qwen2MoeForCausalLM", num_hidden_layers=3, num_key_value_heads=2, num_experts=6,
                  num_experts_per_tok=2, moe_intermediate_size=24, shared_expert_intermediate_size=40,
                  mlp_only_layers=[1], **EAGER)
    return save_and_open(model, tmp_path_factory.mktemp("qwen2moe"))


def test_the_routing_keys_of_every_moe_layer(qwen2):
    trace = qwen2.trace_ids(IDS)
    n = len(IDS)
    for layer in (0, 2):
        key = f"blocks.{layer}.moe"
        assert trace[f"{key}.router_logits"].shape == (n, 6) and trace[f"{key}.experts"].dtype == np.int64
        assert np.allclose(trace[f"{key}.probs"].sum(-1), 1.0, atol=1e-6)
        top = np.argsort(-trace[f"{key}.choice"], axis=1, kind="stable")[:, :2]
        assert np.array_equal(np.sort(top, 1), np.sort(trace[f"{key}.experts"], 1))
        chosen = np.take_along_axis(trace[f"{key}.probs"], trace[f"{key}.experts"], axis=1)
        assert np.abs(chosen - trace[f"{key}.weights"]).max() < 1e-6        # Qwen2-MoE: not renormalised
    assert "blocks.1.mlp.post" in trace and "blocks.1.moe.experts" not in trace        # the dense layer


def test_each_chosen_experts_output_is_derived_exactly(qwen2):
    trace = qwen2.trace_ids(IDS)                                      # the full capture stores no expert outputs
    assert "blocks.2.moe.expert_out" not in trace.stored_keys() and "blocks.2.moe.expert_out" in trace
    per_expert = trace["blocks.2.moe.expert_out"]                     # derived by re-running block 2
    assert per_expert.shape == (len(IDS), 2, 64)
    total = per_expert.sum(1) + trace["blocks.2.moe.shared_out"]
    assert np.abs(total - trace["blocks.2.mlp.out"]).max() < 1e-5
    # token 4's first expert, by hand from the block's normed input and the bank's weights
    model, token = qwen2.model, 4
    e, w = int(trace["blocks.2.moe.experts"][token, 0]), float(trace["blocks.2.moe.weights"][token, 0])
    x = torch.from_numpy(np.array(trace["blocks.2.resid_mid"][token]))
    with torch.no_grad():
        h = model.blocks[2].ln2(x)
        bank = model.blocks[2].moe.experts
        y = bank.W_out[e] @ glu(qwen2.config, bank.W_gate[e] @ h, bank.W_in[e] @ h)
    assert np.abs(w * y.numpy() - per_expert[token, 0]).max() < 1e-5


def test_the_size_estimate_counts_the_routing_keys(qwen2):
    for spec in (CaptureSpec.full(), CaptureSpec.compact(), CaptureSpec.everything()):
        trace = qwen2.trace_ids(IDS, spec)
        assert estimate_nbytes(qwen2.config, len(IDS), spec) == trace.nbytes - trace.token_ids.nbytes


def test_the_export_names_the_routing_as_transformerlens_does(qwen2, tmp_path):
    trace = qwen2.trace_ids(IDS)
    path = write_trace_safetensors(trace, tmp_path / "trace.safetensors", prompt="p")
    from safetensors import safe_open

    with safe_open(str(path), framework="numpy") as f:
        names = set(f.keys())
        scores = f.get_tensor("blocks.2.mlp.hook_router_scores")[0]
        indices = f.get_tensor("blocks.2.mlp.hook_expert_indices")
    assert {"blocks.0.mlp.gate.hook_out", "blocks.0.mlp.hook_expert_weights", "blocks.0.mlp.hook_expert_indices",
            "blocks.0.mlp.shared_experts.hook_out", "explorer.blocks.0.moe.probs"} <= names
    assert "blocks.1.mlp.gate.hook_out" not in names and "blocks.1.mlp.hook_post" in names
    assert indices.dtype == np.int64 and indices.shape == (1, len(IDS), 2)
    weights = trace["blocks.2.moe.weights"]
    assert np.allclose(np.take_along_axis(scores, trace["blocks.2.moe.experts"], 1), weights)
    assert np.allclose(scores.sum(1), weights.sum(1))              # zero at the experts not chosen
    back = read_trace_safetensors(path)
    for key in ("blocks.0.moe.router_logits", "blocks.0.moe.weights", "blocks.0.moe.experts", "blocks.0.moe.probs",
                "blocks.2.moe.shared_out"):
        assert np.array_equal(back[key], trace[key]), key


def test_trace_npz_carries_the_routing_and_no_neurons_for_expert_layers(qwen2, tmp_path):
    from explorer.core.export import write_trace_npz

    trace = qwen2.trace_ids(IDS)
    write_trace_npz(trace, tmp_path / "trace.npz")
    data = np.load(tmp_path / "trace.npz")
    assert data["mlp_activations"].shape == (3, len(IDS), qwen2.config.d_ff)
    assert np.isnan(data["mlp_activations"][0]).all() and np.isfinite(data["mlp_activations"][1]).all()
    assert list(data["moe_layers"]) == [0, 2] and data["moe_experts"].shape == (2, len(IDS), 2)
    assert np.array_equal(data["moe_experts"][1], trace["blocks.2.moe.experts"])
    assert np.allclose(data["moe_weights"][0], trace["blocks.0.moe.weights"])
