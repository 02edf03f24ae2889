"""Bad input gives one clear message, never a traceback."""

from __future__ import annotations

import json
import shutil

import pytest
from safetensors.torch import load_file, save_file

from explorer.core.checkpoint import load_checkpoint
from explorer.core.errors import CheckpointError, PromptError


def copy_dir(src, tmp_path):
    dst = tmp_path / "ckpt"
    shutil.copytree(src, dst)
    return dst


def test_missing_path_lists_builtin_models(tmp_path):
    with pytest.raises(CheckpointError, match="worked-example"):
        load_checkpoint(tmp_path / "nothing-here")


def test_directory_without_config(tmp_path):
    with pytest.raises(CheckpointError, match="missing config.json"):
        load_checkpoint(tmp_path)


def test_config_that_is_not_json(tmp_path):
    (tmp_path / "config.json").write_text("{ not json")
    with pytest.raises(CheckpointError, match="not readable JSON"):
        load_checkpoint(tmp_path)


def test_unknown_architecture_is_named_and_supported_ones_listed(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "t5", "architectures": ["T5ForConditionalGeneration"]}))
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(tmp_path)
    assert "T5ForConditionalGeneration" in str(err.value) and "'gpt2'" in str(err.value)


def test_missing_weights(tiny_gpt2_dir, tmp_path):
    d = copy_dir(tiny_gpt2_dir, tmp_path)
    (d / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match="no weights"):
        load_checkpoint(d)


def test_shape_mismatch_names_the_tensor_and_both_shapes(tiny_gpt2_dir, tmp_path):
    d = copy_dir(tiny_gpt2_dir, tmp_path)
    config = json.loads((d / "config.json").read_text())
    config["n_inner"] = 128  # the weights have 256 = 4 * 64
    (d / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(d)
    message = str(err.value)
    assert "mlp.W_in.weight" in message and "(256, 64)" in message and "(128, 64)" in message


def test_missing_tensor_is_named(tiny_gpt2_dir, tmp_path):
    d = copy_dir(tiny_gpt2_dir, tmp_path)
    weights = load_file(d / "model.safetensors")
    del weights["transformer.h.1.ln_2.bias"]
    save_file(weights, d / "model.safetensors")
    with pytest.raises(CheckpointError, match="h.1.ln_2.bias"):
        load_checkpoint(d)


def test_corrupt_safetensors(tiny_gpt2_dir, tmp_path):
    d = copy_dir(tiny_gpt2_dir, tmp_path)
    data = (d / "model.safetensors").read_bytes()
    (d / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="not a valid safetensors file"):
        load_checkpoint(d)


def test_empty_prompt_and_long_prompt(tiny_gpt2):
    loaded, _ = tiny_gpt2
    with pytest.raises(PromptError, match="empty"):
        loaded.trace("")
    trace = loaded.trace(" ".join(["word"] * 300))
    assert trace.n_tokens == loaded.config.n_ctx == 128
    assert trace.meta.truncated_from == 300


def test_odd_unicode_prompt_runs(tiny_gpt2):
    loaded, _ = tiny_gpt2
    trace = loaded.trace("e\u0301 \u200b 🦜 \u202eabc \x00")
    assert trace.n_tokens > 5 and all("\ufffd" not in t for t in trace.tokens)
