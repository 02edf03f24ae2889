"""Hostile SAE directories end in one clear SAEError line, fast, without allocating what they claim."""

from __future__ import annotations

import json
import pickle
import struct
import time
import tracemalloc

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from explorer.core.config import ModelConfig
from explorer.core.features.sae import SAEError, open_sae

CFG = ModelConfig(vocab_size=50, d_model=16, n_layers=2, n_heads=2, d_head=8, d_ff=64, n_ctx=32)


def write(tmp, cfg: dict, tensors: dict | None = None, d_in: int = 16, d_sae: int = 8):
    tmp.mkdir(exist_ok=True)
    base = {"architecture": "standard", "d_in": d_in, "d_sae": d_sae, "apply_b_dec_to_input": True,
            "normalize_activations": "none", "metadata": {"hook_name": "blocks.0.hook_resid_pre"}}
    base.update(cfg)
    (tmp / "cfg.json").write_text(json.dumps(base))
    if tensors is None:
        tensors = {"W_enc": torch.randn(d_in, d_sae), "b_enc": torch.zeros(d_sae), "W_dec": torch.randn(d_sae, d_in),
                   "b_dec": torch.zeros(d_in)}
    save_file(tensors, tmp / "sae_weights.safetensors")
    return tmp


def refused(path, match: str) -> str:
    t0 = time.perf_counter()
    tracemalloc.start()
    with pytest.raises(SAEError, match=match) as info:
        open_sae(path, CFG)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert time.perf_counter() - t0 < 2.0
    assert peak < 16 * 2**20, f"refusing took {peak:,} bytes"
    text = str(info.value)
    assert "\n" not in text and len(text) < 400
    return text


def test_a_well_formed_directory_opens(tmp_path) -> None:
    sae = open_sae(write(tmp_path, {}), CFG)
    assert (sae.d_in, sae.d_sae, sae.hook.key) == (16, 8, "blocks.0.resid_pre")


def test_lying_shapes(tmp_path) -> None:
    refused(write(tmp_path / "a", {"d_sae": 9}), r"W_enc is \[16, 8\], but cfg.json .* implies \[16, 9\]")
    refused(write(tmp_path / "b", {"d_in": 24}), "d_in is 24, but blocks.0.hook_resid_pre is 16 wide")
    bad = {"W_enc": torch.randn(16, 8), "b_enc": torch.zeros(8), "W_dec": torch.randn(16, 8), "b_dec": torch.zeros(16)}
    refused(write(tmp_path / "c", {}, bad), r"W_dec is \[16, 8\]")


def test_a_header_that_claims_more_bytes_than_the_file_has(tmp_path) -> None:
    d = write(tmp_path, {"d_sae": 2**20})
    header = {"W_enc": {"dtype": "F32", "shape": [16, 2**20], "data_offsets": [0, 16 * 2**22]}}
    raw = json.dumps(header).encode()
    (d / "sae_weights.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * 64)
    refused(d, "beyond the end of the file")


def test_huge_d_sae(tmp_path) -> None:
    refused(write(tmp_path, {"d_sae": 10**12}), "more features than any SAE has")


def test_nan_weights(tmp_path) -> None:
    tensors = {"W_enc": torch.randn(16, 8), "b_enc": torch.zeros(8), "W_dec": torch.randn(8, 16),
               "b_dec": torch.full((16,), float("nan"))}
    refused(write(tmp_path, {}, tensors), "b_dec holds NaN")


def test_pickled_extras_and_missing_files(tmp_path) -> None:
    d = tmp_path / "pickled"
    d.mkdir()
    (d / "cfg.json").write_text("{}")
    (d / "sae_weights.pt").write_bytes(pickle.dumps({"W_enc": np.zeros(3)}))
    refused(d, "missing sae_weights.safetensors .* pickled weights .* never read")
    extra = {"W_enc": torch.randn(16, 8), "b_enc": torch.zeros(8), "W_dec": torch.randn(8, 16),
             "b_dec": torch.zeros(16), "evil": torch.zeros(3)}
    refused(write(tmp_path / "extra", {}, extra), "unexpected tensor evil")
    d = write(tmp_path / "nocfg", {})
    (d / "cfg.json").unlink()
    refused(d, "missing cfg.json")
    refused(tmp_path / "absent", "is not a directory")


def test_bad_config_values(tmp_path) -> None:
    refused(write(tmp_path / "a", {"architecture": "matching_pursuit"}), "architecture 'matching_pursuit' is not "
                                                                          "supported .*standard, jumprelu, topk, gated")
    refused(write(tmp_path / "b", {"d_sae": 8.0}), "d_sae should be an integer")
    refused(write(tmp_path / "c", {"normalize_activations": "layer_norm"}), "normalize_activations 'layer_norm'")
    refused(write(tmp_path / "d", {"metadata": {"hook_name": "blocks.7.hook_resid_pre"}}), "the model has 2 layers")
    refused(write(tmp_path / "e", {"metadata": {"hook_name": "hook_embed"}}), "not a TransformerLens block hook")
    refused(write(tmp_path / "f", {"architecture": "topk"}), "lacks 'k'")
    refused(write(tmp_path / "g", {"apply_b_dec_to_input": "yes"}), "should be true or false")
    d = write(tmp_path / "h", {})
    (d / "cfg.json").write_text("[" * 100000)
    refused(d, "cfg.json")
    d = write(tmp_path / "i", {})
    (d / "cfg.json").write_bytes(b" " * (2 << 20))
    refused(d, "cfg.json is .* bytes")


def test_weights_larger_than_free_memory_are_refused_before_reading(tmp_path, monkeypatch) -> None:
    import explorer.core.features.sae as sae_module

    monkeypatch.setattr(sae_module, "available_memory", lambda: 1000)
    refused(write(tmp_path, {}), "its weights need about .* GiB is free")


def test_features_that_cannot_be_edited_say_why(tmp_path) -> None:
    from explorer.core.features.edits import feature_intervention

    mid = open_sae(write(tmp_path / "mid", {"metadata": {"hook_name": "blocks.1.hook_resid_mid"}}), CFG)
    assert mid.hook.key == "blocks.1.resid_mid"
    with pytest.raises(SAEError, match="cannot be changed at blocks.1.hook_resid_mid"):
        feature_intervention(mid, 0)
    tensors = {"W_enc": torch.randn(16, 8), "b_enc": torch.zeros(8), "W_dec": torch.randn(8, 16),
               "b_dec": torch.zeros(16)}
    tc = open_sae(write(tmp_path / "tc", {"architecture": "transcoder", "apply_b_dec_to_input": False, "d_out": 16,
                                          "metadata": {"hook_name": "blocks.0.hook_resid_mid",
                                                       "hook_name_out": "blocks.0.hook_mlp_out"}}, tensors), CFG)
    with pytest.raises(SAEError, match="transcoder's features are read at one site"):
        feature_intervention(tc, 0)
    refused(write(tmp_path / "tc2", {"architecture": "transcoder", "d_out": 16,
                                     "metadata": {"hook_name": "blocks.0.hook_resid_mid",
                                                  "hook_name_out": "blocks.0.hook_mlp_out"}}, tensors),
            "a transcoder cannot subtract b_dec")
    refused(write(tmp_path / "z", {"reshape_activations": "none", "metadata": {"hook_name": "blocks.0.attn.hook_z"}}),
            "reshape_activations is 'none'")
    z = open_sae(write(tmp_path / "z_old", {"metadata": {"hook_name": "blocks.0.attn.hook_z"}}), CFG)
    assert z.hook.site == "attn.z"  # an older cfg.json without the key: hook_z from the name, as SAELens reads it
