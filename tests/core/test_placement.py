"""Placing and offloading a model with accelerate (CPU-only: disk offload and CPU offload are real here).

An offloaded model must give exactly the default model's logits and Trace, and everything that reads
weights directly (DLA, the logit lens, a neuron's vocabulary effect, neighbours) and interventions must
work on it with the same numbers.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from explorer.core.checkpoint import load_checkpoint
from explorer.core.errors import ExplorerError
from explorer.core.placement import (Placement, block_device, describe, execution_device, input_device,
                                     parse_max_memory, parse_size, place, resident_bytes)
from tests.core.decoder_reference import build

IDS = [5, 17, 99, 3, 50, 42, 42, 7, 31, 64, 20, 11]


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    model = build("LlamaConfig", "LlamaForCausalLM", num_hidden_layers=4, num_key_value_heads=2)
    path = tmp_path_factory.mktemp("tiny-llama-placement")
    model.save_pretrained(path)
    return path


def _block_bytes(loaded) -> int:
    return sum(p.numel() * p.element_size() for p in loaded.model.blocks[0].parameters())


def disk_offloaded(path, tmp_path, keep_blocks: int = 1):
    """The model with all but about ``keep_blocks`` blocks sent to disk (budget: the rest of the model)."""
    loaded = load_checkpoint(path, device="cpu")
    total = resident_bytes(loaded.model)
    budget = total - (len(loaded.model.blocks) - keep_blocks) * _block_bytes(loaded)
    (tmp_path / "offload").mkdir(exist_ok=True)
    place(loaded.model, Placement("sequential", {"cpu": budget}, str(tmp_path / "offload")))
    return loaded, budget


def cpu_offloaded(path):
    """accelerate's whole-model CPU offload: every parameter on meta, weights brought in per module."""
    from accelerate import cpu_offload

    loaded = load_checkpoint(path, device="cpu")
    cpu_offload(loaded.model, execution_device=torch.device("cpu"))
    return loaded


def assert_same_traces(reference, other, ids=IDS, interventions=()):
    a, b = reference.trace_ids(ids, interventions=interventions), other.trace_ids(ids, interventions=interventions)
    assert set(a.keys()) == set(b.keys())
    for key in a.keys():  # stored and derived (re-running a block, patterns from q and k, logits)
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    return a, b


@pytest.mark.parametrize("family", ["llama", "gpt2"])
@pytest.mark.parametrize("how", ["disk", "cpu"])
def test_offloaded_model_gives_the_default_numbers(family, how, llama_dir, tiny_gpt2_dir, tmp_path):
    from explorer.core.analysis.dla import direct_logit_attribution
    from explorer.core.analysis.neurons import neuron_output_direction, neuron_vocab_effect
    from explorer.core.analysis.ov import ov_circuit
    from explorer.core.analysis.qk import qk_split
    from explorer.core.analysis.residual import logit_lens
    from explorer.core.analysis.vectors import nearest_vocab_neighbours
    from explorer.core.interventions.spec import parse_spec

    path = llama_dir if family == "llama" else tiny_gpt2_dir  # GPT-2: tied embeddings, LayerNorm
    reference = load_checkpoint(path, device="cpu")
    other = disk_offloaded(path, tmp_path)[0] if how == "disk" else cpu_offloaded(path)
    metas = [name for name, p in other.model.named_parameters() if p.device.type == "meta"]
    assert metas, "the placement offloaded nothing: the test would prove nothing"

    a, b = assert_same_traces(reference, other)
    np.testing.assert_array_equal(a["logits"], b["logits"])
    # direct weight reads
    da, db = direct_logit_attribution(a, target=7), direct_logit_attribution(b, target=7)
    np.testing.assert_allclose(da.heads, db.heads, atol=1e-9)
    np.testing.assert_allclose(da.mlp, db.mlp, atol=1e-9)
    last = a.config.n_layers - 1
    np.testing.assert_allclose(qk_split(a, last, 1, 5, 2).table, qk_split(b, last, 1, 5, 2).table, atol=1e-9)
    np.testing.assert_allclose(ov_circuit(a, last, 1, 5).top_values, ov_circuit(b, last, 1, 5).top_values, atol=1e-6)
    la, lb = logit_lens(a, top=3), logit_lens(b, top=3)
    np.testing.assert_array_equal(la.ids, lb.ids)
    np.testing.assert_allclose(la.probs, lb.probs, atol=1e-6)
    for x, y in zip(neuron_vocab_effect(a, 2, 5), neuron_vocab_effect(b, 2, 5)):
        np.testing.assert_allclose(x, y, atol=1e-5)
    np.testing.assert_array_equal(neuron_output_direction(a, 2, 1), neuron_output_direction(b, 2, 1))
    for x, y in zip(nearest_vocab_neighbours(a, 2), nearest_vocab_neighbours(b, 2)):
        np.testing.assert_allclose(x, y, atol=1e-6)
    # interventions: a head switched off, a neuron mean-ablated
    ivs = [parse_spec("2.1"), parse_spec("mlp2:4", "mean")]
    a2, b2 = assert_same_traces(reference, other, interventions=ivs)
    assert not np.array_equal(a["logits"], a2["logits"])
    np.testing.assert_array_equal(a2["logits"], b2["logits"])
    # the weights stay offloaded after all that
    assert [name for name, p in other.model.named_parameters() if p.device.type == "meta"] == metas


def test_generation_on_an_offloaded_model(llama_dir, tmp_path):
    from explorer.core.generation.generate import generate
    from explorer.core.generation.sampling import SamplingParams

    reference = load_checkpoint(llama_dir, device="cpu")
    other, _ = disk_offloaded(llama_dir, tmp_path)
    params = SamplingParams(temperature=0.0, max_new_tokens=5, stop_at_eos=False)
    assert generate(reference, IDS[:5], params).token_ids == generate(other, IDS[:5], params).token_ids


