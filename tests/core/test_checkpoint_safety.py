"""Hostile and broken checkpoints: nothing in a file may run, and every failure says what is wrong."""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import resource
import shutil
import struct
import time

import pytest
import torch
from safetensors.torch import load_file, save_file

from explorer.core.checkpoint import load_checkpoint
from explorer.core.errors import CheckpointError

transformers = pytest.importorskip("transformers")


class WritesMarker:
    """Unpickling this runs ``os.system``: it creates the marker file."""

    def __init__(self, marker) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch '{self.marker}'",))


@dataclasses.dataclass
class TrainConfig:  # an ordinary class in a checkpoint: weights_only refuses it too
    dataset: str = "shakespeare"


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=24, num_hidden_layers=2,
                                      num_attention_heads=2, max_position_embeddings=32)
    path = tmp_path_factory.mktemp("llama-ok")
    transformers.LlamaForCausalLM(config).save_pretrained(path)
    return path


@pytest.fixture
def copy(llama_dir, tmp_path):
    target = tmp_path / "ckpt"
    shutil.copytree(llama_dir, target)
    return target


def edit_config(path, **changes):
    config = json.loads((path / "config.json").read_text())
    config.update(changes)
    (path / "config.json").write_text(json.dumps(config))


def edit_weights(path, change):
    weights = load_file(str(path / "model.safetensors"))
    change(weights)
    save_file(weights, str(path / "model.safetensors"))


def test_the_valid_checkpoint_loads(llama_dir):
    assert load_checkpoint(llama_dir, device="cpu").arch == "llama"


# --- code in pickles never runs ----------------------------------------------------------------

def test_the_payload_is_live_when_unpickled_naively(tmp_path):
    """Control: the payload used below really runs code under plain pickle."""
    marker = tmp_path / "ran"
    pickle.loads(pickle.dumps(WritesMarker(marker)))
    assert marker.exists()


@pytest.mark.parametrize("zip_format", [True, False])
def test_pytorch_model_bin_with_code_is_refused(copy, tmp_path, zip_format):
    marker = tmp_path / "pwned"
    state = dict(load_file(str(copy / "model.safetensors")))
    (copy / "model.safetensors").unlink()
    state["model.embed_tokens.weight"] = WritesMarker(marker)
    with open(copy / "pytorch_model.bin", "wb") as f:
        if zip_format:
            torch.save(state, f)
        else:
            pickle.dump(state, f)
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(copy)
    assert not marker.exists()
    assert "refused to load" in str(err.value) and "pytorch_model.bin" in str(err.value)
    assert "could run code" in str(err.value)


def nanogpt_checkpoint(**extra):
    d = 8
    state = {"transformer.wte.weight": torch.randn(16, d), "transformer.wpe.weight": torch.randn(8, d),
             "transformer.ln_f.weight": torch.ones(d)}
    for i in range(1):
        p = f"transformer.h.{i}."
        state.update({p + "ln_1.weight": torch.ones(d), p + "ln_2.weight": torch.ones(d),
                      p + "attn.c_attn.weight": torch.randn(3 * d, d), p + "attn.c_proj.weight": torch.randn(d, d),
                      p + "mlp.c_fc.weight": torch.randn(4 * d, d), p + "mlp.c_proj.weight": torch.randn(d, 4 * d)})
    state["lm_head.weight"] = state["transformer.wte.weight"]
    return {"model": state, "model_args": dict(n_layer=1, n_head=2, n_embd=d, block_size=8, bias=False,
                                               vocab_size=16, dropout=0.0), **extra}


def write_meta(path, chars="abcdefghijklmnop"):
    with open(path / "meta.pkl", "wb") as f:
        pickle.dump({"vocab_size": len(chars), "itos": dict(enumerate(chars)),
                     "stoi": {c: i for i, c in enumerate(chars)}}, f)


def test_a_plain_nanogpt_checkpoint_loads(tmp_path):
    torch.save(nanogpt_checkpoint(), tmp_path / "ckpt.pt")
    write_meta(tmp_path)
    loaded = load_checkpoint(tmp_path / "ckpt.pt", device="cpu")
    assert loaded.arch == "nanogpt" and loaded.tokenizer.encode("abc") == [0, 1, 2]


