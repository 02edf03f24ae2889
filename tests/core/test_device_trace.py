"""A device-resident Trace (torch tensors where the model computes) gives what today's host Trace gives,
and the memory budget bounds what traces cache without changing any value."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from explorer.core.budget import LRUCache, MemoryBudget, parse_size
from explorer.core.interventions.spec import parse_spec
from explorer.core.trace import CaptureSpec, Trace

PROMPT = "The quick brown fox jumps over the lazy dog. The quick brown fox"


def _specs():
    return {"full": lambda storage: CaptureSpec.full(storage=storage),
            "compact": lambda storage: CaptureSpec.compact(storage=storage),
            "everything": lambda storage: CaptureSpec.everything(storage=storage),
            "float16": lambda storage: CaptureSpec(dtype="float16", storage=storage)}


def _assert_same_trace(host: Trace, device: Trace) -> None:
    assert host.storage == "host" and device.storage == "device"
    assert host.keys() == device.keys() and host.stored_keys() == device.stored_keys()
    assert host.nbytes == device.nbytes
    for key in host.keys():  # stored and derived (scores, patterns, re-run blocks, logits)
        expected, got = host[key], device[key]
        assert isinstance(got, np.ndarray) and not got.flags.writeable, key
        assert got.dtype == expected.dtype and got.shape == expected.shape, key
        np.testing.assert_array_equal(got, expected, err_msg=key)
        tensor = device.tensor(key)
        assert isinstance(tensor, torch.Tensor) and tensor.device.type == "cpu", key
    cfg = host.config
    for layer in range(cfg.n_layers):
        for head in range(cfg.n_heads):
            for kind in ("scores", "pattern"):
                np.testing.assert_array_equal(device.head(layer, head, kind), host.head(layer, head, kind))
                assert isinstance(device.head_tensor(layer, head, kind), torch.Tensor)


@pytest.mark.parametrize("name", list(_specs()))
def test_device_resident_trace_equals_the_host_trace_gpt2(tiny_gpt2, name):
    loaded, _ = tiny_gpt2
    ids = loaded.tokenizer.encode(PROMPT)
    spec = _specs()[name]
    host, device = loaded.trace_ids(ids, spec("host")), loaded.trace_ids(ids, spec("device"))
    assert all(isinstance(device._arrays[k], torch.Tensor) for k in device.stored_keys())
    _assert_same_trace(host, device)


def test_device_resident_trace_equals_the_host_trace_llama_with_an_intervention(llama):
    """Grouped K/V heads, rotary, RMSNorm, SwiGLU; re-run blocks apply the run's intervention again."""
    from explorer.core.checkpoint import load_checkpoint

    loaded = load_checkpoint(llama[0], device="cpu")
    ids = list(range(3, 40))
    ablate = [parse_spec("1.0")]
    host = loaded.trace_ids(ids, CaptureSpec.compact(), interventions=ablate)
    device = loaded.trace_ids(ids, CaptureSpec.compact(storage="device"), interventions=ablate)
    _assert_same_trace(host, device)


def test_exports_of_a_device_resident_trace_equal_the_host_ones(tiny_gpt2):
    from explorer.core.export import trace_arrays
    from explorer.core.interop import capture_settings

    loaded, _ = tiny_gpt2
    ids = loaded.tokenizer.encode(PROMPT)
    host = loaded.trace_ids(ids, CaptureSpec.compact())
    device = loaded.trace_ids(ids, CaptureSpec.compact(storage="device"))
    a, b = trace_arrays(host), trace_arrays(device)
    assert a.keys() == b.keys()
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    assert capture_settings(device) == capture_settings(host)


def test_the_default_capture_follows_the_device():
    assert CaptureSpec.default_for(torch.device("cpu")) == CaptureSpec.full()
    assert CaptureSpec.default_for("cuda:0") == CaptureSpec.compact(storage="device")
    assert CaptureSpec.default_for("mps").storage == "device"
    with pytest.raises(ValueError, match="storage"):
        CaptureSpec(storage="disk")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (a device-resident trace on a GPU)")
def test_a_cuda_trace_stays_on_the_gpu_and_matches_the_cpu(tiny_gpt2_dir):
    from explorer.core.checkpoint import load_checkpoint

    cpu, gpu = load_checkpoint(tiny_gpt2_dir, device="cpu"), load_checkpoint(tiny_gpt2_dir, device="cuda")
    ids = cpu.tokenizer.encode(PROMPT)
    a, b = cpu.trace_ids(ids), gpu.trace_ids(ids)  # the GPU's default: compact, on the device
    assert b.storage == "device" and b.tensor("blocks.0.attn.q").device.type == "cuda"
    assert b.head_tensor(1, 2).device.type == "cuda"
    np.testing.assert_allclose(a["logits"], b["logits"], atol=1e-3)
    np.testing.assert_allclose(a["blocks.2.mlp.post"], b["blocks.2.mlp.post"], atol=1e-3)
    np.testing.assert_allclose(a.head(2, 1), b.head(2, 1), atol=1e-4)


