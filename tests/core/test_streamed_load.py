"""A placed load streams (core/checkpoint/streamed.py): the plan comes from the configuration, then each
checkpoint block is read, converted and put straight on its device or its disk file. The model gives
exactly the default numbers, and no more than the budget plus about one block is ever in memory."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from explorer.core.checkpoint import load_checkpoint
from explorer.core.placement import Placement, resident_bytes
from tests.core.decoder_reference import build
from tests.core.test_placement import assert_same_traces

ROOT = Path(__file__).resolve().parents[2]
SPECS = {  # Llama's layout and renames, a sliding window, q/k norms, soft caps; GPT-2's fused and transposed c_attn
    "llama": ("LlamaConfig", "LlamaForCausalLM", dict(num_hidden_layers=4, num_key_value_heads=2)),
    "mistral": ("MistralConfig", "MistralForCausalLM", dict(num_hidden_layers=3, sliding_window=6)),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", dict(num_hidden_layers=3, head_dim=16, num_key_value_heads=2)),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", dict(num_hidden_layers=3, head_dim=16, num_key_value_heads=2,
                                                         sliding_window=6, query_pre_attn_scalar=16)),
}


@pytest.fixture(scope="module")
def family_dirs(tmp_path_factory):
    dirs = {}
    for family, (config, cls, overrides) in SPECS.items():
        dirs[family] = tmp_path_factory.mktemp(f"streamed-{family}")
        build(config, cls, **overrides).save_pretrained(dirs[family])
    return dirs


def _block_bytes(model) -> int:
    return sum(p.numel() * p.element_size() for p in model.blocks[0].parameters())


def _vocab(n: int):
    from explorer.core.tokenize.base import tokenizer_from_description

    return tokenizer_from_description({"type": "vocab", "tokens": [str(i) for i in range(n)]})


class Reads:
    """Counts what the streamed load reads: the bytes of each read, and the most held at once."""

    def __init__(self, monkeypatch):
        from explorer.core.checkpoint import streamed

        self.groups: list[int] = []
        original = streamed.read_safetensors

        def counting(path, entries, total=None):
            out = original(path, entries, total)
            self.groups.append(sum(t.numel() * t.element_size() for t in out.values()))
            return out

        monkeypatch.setattr(streamed, "read_safetensors", counting)


@pytest.mark.parametrize("family", [*SPECS, "gpt2", "native"])
def test_a_streamed_load_gives_the_default_numbers(family, family_dirs, tiny_gpt2_dir, tmp_path, monkeypatch):
    from explorer.core.analysis.dla import direct_logit_attribution

    if family == "native":  # the app's own format: its names are already ours
        from explorer.core.checkpoint.native import save_native

        plain = load_checkpoint(family_dirs["llama"], device="cpu")
        path = tmp_path / "native"
        save_native(plain.model, _vocab(plain.model.cfg.vocab_size), path)
    else:
        path = tiny_gpt2_dir if family == "gpt2" else family_dirs[family]
    reference = load_checkpoint(path, device="cpu")
    total, block = resident_bytes(reference.model), _block_bytes(reference.model)
    budget = total - (len(reference.model.blocks) - 1) * block
    reads = Reads(monkeypatch)
    other = load_checkpoint(path, device="cpu", placement=Placement("sequential", {"cpu": budget}, scratch(tmp_path)))
    assert "disk" in other.model.hf_device_map.values()
    assert any(p.device.type == "meta" for p in other.model.parameters())
    assert resident_bytes(other.model) <= budget
    # read block by block: no read holds more than the largest block or the embeddings and head
    outer = total - len(reference.model.blocks) * block
    assert len(reads.groups) >= len(reference.model.blocks) and max(reads.groups) <= max(block, outer)
    a, b = assert_same_traces(reference, other)
    np.testing.assert_array_equal(a["logits"], b["logits"])
    if reference.model.cfg.norm_placement == "pre":  # DLA reads the un-embedding and the final norm directly
        np.testing.assert_allclose(direct_logit_attribution(a, target=7).heads,
                                   direct_logit_attribution(b, target=7).heads, atol=1e-9)


def test_a_placed_model_bigger_than_memory_is_planned_not_refused(family_dirs, tmp_path, monkeypatch):
    """The fit check would refuse a model bigger than the machine; a streamed load lets accelerate plan it."""
    from explorer.core.checkpoint import validate

    monkeypatch.setattr(validate, "available_memory", lambda device: 1)  # a machine with no memory to spare
    with pytest.raises(Exception, match="available"):
        load_checkpoint(family_dirs["llama"], device="cpu")
    placed = load_checkpoint(family_dirs["llama"], device="cpu",
                             placement=Placement("sequential", {"cpu": 1}, scratch(tmp_path)))
    assert set(placed.model.hf_device_map.values()) == {"disk"}
    assert resident_bytes(placed.model) == 0


def test_a_damaged_checkpoint_is_one_line_and_leaves_nothing(family_dirs, tmp_path):
    import shutil

    from explorer.core.errors import CheckpointError

    path = tmp_path / "cut"
    shutil.copytree(family_dirs["llama"], path)
    weights = path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size - 100])
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path, device="cpu", placement=Placement("sequential", {"cpu": 1}, scratch(tmp_path)))
    assert "\n" not in str(info.value) and "truncated" in str(info.value)


CHILD = """
import json, sys
sys.path.insert(0, {root!r})
import torch
torch.set_num_threads(1)
import accelerate, accelerate.utils, safetensors.torch
from explorer.core.checkpoint import load_checkpoint
from explorer.core.placement import Placement, resident_bytes
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
placement = Placement("sequential", {{"cpu": {budget}}}, {offload!r}) if {budget} else None
load_checkpoint({warm!r}, device="cpu", placement=placement and Placement("sequential", {{"cpu": 1}}, {offload!r}))
from explorer.core.memory import release_freed_memory
release_freed_memory()  # the warm-up (a tiny model: every import and first call) gives its memory back
open("/proc/self/clear_refs", "w").write("5")
before = status("VmRSS")
loaded = load_checkpoint({path!r}, device="cpu", placement=placement)
print(json.dumps({{"grew": status("VmHWM") - before, "resident": resident_bytes(loaded.model)}}))
"""


def scratch(tmp_path: Path) -> str:
    """An offload folder (it must exist: issue 34)."""
    (tmp_path / "o").mkdir(exist_ok=True)
    return str(tmp_path / "o")


def _load_peak(path: Path, budget: int, offload: Path, warm: Path) -> dict:
    offload.mkdir(exist_ok=True)  # --offload-dir must exist (issue 34: it is never made with its parents)
    out = subprocess.run([sys.executable, "-c", CHILD.format(root=str(ROOT), path=str(path), budget=budget,
                                                            offload=str(offload), warm=str(warm))],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_load_peak_stays_under_the_budget_plus_a_block(tmp_path):
    """Resident memory while loading (the process's VmHWM, measured in a fresh process after a warm-up load):
    the whole model without a placement, the budget plus about one block with one."""
    from explorer.core.checkpoint.native import save_native
    from explorer.core.config import ModelConfig
    from explorer.core.model import Transformer
    cfg = ModelConfig(arch="llama", vocab_size=2048, n_ctx=64, d_model=512, n_layers=6, n_heads=8, d_head=64,
                      d_ff=1536, norm="rmsnorm", positions="rotary", activation="silu", gated_ffn=True)
    torch.manual_seed(0)
    model = Transformer(cfg).to(torch.bfloat16)  # bfloat16 on file, float32 loaded: each block doubles on reading
    save_native(model, _vocab(2048), tmp_path / "m")
    tiny = dataclasses.replace(cfg, d_model=64, d_head=8, d_ff=96, n_layers=2)
    save_native(Transformer(tiny), _vocab(2048), tmp_path / "warm")
    block = _block_bytes(model) * 2
    size = sum(p.numel() * 4 for p in model.parameters())
    budget = size // 3
    plain = _load_peak(tmp_path / "m", 0, tmp_path / "o", tmp_path / "warm")
    placed = _load_peak(tmp_path / "m", budget, tmp_path / "o", tmp_path / "warm")
    assert plain["grew"] >= size  # the ordinary load holds the whole model
    assert placed["resident"] <= budget
    assert placed["grew"] <= budget + block, (placed, budget, block)  # the bound: the budget plus one block


def test_a_sharded_checkpoint_streams_across_its_shards(tmp_path):
    model = build("LlamaConfig", "LlamaForCausalLM", num_hidden_layers=3, num_key_value_heads=2)
    model.save_pretrained(tmp_path / "sharded", max_shard_size="40KB")
    assert (tmp_path / "sharded" / "model.safetensors.index.json").is_file()
    reference = load_checkpoint(tmp_path / "sharded", device="cpu")
    placed = load_checkpoint(tmp_path / "sharded", device="cpu",
                             placement=Placement("sequential", {"cpu": _block_bytes(reference.model)},
                                                 scratch(tmp_path)))
    assert "disk" in placed.model.hf_device_map.values()
    a, b = assert_same_traces(reference, placed)
    np.testing.assert_array_equal(a["logits"], b["logits"])