def test_nanogpt_ckpt_with_code_is_refused(tmp_path):
    marker = tmp_path / "pwned"
    torch.save(nanogpt_checkpoint(iter_num=WritesMarker(marker)), tmp_path / "ckpt.pt")
    write_meta(tmp_path)
    with pytest.raises(CheckpointError, match=r"refused to load .*ckpt\.pt: it refers to") as err:
        load_checkpoint(tmp_path / "ckpt.pt")
    assert not marker.exists()
    assert "could run code" in str(err.value)


def test_nanogpt_config_object_is_refused_with_a_clear_message(tmp_path):
    torch.save(nanogpt_checkpoint(config=TrainConfig()), tmp_path / "ckpt.pt")
    write_meta(tmp_path)
    with pytest.raises(CheckpointError, match="only plain tensors and containers") as err:
        load_checkpoint(tmp_path / "ckpt.pt")
    assert "TrainConfig" in str(err.value)


def test_malicious_meta_pkl_is_refused(tmp_path):
    marker = tmp_path / "pwned"
    torch.save(nanogpt_checkpoint(), tmp_path / "ckpt.pt")
    with open(tmp_path / "meta.pkl", "wb") as f:
        pickle.dump({"vocab_size": 2, "itos": {0: "a", 1: WritesMarker(marker)}}, f)
    with pytest.raises(CheckpointError, match=r"refused to read meta\.pkl: it refers to posix\.system") as err:
        load_checkpoint(tmp_path / "ckpt.pt")
    assert not marker.exists()
    assert "no code in it can run" in str(err.value)


@pytest.mark.parametrize("meta, message", [
    ({"stoi": {"a": 0}}, "expected a dict with 'itos'"),
    ({"itos": {0: "ab", 1: "c"}}, "not a single character"),
    ({"itos": {0: "a", 2: "b"}}, "ids 0..1"),
    ({"itos": {0: "a", 1: "b"}, "stoi": {"a": 1, "b": 0}}, "disagree"),
    ([1, 2, 3], "found list"),
])
def test_meta_pkl_that_is_not_a_character_vocabulary(tmp_path, meta, message):
    torch.save(nanogpt_checkpoint(), tmp_path / "ckpt.pt")
    with open(tmp_path / "meta.pkl", "wb") as f:
        pickle.dump(meta, f)
    with pytest.raises(CheckpointError, match=message):
        load_checkpoint(tmp_path / "ckpt.pt")


def test_ckpt_pt_that_is_not_nanogpt(tmp_path):
    torch.save({"state_dict": {"w": torch.zeros(2)}}, tmp_path / "model.ckpt")
    with pytest.raises(CheckpointError, match="not a nanoGPT checkpoint: expected a dict with 'model' and 'model_args'"):
        load_checkpoint(tmp_path / "model.ckpt")


def test_nanogpt_shape_disagreement_names_the_tensor(tmp_path):
    ckpt = nanogpt_checkpoint()
    ckpt["model"]["transformer.h.0.mlp.c_fc.weight"] = torch.randn(16, 8)
    torch.save(ckpt, tmp_path / "ckpt.pt")
    write_meta(tmp_path)
    with pytest.raises(CheckpointError, match=r"transformer\.h\.0\.mlp\.c_fc\.weight has shape \(16, 8\), "
                                              r"the config implies \(32, 8\)"):
        load_checkpoint(tmp_path / "ckpt.pt")


# --- corrupt and inconsistent files ------------------------------------------------------------

def test_truncated_safetensors(copy):
    data = (copy / "model.safetensors").read_bytes()
    (copy / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="model.safetensors.* the file is truncated"):
        load_checkpoint(copy)


@pytest.mark.parametrize("header_length", [None, 2**40])
def test_safetensors_header_claiming_terabytes_fails_fast(copy, header_length):
    header = json.dumps({"model.embed_tokens.weight": {"dtype": "F32", "shape": [1_000_000, 1_000_000],
                                                       "data_offsets": [0, 4_000_000_000_000]}}).encode()
    size = len(header) if header_length is None else header_length
    (copy / "model.safetensors").write_bytes(struct.pack("<Q", size) + header + b"\0" * 64)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    with pytest.raises(CheckpointError, match="not a valid safetensors file"):
        load_checkpoint(copy)
    assert time.perf_counter() - start < 5.0
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before < 512 * 1024  # KiB: < 512 MiB


