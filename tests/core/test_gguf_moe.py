"""Mixture-of-experts GGUF files (llama.cpp's layout, written at test time) against transformers.

Each file is a tiny transformers MoE model written as llama.cpp's converter writes it (``tests/gguf_moe_files.py``:
three 3-D expert banks per layer, the banks in a quantised type). Where transformers reads the architecture
from GGUF (qwen2moe, qwen3moe) the reference is its own ``from_pretrained(dir, gguf_file=...)``, through
``verify`` (token ids equal, logits <= 1e-4) and ``moe_reference.check_moe`` (logits, patterns, router logits,
chosen experts and weights, greedy tokens). Where it does not (gpt-oss, OLMoE, a Llama file with experts, Qwen
files whose experts' widths are not transformers' defaults) the reference is the transformers model holding the file's weights (its
expert banks set to the numbers their blocks stand for).

Kept quantised (``weights="keep"``), each bank is one packed tensor expanded an expert at a time, only for the
experts some token chose, and every number of the trace and the greedy tokens equal the fully dequantised load's.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from decoder_reference import IDS, build, ours_greedy  # noqa: E402
from gguf_files import byte_vocabulary, from_transformers  # noqa: E402
from gguf_moe_files import settle_experts, write_moe_model  # noqa: E402
from moe_reference import EAGER, check_moe  # noqa: E402

from explorer.core.budget import global_budget  # noqa: E402
from explorer.core.checkpoint import load_checkpoint  # noqa: E402
from explorer.core.errors import CheckpointError  # noqa: E402
from explorer.core.interventions.spec import parse_spec  # noqa: E402
from explorer.core.quant.packed import Packed, packed_weights  # noqa: E402
from explorer.core.trace import CaptureSpec  # noqa: E402

transformers = pytest.importorskip("transformers")

MODELS = {
    "mixtral": ("MixtralConfig", "MixtralForCausalLM", dict(num_key_value_heads=2, num_local_experts=4,
                                                            num_experts_per_tok=2)),
    "olmoe": ("OlmoeConfig", "OlmoeForCausalLM", dict(num_key_value_heads=2, num_experts=8, num_experts_per_tok=2,
                                                      intermediate_size=32, clip_qkv=1.5)),
    "gpt_oss": ("GptOssConfig", "GptOssForCausalLM", dict(num_key_value_heads=2, num_local_experts=4,
                                                          num_experts_per_tok=2, head_dim=16, sliding_window=4)),
    "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM", dict(
        num_hidden_layers=3, num_key_value_heads=2, head_dim=16, num_experts=8, num_experts_per_tok=3,
        moe_intermediate_size=32, norm_topk_prob=True)),
    "qwen2_moe": ("Qwen2MoeConfig", "Qwen2MoeForCausalLM", dict(
        num_key_value_heads=2, num_experts=6, num_experts_per_tok=2, moe_intermediate_size=32,
        shared_expert_intermediate_size=64, norm_topk_prob=False)),
    # the experts' widths transformers' GGUF loading assumes (it does not read expert_feed_forward_length)
    "qwen3_moe_tf": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM", dict(
        num_key_value_heads=2, head_dim=16, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=768,
        norm_topk_prob=True)),
    "qwen2_moe_tf": ("Qwen2MoeConfig", "Qwen2MoeForCausalLM", dict(
        num_key_value_heads=2, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=1408,
        shared_expert_intermediate_size=5632)),
}
ARCH = {"mixtral": "mixtral", "olmoe": "olmoe", "gpt_oss": "gpt_oss", "qwen3_moe": "qwen3_moe",
        "qwen2_moe": "qwen2_moe", "qwen3_moe_tf": "qwen3_moe", "qwen2_moe_tf": "qwen2_moe"}


def moe_file(tmp_path: Path, name: str, qtype: str, experts: str, tokenizer=None):
    """(the transformers model holding the file's numbers, the GGUF file)."""
    config, cls, overrides = MODELS[name]
    model = build(config, cls, **overrides, **EAGER)
    settle_experts(model, experts)
    return model, write_moe_model(model, tmp_path / f"{name}-{experts}.gguf", qtype, experts, tokenizer)


@pytest.mark.parametrize(("name", "experts"), [("mixtral", "Q8_0"), ("olmoe", "Q4_0"), ("gpt_oss", "MXFP4"),
                                               ("qwen3_moe", "Q8_0"), ("qwen2_moe", "Q5_0")])
def test_moe_gguf_runs_as_the_model_it_was_converted_from(tmp_path, name, experts):
    model, path = moe_file(tmp_path, name, "F32", experts)
    loaded = load_checkpoint(path, device="cpu")
    cfg = loaded.config
    assert loaded.arch == ARCH[name] and cfg.moe_layers and cfg.n_experts == model.config.to_dict().get(
        "num_local_experts", getattr(model.config, "num_experts", None))
    check_moe(loaded, model)  # logits <= 1e-4, patterns and router logits <= 1e-5, the same experts, greedy
    banks = [p for p in packed_weights(loaded.model) if len(p.shape) == 3]
    assert len(banks) == 3 * len(cfg.moe_layers) and {p.type_name for p in banks} == {experts}
    if name == "qwen3_moe":
        assert cfg.moe_layers == (0, 1, 2) and cfg.d_expert == 32 and cfg.moe_norm_topk and cfg.qk_norm == "head"
    if name == "gpt_oss":
        assert cfg.sliding_layers == (0,) and dict(cfg.rope_scaling)["rope_type"] == "yarn"
    if name == "qwen2_moe":
        assert cfg.d_shared == 64 and cfg.moe_shared_gate


@pytest.mark.recent_reference  # transformers' GGUF loading as of 5.2x (older ones add no BOS)
@pytest.mark.parametrize("name", ["qwen3_moe_tf", "qwen2_moe_tf"])
def test_moe_gguf_matches_transformers_gguf_loading(tmp_path, name):
    from explorer.core.verify import LOGITS_TOL, verify_checkpoint

    tok = byte_vocabulary(100)
    tok["tokens"][98], tok["merges"] = "Th", ["T h"]  # a merge, so transformers' GGUF tokenizer reads it
    _, path = moe_file(tmp_path, name, "Q8_0", "Q4_0", tok)
    report = verify_checkpoint(path, "TheQuickBrownFox!#")
    assert report.passed, "\n".join(report.lines())
    assert report.prompt_ids_equal is True and report.logits is not None and report.logits <= LOGITS_TOL
    reference = from_transformers(path, tmp_path, path.name)
    check_moe(load_checkpoint(path, device="cpu"), reference)


@pytest.mark.parametrize(("name", "experts", "qtype"), [("gpt_oss", "MXFP4", "Q8_0"), ("qwen2_moe", "Q4_K", "Q8_0"),
                                                        ("mixtral", "Q8_0", "Q4_0")])
def test_kept_expert_banks_give_the_dequantised_numbers_exactly(tmp_path, monkeypatch, name, experts, qtype):
    config, cls, overrides = MODELS[name]
    hidden = dict(hidden_size=256, intermediate_size=256) if experts == "Q4_K" else {}  # K-blocks: rows of 256
    if "moe_intermediate_size" in overrides and hidden:
        hidden.update(moe_intermediate_size=256, shared_expert_intermediate_size=256)
    model = build(config, cls, **{**overrides, **hidden}, **EAGER)
    path = write_moe_model(model, tmp_path / f"{name}.gguf", qtype, experts)
    kept = load_checkpoint(path, device="cpu", weights="keep")
    full = load_checkpoint(path, device="cpu", weights="dequantize")
    assert not packed_weights(full.model) and kept.n_params == full.n_params
    a, b = kept.trace_ids(IDS, CaptureSpec.everything()), full.trace_ids(IDS, CaptureSpec.everything())
    assert set(a.keys()) == set(b.keys()) and float(np.abs(b["logits"]).max()) > 0.1
    for key in sorted(b.keys()):
        assert np.array_equal(np.asarray(a[key]), np.asarray(b[key]), equal_nan=True), key
    assert ours_greedy(kept, IDS, 6) == ours_greedy(full, IDS, 6)
    off = [parse_spec("expert1:0")]  # an expert switched off: the same routing around it
    assert np.array_equal(kept.trace_ids(IDS, interventions=off)["logits"], full.trace_ids(IDS, interventions=off)["logits"])

    # each bank is expanded one expert at a time, and only for the experts some token chose
    expanded: list[tuple[int, tuple[int, ...]]] = []
    real = Packed.expert

    def expert(self, index, dtype=None):
        expanded.append((int(index), self.shape))
        return real(self, index, dtype)

    monkeypatch.setattr(Packed, "expert", expert)
    budget = global_budget()
    limit = budget.limit
    try:
        budget.set_limit(64 * 1024)  # nothing stays cached: every expert used is expanded in this forward
        trace = kept.trace_ids(IDS, CaptureSpec.everything())
    finally:
        budget.set_limit(limit, explicit=False)
    chosen = set().union(*(set(np.unique(trace[f"blocks.{i}.moe.experts"]).tolist()) for i in kept.config.moe_layers))
    assert expanded and {e for e, _ in expanded} == chosen
    assert len(expanded) == 3 * sum(len(np.unique(trace[f"blocks.{i}.moe.experts"])) for i in kept.config.moe_layers)


def test_verify_says_why_transformers_is_no_reference_for_these_files(tmp_path):
    from explorer.core.verify import VerifyRefused, verify_checkpoint

    for name, words in (("mixtral", "dense Llama"), ("gpt_oss", "gpt-oss"), ("qwen2_moe", "expert_feed_forward"),
                        ("qwen3_moe", "expert_feed_forward")):
        _, path = moe_file(tmp_path, name, "F32", "F32")
        with pytest.raises(VerifyRefused, match=words):
            verify_checkpoint(path, "TheQuickBrownFox!#")


@pytest.mark.parametrize("arch", ["gemma4", "qwen35", "qwen35moe"])
def test_architectures_that_come_later_are_refused_saying_so(tmp_path, arch):
    import gguf

    w = gguf.GGUFWriter(str(tmp_path / f"{arch}.gguf"), arch)
    w.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(CheckpointError, match="not read yet"):
        load_checkpoint(tmp_path / f"{arch}.gguf", device="cpu")


def test_a_moe_file_without_its_expert_count_is_one_line(tmp_path):
    import gguf

    _, path = moe_file(tmp_path, "olmoe", "F32", "F32")
    reader = gguf.GGUFReader(path)
    assert "olmoe.expert_count" in reader.fields
    bad = tmp_path / "no-count.gguf"
    data = path.read_bytes().replace(b"olmoe.expert_count", b"olmoe.expert_cOunt")
    bad.write_bytes(data)
    with pytest.raises(CheckpointError, match="expert_count"):
        load_checkpoint(bad, device="cpu")