# --- the memory budget -------------------------------------------------------------------------

def _rebudgeted(trace: Trace, budget: MemoryBudget) -> Trace:
    return Trace(trace.token_ids, trace.tokens, trace.config, {k: trace._arrays[k] for k in trace.stored_keys()},
                 trace.meta, trace._model, trace.interventions, budget=budget)


@pytest.mark.parametrize("storage", ["host", "device"])
def test_a_tiny_budget_keeps_every_value_and_stays_under_its_limit(tiny_gpt2, storage):
    loaded, _ = tiny_gpt2
    ids = loaded.tokenizer.encode(PROMPT)
    reference = loaded.trace_ids(ids, CaptureSpec.compact(storage=storage))
    one_head = len(ids) ** 2 * 4
    budget = MemoryBudget(limit=reference.nbytes + 3 * one_head)  # room for three single-head views
    trace = _rebudgeted(reference, budget)
    assert budget.held == trace.nbytes
    for _ in range(2):  # the second round reads what was evicted: recomputed, equal
        for key in reference.keys():
            np.testing.assert_array_equal(trace[key], reference[key], err_msg=key)
        for layer in range(loaded.config.n_layers):
            for head in range(loaded.config.n_heads):
                np.testing.assert_array_equal(trace.head(layer, head), reference.head(layer, head))
        assert 0 < budget.peak_cached <= 3 * one_head and budget.peak <= budget.limit
    # a budget smaller than the stored arrays: nothing is cached, nothing fails
    starved = MemoryBudget(limit=1024)
    trace = _rebudgeted(reference, starved)
    for key in reference.keys():
        np.testing.assert_array_equal(trace[key], reference[key], err_msg=key)
    assert starved.peak_cached == 0 and trace.cached_nbytes == 0


def test_lru_caches_share_a_budget_and_evict_the_least_recently_used():
    budget = MemoryBudget(limit=1000)
    a, b = LRUCache(budget), LRUCache(budget)
    a.put("x", np.zeros(50, np.float32))       # 200 bytes
    b.put("y", np.zeros(50, np.float32))
    a.put("z", np.zeros(100, np.float32))      # 400: 800 in use
    assert a.get("x") is not None              # x used again: y is now the oldest
    b.put("w", np.zeros(100, np.float32))      # needs 400, 200 free: y (b, the oldest) goes
    assert "y" not in b and {"x", "z"} <= set(a._entries) and "w" in b
    assert budget.cached == 1000 and budget.peak_cached <= 1000
    big = np.zeros(1000, np.float32)
    assert b.put("big", big) is big and "big" not in b  # larger than the budget: returned, not kept
    held = budget.reserve(500)                 # z, then x, make room (oldest first); w stays
    assert held is not None and "w" in b and not len(a) and budget.in_use == 900
    assert budget.reserve(600) is None          # cannot fit even with the caches empty
    held.release()
    assert budget.held == 0
    a.put("x", np.zeros(25, np.float32))
    del a
    assert budget.cached == b.nbytes == 400     # a dropped cache no longer counts
    budget.set_limit(100)
    assert budget.cached == 0 and "w" not in b


def test_budget_sizes_read_and_refuse_in_one_line():
    assert parse_size("512MB") == 512 * 2**20 and parse_size("1.5 GB") == int(1.5 * 2**30)
    assert parse_size("4096") == 4096
    for bad in ("lots", "-1GB", "0", "12 parsecs"):
        with pytest.raises(ValueError, match="memory"):
            parse_size(bad)


def test_the_logit_lens_of_a_device_resident_trace_equals_the_host_one(tiny_gpt2):
    from explorer.core.analysis.residual import lens_columns

    loaded, _ = tiny_gpt2
    ids = loaded.tokenizer.encode(PROMPT)
    host = loaded.trace_ids(ids, CaptureSpec.compact())
    device = loaded.trace_ids(ids, CaptureSpec.compact(storage="device"))
    a, b = lens_columns(host, 2, 9, top=3), lens_columns(device, 2, 9, top=3)
    for name in ("ids", "probs", "logits", "entropy"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