def test_integer_tensors_are_refused(copy):
    edit_weights(copy, lambda w: w.update({k: torch.ones(v.shape, dtype=torch.int32) for k, v in w.items()}))
    with pytest.raises(CheckpointError, match=r"dtype torch\.int32; weights must be floating point"):
        load_checkpoint(copy)


def test_missing_tensor_is_named(copy):
    edit_weights(copy, lambda w: w.pop("model.layers.1.mlp.up_proj.weight"))
    with pytest.raises(CheckpointError, match=r"llama checkpoint lacks tensor model\.layers\.1\.mlp\.up_proj\.weight"):
        load_checkpoint(copy)


def test_extra_tensor_is_named(copy):
    edit_weights(copy, lambda w: w.update({"model.layers.0.surprise.weight": torch.zeros(3)}))
    with pytest.raises(CheckpointError, match=r"unexpected tensors: model\.layers\.0\.surprise\.weight"):
        load_checkpoint(copy)


def test_config_that_disagrees_with_the_tensors_names_tensor_and_shapes(copy):
    edit_config(copy, intermediate_size=40)
    with pytest.raises(CheckpointError, match=r"tensor model\.layers\.0\.mlp\.gate_proj\.weight has shape "
                                              r"\(24, 16\), the config implies \(40, 16\)"):
        load_checkpoint(copy)


def test_neox_fused_qkv_disagreement_names_tensor_and_shapes(tmp_path):
    torch.manual_seed(0)
    config = transformers.GPTNeoXConfig(vocab_size=64, hidden_size=16, intermediate_size=24, num_hidden_layers=1,
                                        num_attention_heads=2, max_position_embeddings=32)
    transformers.GPTNeoXForCausalLM(config).save_pretrained(tmp_path)
    edit_config(tmp_path, hidden_size=32)
    with pytest.raises(CheckpointError, match=r"tensor gpt_neox\.embed_in\.weight has shape \(64, 16\), "
                                              r"the config implies \(64, 32\)"):
        load_checkpoint(tmp_path)


def test_invalid_json_config(copy):
    (copy / "config.json").write_text('{"model_type": "llama", ')
    with pytest.raises(CheckpointError, match="config.json is not readable JSON"):
        load_checkpoint(copy)


def test_config_with_wrong_types(copy):
    edit_config(copy, num_hidden_layers="two")
    with pytest.raises(CheckpointError, match="num_hidden_layers should be an integer"):
        load_checkpoint(copy)


def test_unknown_model_type_lists_the_supported_ones(copy):
    edit_config(copy, model_type="mamba", architectures=["MambaForCausalLM"])
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(copy)
    message = str(err.value)
    assert "unsupported architecture 'MambaForCausalLM'" in message
    for name in ("'gpt2'", "'llama'", "'mistral'", "'gpt_neox'", "nanoGPT"):
        assert name in message


def test_sharded_index_cannot_point_outside_its_directory(copy, tmp_path):
    weights = load_file(str(copy / "model.safetensors"))
    (copy / "model.safetensors").unlink()
    save_file(weights, str(tmp_path / "outside.safetensors"))
    index = {"metadata": {}, "weight_map": {k: "../outside.safetensors" for k in weights}}
    (copy / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match="names a shard outside its directory"):
        load_checkpoint(copy)


def test_sharded_index_with_a_missing_shard(copy):
    weights = load_file(str(copy / "model.safetensors"))
    (copy / "model.safetensors").unlink()
    names = sorted(weights)
    save_file({k: weights[k] for k in names[:5]}, str(copy / "model-00001-of-00002.safetensors"))
    index = {"weight_map": {k: "model-00001-of-00002.safetensors" if i < 5 else "model-00002-of-00002.safetensors"
                            for i, k in enumerate(names)}}
    (copy / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match="names shard model-00002-of-00002.safetensors, which is missing"):
        load_checkpoint(copy)


def test_no_weights_at_all(copy):
    (copy / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match="no weights in .*expected model.safetensors, pytorch_model.bin"):
        load_checkpoint(copy)
