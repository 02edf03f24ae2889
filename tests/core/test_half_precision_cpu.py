"""Half precision on the CPU: weights stored in bfloat16/float16, computed in float32 (or bfloat16 by choice).

* A bfloat16 (float16) checkpoint opened with ``weights="keep"`` holds its matrices in half precision (half the
  bytes of float32) and computes in float32: it equals transformers reading the same file into float32, to the
  float32 tolerance of every family test (logits, patterns stored and derived, residual stream, greedy tokens).
* A float32 checkpoint opened with ``weights="bfloat16"``: its matrices rounded to bfloat16 once, computed in
  float32: equal to transformers holding the same bfloat16-rounded weights in float32.
* ``dtype="bfloat16"`` on the CPU: computed in bfloat16 like transformers' bfloat16 model, as close to the
  float32 reference as transformers' own bfloat16 run is.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from decoder_reference import IDS, build, check

from explorer.core.checkpoint import load_checkpoint
from explorer.core.quant.packed import packed_weights, stored_bytes
from explorer.core.trace import CaptureSpec

pytest.importorskip("transformers")


@pytest.mark.parametrize("half", ["bfloat16", "float16"])
def test_a_half_precision_checkpoint_kept_half_computes_in_float32(tmp_path, half):
    from transformers import LlamaForCausalLM

    dtype = getattr(torch, half)
    build("LlamaConfig", "LlamaForCausalLM", num_key_value_heads=2).to(dtype).save_pretrained(tmp_path)
    kept = load_checkpoint(tmp_path, device="cpu", weights="keep")
    converted = load_checkpoint(tmp_path, device="cpu", weights="dequantize")
    assert kept.info()["dtype"] == "float32" and ("BF16" if half == "bfloat16" else "F16") in kept.info()["weights"]
    assert len(packed_weights(kept.model)) == 2 * 7 + 2
    matrices = sum(p.numel() for p in packed_weights(kept.model))
    assert stored_bytes(converted.model) - stored_bytes(kept.model) == matrices * 2  # 2 bytes, not 4, per number
    reference = LlamaForCausalLM.from_pretrained(tmp_path, dtype=torch.float32, attn_implementation="eager").eval()
    check(kept, reference)
    a, b = kept.trace_ids(IDS, CaptureSpec.everything()), converted.trace_ids(IDS, CaptureSpec.everything())
    assert all(np.array_equal(a[k], b[k]) for k in b.keys())


def test_float32_weights_held_in_bfloat16_equal_transformers_on_the_same_rounded_weights(tmp_path):
    model = build("LlamaConfig", "LlamaForCausalLM", num_key_value_heads=2)
    model.save_pretrained(tmp_path)
    held = load_checkpoint(tmp_path, device="cpu", weights="bfloat16")
    assert {p.type_name for p in packed_weights(held.model)} == {"BF16"}
    with torch.no_grad():  # the reference: the same matrices rounded to bfloat16, the norms as they were
        for p in model.parameters():
            if p.dim() == 2:
                p.copy_(p.to(torch.bfloat16).float())
    check(held, model)


def test_bfloat16_compute_on_the_cpu_is_as_close_as_transformers_own(tmp_path):
    from transformers import LlamaForCausalLM

    build("LlamaConfig", "LlamaForCausalLM", num_key_value_heads=2).save_pretrained(tmp_path)
    ids = torch.tensor([IDS])
    hf32 = LlamaForCausalLM.from_pretrained(tmp_path, dtype=torch.float32, attn_implementation="eager").eval()
    hf16 = LlamaForCausalLM.from_pretrained(tmp_path, dtype=torch.bfloat16, attn_implementation="eager").eval()
    with torch.no_grad():
        reference, theirs = hf32(ids).logits[0], hf16(ids).logits[0].float()
    ours = load_checkpoint(tmp_path, device="cpu", dtype="bfloat16")
    assert ours.info()["dtype"] == "bfloat16" and ours.info()["weights"] == "bfloat16"
    logits = torch.as_tensor(ours.trace_ids(IDS)["logits"]).float()
    our_error, their_error = (logits - reference).abs().max().item(), (theirs - reference).abs().max().item()
    assert their_error > 0 and our_error <= 2 * their_error + 1e-3, (our_error, their_error)
    assert (logits.argmax(-1) == theirs.argmax(-1)).float().mean().item() >= 0.9
