"""Llama and Mistral checkpoints against transformers: GQA, sharded safetensors, pytorch_model.bin,
head_dim, biases, tied embeddings, RoPE scaling refused clearly, Mistral's sliding window."""

from __future__ import annotations

import json

import pytest
import torch
from loader_reference import build, compare

from explorer.core.checkpoint import load_checkpoint
from explorer.core.errors import CheckpointError

transformers = pytest.importorskip("transformers")


def test_llama_with_gqa_matches_reference(llama):
    path, model = llama
    loaded = load_checkpoint(path, device="cpu")
    cfg = loaded.config
    assert loaded.arch == "llama" and loaded.info()["architecture"] == "llama"
    assert (cfg.n_heads, cfg.kv_heads, cfg.norm, cfg.positions, cfg.gated_ffn, cfg.activation) == \
        (4, 2, "rmsnorm", "rotary", True, "silu")
    assert cfg.rotary_base == 500.0 and not cfg.tie_embeddings and not cfg.attn_bias
    compare(loaded, model)


def test_llama_sharded_safetensors(llama, tmp_path):
    _, model = llama
    model.save_pretrained(tmp_path, max_shard_size="20KB")
    assert (tmp_path / "model.safetensors.index.json").is_file()
    assert len(list(tmp_path.glob("model-*.safetensors"))) > 2
    compare(load_checkpoint(tmp_path, device="cpu"), model)


def test_llama_pytorch_model_bin(llama, tmp_path):
    _, model = llama
    model.config.save_pretrained(tmp_path)
    torch.save(model.state_dict(), tmp_path / "pytorch_model.bin")
    compare(load_checkpoint(tmp_path / "pytorch_model.bin", device="cpu"), model)  # a file in the directory


def test_llama_head_dim_biases_and_tied_embeddings(tmp_path):
    model = build("llama", num_key_value_heads=1, head_dim=16, attention_bias=True, mlp_bias=True,
                  tie_word_embeddings=True)
    model.save_pretrained(tmp_path)
    loaded = load_checkpoint(tmp_path, device="cpu")
    assert loaded.config.d_head == 16 and loaded.config.kv_heads == 1 and loaded.config.tie_embeddings
    assert loaded.model.unembed.weight is loaded.model.embed.weight
    compare(loaded, model)


def test_llama_incomplete_rope_scaling_is_refused_clearly(llama, tmp_path):
    path, _ = llama  # llama3 scaling itself is tested in test_rope_scaling.py
    config = json.loads((path / "config.json").read_text())
    config["rope_parameters"] = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="RoPE scaling 'llama3' needs a positive number low_freq_factor"):
        load_checkpoint(tmp_path)


def test_mistral_matches_reference_with_its_sliding_window(tmp_path):
    model = build("mistral", num_key_value_heads=2, sliding_window=5)
    model.save_pretrained(tmp_path)
    loaded = load_checkpoint(tmp_path, device="cpu")
    assert loaded.arch == "mistral" and loaded.config.n_ctx == 64 and loaded.config.sliding_window == 5
    assert loaded.config.sliding_layers == (0, 1, 2)
    assert any("sliding window" in note for note in loaded.notes)
    assert "sliding window" in loaded.info()["notes"]
    compare(loaded, model)  # 14 prompt + 10 generated tokens: the window of 5 matters


def test_mistral_without_window(tmp_path):
    model = build("mistral", num_key_value_heads=4, sliding_window=None)
    model.save_pretrained(tmp_path)
    loaded = load_checkpoint(tmp_path, device="cpu")
    assert loaded.config.n_ctx == 64 and not any("sliding" in note for note in loaded.notes)
    compare(loaded, model)
