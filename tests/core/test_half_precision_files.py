"""Half-precision checkpoint files (how most checkpoints ship) against transformers reading the same file.

Each model is built with transformers (tiny, random, eager attention), saved with save_pretrained
(safetensors), opened through load_checkpoint and compared from token ids by
``decoder_reference.check`` (logits, every attention pattern, stored and derived, the residual
stream, greedy tokens with and without the KV cache).
"""

from __future__ import annotations

import pytest
import torch
from decoder_reference import GEMMA2, build, check

from explorer.core.checkpoint import load_checkpoint

pytest.importorskip("transformers")


@pytest.mark.parametrize("half", ["bfloat16", "float16"])
def test_half_precision_checkpoints_load_into_float32(tmp_path, half):
    """A bf16/fp16 safetensors file (how most checkpoints ship) opens; each weight is converted to
    the compute dtype exactly, and the model matches transformers reading the same file."""
    from safetensors import safe_open
    from transformers import Gemma2ForCausalLM

    build("Gemma2Config", "Gemma2ForCausalLM", **GEMMA2).to(getattr(torch, half)).save_pretrained(tmp_path)
    with safe_open(str(tmp_path / "model.safetensors"), "pt") as f:
        stored = {name: f.get_tensor(name) for name in f.keys()}  # noqa: SIM118 (safe_open has no __iter__)
    assert {t.dtype for t in stored.values()} == {getattr(torch, half)}
    loaded = load_checkpoint(tmp_path, device="cpu", dtype="float32")
    assert loaded.dtype == torch.float32
    embed = stored["model.embed_tokens.weight"]
    assert torch.equal(loaded.model.embed.weight, embed.float())
    reference = Gemma2ForCausalLM.from_pretrained(tmp_path, dtype=torch.float32, attn_implementation="eager").eval()
    check(loaded, reference)