def test_disk_offload_keeps_resident_weights_under_the_budget(llama_dir, tmp_path):
    loaded, budget = disk_offloaded(llama_dir, tmp_path, keep_blocks=2)  # accelerate keeps one block's room free
    device_map = loaded.model.hf_device_map
    assert sum(1 for where in device_map.values() if where == "disk") >= 2
    assert resident_bytes(loaded.model) <= budget
    files = list((tmp_path / "offload").rglob("*.safetensors"))
    assert len(files) == sum(1 for where in device_map.values() if where == "disk")  # one file per block
    assert describe(loaded.model) == "layers 0 cpu, 1–3 disk"


def test_where_a_model_computes(llama_dir, tmp_path):
    plain = load_checkpoint(llama_dir, device="cpu")
    assert block_device(plain.model, 0) is None  # not placed: the forward pass moves nothing
    assert input_device(plain.model) == torch.device("cpu") and plain.placement == "all layers cpu"
    offloaded = cpu_offloaded(llama_dir)
    assert execution_device(offloaded.model.blocks[1]) == torch.device("cpu")
    assert offloaded.device == torch.device("cpu")
    assert str(offloaded.dtype) == "torch.float32"


def test_parsing_memory_budgets():
    assert parse_max_memory("cuda:0=20GiB,cpu=48GiB") == {0: 20 * 2**30, "cpu": 48 * 2**30}
    assert parse_max_memory("1=512MB, disk=1e9") == {1: 512 * 10**6, "disk": 10**9}
    assert parse_max_memory(None) is None and parse_size("1000") == 1000
    for bad in ("cuda:0", "gpu=1GiB", "cpu=lots", "cpu=1XB"):
        with pytest.raises(ExplorerError, match="max-memory|size"):
            parse_max_memory(bad)
    with pytest.raises(ExplorerError, match="unknown device map"):
        Placement("everywhere")


def test_disk_needs_a_folder(llama_dir):
    loaded = load_checkpoint(llama_dir, device="cpu")
    with pytest.raises(ExplorerError, match="--offload-dir"):
        place(loaded.model, Placement("sequential", {"cpu": _block_bytes(loaded)}, None))


def test_export_with_offload_writes_the_same_trace(llama_dir, tmp_path, capsys):
    """The README's contract: --device-map auto --max-memory cpu=SIZE --offload-dir D changes no number,
    and the resident weights stay under SIZE plus one block."""
    from explorer.cli import main

    plain = load_checkpoint(llama_dir, device="cpu")
    size = resident_bytes(plain.model) // 2
    prompt = " ".join(str(i) for i in IDS)
    assert main(["export", "--checkpoint", str(llama_dir), "--prompt", prompt, "--out", str(tmp_path / "a")]) == 0
    (tmp_path / "d").mkdir()
    flags = ["--device-map", "auto", "--max-memory", f"cpu={size}", "--offload-dir", str(tmp_path / "d")]
    assert main(["export", "--checkpoint", str(llama_dir), "--prompt", prompt, "--out", str(tmp_path / "b"),
                 *flags]) == 0
    a, b = np.load(tmp_path / "a" / "trace.npz"), np.load(tmp_path / "b" / "trace.npz")
    assert sorted(a.files) == sorted(b.files) and "logits" in a.files
    for key in a.files:
        if key == "provenance":  # the same record but for its creation time, which may tick between the runs
            pa, pb = (json.loads(str(x[key])) for x in (a, b))
            assert {**pa, "created": None} == {**pb, "created": None}
        elif a[key].dtype.kind in "fc":
            np.testing.assert_allclose(a[key], b[key], rtol=0, atol=1e-5, err_msg=key)
        else:
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    # the same placement in this process: what stays resident
    from explorer.commands import placement_from
    from explorer.cli import _command_parser

    args = _command_parser().parse_args(["info", "--checkpoint", str(llama_dir), *flags])
    placed = load_checkpoint(llama_dir, device="cpu", placement=placement_from(args))
    assert "disk" in placed.model.hf_device_map.values()
    assert resident_bytes(placed.model) <= size + _block_bytes(placed)
    assert main(["info", "--checkpoint", str(llama_dir), *flags]) == 0
    assert "disk" in capsys.readouterr().out


def test_placement_options_need_accelerate(llama_dir, monkeypatch, capsys):
    import sys

    from explorer.cli import main

    monkeypatch.setitem(sys.modules, "accelerate", None)  # as if it were not installed
    assert main(["info", "--checkpoint", str(llama_dir), "--device-map", "auto"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "pip install 'transformer-explorer[offload]'" in err


def _gpus() -> int:
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


@pytest.mark.parametrize("value, names", [
    (f"cuda:{max(7, _gpus())}=1GiB", f"no CUDA GPU {max(7, _gpus())}"), ("mps=1GiB", "no MPS device"),
    ("disk=1GiB", "--offload-dir"), ("cpu=1e400GiB", "more than any machine has"),
    (",".join(f"cuda:{i}=1GiB" for i in range(200)), f"cuda:{_gpus()}"),
])
def test_max_memory_for_what_this_machine_lacks_is_one_line(llama_dir, capsys, value, names):
    """Issue 34: each of these was an internal error (accelerate's, or an overflow)."""
    from explorer.cli import main

    if value.startswith("mps") and getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
        value, names = "mps=1e30", "more than any machine has"  # a Mac: the device is there, the size is not
    assert main(["info", "--checkpoint", str(llama_dir), "--max-memory", value]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and names in err[0] and "internal" not in err[0], err
