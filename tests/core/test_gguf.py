"""GGUF files (llama.cpp's layout, written at test time) against transformers' own GGUF loading.

Each family is written as llama.cpp's converter lays it out (``tests/gguf_files.py``), in the types
``gguf`` can write, and loaded twice: by us and by ``transformers.from_pretrained(dir, gguf_file=...)``.
Both dequantise the same blocks, so the logits agree to 1e-4 and the attention patterns to 1e-5.
The K- and IQ-quant types, which ``gguf`` cannot write, are checked on random blocks: ``gguf``'s
numpy dequantiser (ours) equals transformers' torch one bit for bit.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from decoder_reference import IDS, build, spread_weights  # noqa: E402
from gguf_files import from_transformers, write_model  # noqa: E402

from explorer.core.checkpoint import load_checkpoint  # noqa: E402
from explorer.core.errors import CheckpointError, LoadCancelled  # noqa: E402
from explorer.core.trace import CaptureSpec  # noqa: E402

FAMILIES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", dict(num_key_value_heads=2)),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", dict(num_key_value_heads=2)),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", dict(num_key_value_heads=2)),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM",
               dict(num_key_value_heads=2, head_dim=256, query_pre_attn_scalar=256, sliding_window=8)),
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM",
               dict(num_key_value_heads=2, head_dim=256, query_pre_attn_scalar=256, sliding_window=8)),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", dict(pad_token_id=0)),
    "stablelm": ("StableLmConfig", "StableLmForCausalLM", {}),
    "falcon": ("FalconConfig", "FalconForCausalLM", dict(new_decoder_architecture=False, multi_query=True)),
    "mistral": ("MistralConfig", "MistralForCausalLM", dict(num_key_value_heads=2, sliding_window=None)),
}
ARCH = {"mistral": "llama"}  # llama.cpp writes Mistral as a Llama
CASES = [("llama", q) for q in ("F32", "F16", "BF16", "Q8_0", "Q5_0", "Q4_0")] + \
    [(f, q) for f, q in (("qwen2", "Q8_0"), ("qwen2", "Q4_0"), ("qwen3", "Q5_0"), ("gemma2", "Q4_0"),
                         ("gemma3", "Q8_0"), ("phi3", "BF16"), ("phi3", "Q4_0"), ("stablelm", "Q4_0"),
                         ("falcon", "Q8_0"), ("mistral", "Q4_0"),
                         ("gpt2", "F16"), ("gpt2", "Q8_0"))]


def tiny(family: str):
    if family == "gpt2":
        import transformers

        torch.manual_seed(0)
        # n_positions stays 1024: transformers maps GGUF's context_length to GPT-2's n_ctx only
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
            n_embd=64, n_layer=2, n_head=4, n_positions=1024, vocab_size=100, attn_implementation="eager")).eval()
        spread_weights(model)
        return model
    config, model, overrides = FAMILIES[family]
    return build(config, model, **overrides)


def written(tmp_path: Path, family: str, qtype: str) -> Path:
    return write_model(tiny(family), tmp_path / f"{family}-{qtype}.gguf", ARCH.get(family, family), qtype)


@pytest.mark.parametrize(("family", "qtype"), CASES)
def test_gguf_matches_transformers(tmp_path, family, qtype):
    path = written(tmp_path, family, qtype)
    reference = from_transformers(path, tmp_path, path.name)
    ours = load_checkpoint(path, device="cpu")
    with torch.no_grad():
        ref = reference(torch.tensor([IDS]), output_attentions=True)
    trace = ours.trace_ids(IDS, CaptureSpec.everything())
    assert float(ref.logits.abs().max()) > 0.5
    assert np.abs(trace["logits"] - ref.logits[0].numpy()).max() <= 1e-4
    for i in range(ours.config.n_layers):
        assert np.abs(trace[f"blocks.{i}.attn.pattern"] - ref.attentions[i][0].numpy()).max() <= 1e-5
    assert ours.tokenizer.encode("!#") == [0, 2]
    notes = " ".join(ours.notes)
    assert "dequantised" in notes and ("F32" if qtype == "F32" else qtype) in notes


def test_falcon_new_decoder_runs_as_the_original(tmp_path):
    """Falcon-40B's layout: llama.cpp regroups q/k/v rows, which transformers' GGUF loading does not undo; ours
    does, so the file runs as the model it was converted from."""
    original = build("FalconConfig", "FalconForCausalLM", new_decoder_architecture=True, num_kv_heads=2)
    path = write_model(original, tmp_path / "falcon40.gguf", "falcon", "F32")
    ours = load_checkpoint(path, device="cpu")
    assert ours.config.kv_heads == 2
    with torch.no_grad():
        ref = original(torch.tensor([IDS]), output_attentions=True)
    trace = ours.trace_ids(IDS, CaptureSpec.everything())
    assert np.abs(trace["logits"] - ref.logits[0].numpy()).max() <= 1e-4
    assert np.abs(trace["blocks.1.attn.pattern"] - ref.attentions[1][0].numpy()).max() <= 1e-5


def test_progress_and_cancel(tmp_path):
    path = written(tmp_path, "llama", "Q8_0")
    seen: list[tuple[int, int, str]] = []
    load_checkpoint(path, device="cpu", progress=lambda i, n, w: seen.append((i, n, w)))
    assert [s[0] for s in seen] == list(range(len(seen))) and {s[1] for s in seen} == {len(seen)} == {21}
    assert any(w == "blk.0.attn_q.weight" for _, _, w in seen)
    stop = threading.Event()

    def progress(i, n, what):
        if i == 3:
            stop.set()

    with pytest.raises(LoadCancelled):
        load_checkpoint(path, device="cpu", progress=progress, cancel=stop)


def test_dequantised_in_chunks_into_the_target_precision(tmp_path, monkeypatch):
    from explorer.core.checkpoint import gguf_format
    from explorer.core.checkpoint.gguf_validate import read_header

    header = read_header(written(tmp_path, "llama", "Q4_0"))
    embd = next(t for t in header.tensors if t.name == "token_embd.weight")
    with open(header.path, "rb") as f:
        whole = gguf_format.dequantised(f, embd, torch.float32)
        monkeypatch.setattr(gguf_format, "CHUNK_ELEMENTS", 3 * 64)  # three rows at a time
        halves = gguf_format.dequantised(f, embd, torch.bfloat16)
    assert whole.shape == (100, 64) and halves.dtype == torch.bfloat16
    assert torch.equal(halves, whole.to(torch.bfloat16))


def test_llama3_rope_freqs_become_its_rope_scaling(tmp_path):
    """llama.cpp stores Llama 3.1+'s RoPE scaling as a rope_freqs tensor, which transformers' GGUF loading drops;
    ours reads it back into the llama3 scaling, so the file runs as the original model."""
    from gguf_files import llama3_rope_freqs

    scaling = {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192}
    original = build("LlamaConfig", "LlamaForCausalLM", num_key_value_heads=2, max_position_embeddings=131072,
                     rope_parameters={"rope_theta": 500000.0, **scaling})
    path = write_model(original, tmp_path / "llama3.gguf", "llama", "F32",
                       extra_tensors={"rope_freqs.weight": llama3_rope_freqs(16, 500000.0, 32.0)})
    ours = load_checkpoint(path, device="cpu")
    assert dict(ours.config.rope_scaling)["factor"] == 32.0
    with torch.no_grad():
        ref = original(torch.tensor([IDS]))
    assert np.abs(ours.trace_ids(IDS, CaptureSpec.compact())["logits"] - ref.logits[0].numpy()).max() <= 1e-4
    bent = write_model(original, tmp_path / "bent.gguf", "llama", "F32",
                       extra_tensors={"rope_freqs.weight": np.linspace(1, 3, 8)})
    with pytest.raises(CheckpointError, match="not Llama 3's rule"):
        load_checkpoint(bent, device="cpu")


@pytest.mark.parametrize("scaling", [{"rope_type": "linear", "factor": 4.0},
                                     {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16}])
def test_rope_scaling_metadata_runs_as_the_original(tmp_path, scaling):
    original = build("LlamaConfig", "LlamaForCausalLM", num_key_value_heads=2,
                     rope_parameters={"rope_theta": 10000.0, **scaling})
    path = write_model(original, tmp_path / "scaled.gguf", "llama", "F32")
    ours = load_checkpoint(path, device="cpu")
    assert dict(ours.config.rope_scaling)["rope_type"] == scaling["rope_type"]
    with torch.no_grad():
        ref = original(torch.tensor([IDS]))
    assert np.abs(ours.trace_ids(IDS, CaptureSpec.compact())["logits"] - ref.logits[0].numpy()).max() <= 1e-4


def test_gemma_score_scale_follows_llama_cpp(tmp_path):
    """llama.cpp scales Gemma 2 27B's (46 layers) scores by 1/sqrt(d_model/heads), the others' by 1/sqrt(head_dim)."""
    from explorer.core.checkpoint.gguf_config import hf_config
    from explorer.core.checkpoint.gguf_validate import read_header

    for layers, expected in ((46, 64 // 4), (2, 32)):
        model = build("Gemma2Config", "Gemma2ForCausalLM", num_hidden_layers=layers, head_dim=32)
        path = write_model(model, tmp_path / f"gemma2-{layers}.gguf", "gemma2", "F32")
        assert hf_config(read_header(path))["query_pre_attn_scalar"] == expected


def test_phi3_longrope_factors_become_its_rope_scaling(tmp_path):
    """Phi-3-128k's LongRoPE, which llama.cpp writes as rope_factors_long/short tensors, read back into its scaling."""
    gen = np.random.default_rng(0)
    long, short = (1 + gen.random(8) * 4).tolist(), (1 + gen.random(8)).tolist()
    original = build("Phi3Config", "Phi3ForCausalLM", pad_token_id=0, max_position_embeddings=128,
                     original_max_position_embeddings=8,
                     rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0, "long_factor": long,
                                      "short_factor": short, "original_max_position_embeddings": 8})
    path = write_model(original, tmp_path / "phi3-128k.gguf", "phi3", "F32",
                       extra_tensors={"rope_factors_long.weight": np.array(long),
                                      "rope_factors_short.weight": np.array(short)})
    ours = load_checkpoint(path, device="cpu")
    assert dict(ours.config.rope_scaling)["rope_type"] == "longrope"
    with torch.no_grad():
        ref = original(torch.tensor([IDS]))  # 14 tokens: past the original 8, so the long factors act
    assert np.abs(ours.trace_ids(IDS, CaptureSpec.compact())["logits"] - ref.logits[0].numpy()).max() <= 1e-4


def test_a_gguf_file_without_its_suffix_opens(tmp_path):
    path = written(tmp_path, "qwen2", "Q8_0")
    blob = tmp_path / "sha256-0123abcd"
    blob.write_bytes(path.read_bytes())
    assert load_checkpoint(blob, device="cpu").arch == "qwen2"


@pytest.mark.recent_reference  # transformers' torch dequantiser (transformers.integrations.gguf, newer than the floors allow)
@pytest.mark.parametrize("type_id", [10, 11, 12, 13, 14, 16, 17, 18, 19, 20, 21, 22, 23, 29])
def test_k_and_iq_blocks_equal_transformers_dequantiser(type_id):
    from gguf import GGMLQuantizationType, quants
    from transformers.integrations.gguf import dequant

    _, nbytes = dequant.GGML_BLOCK[type_id]
    raw = np.random.default_rng(type_id).integers(0, 256, size=(48, nbytes), dtype=np.uint8)
    with np.errstate(all="ignore"):
        ours = quants.dequantize(raw, GGMLQuantizationType(type_id)).reshape(-1)
    theirs = dequant.dequantize(torch.from_numpy(raw.copy()).reshape(-1), type_id).numpy()
    assert np.isfinite(ours).mean() > 0.5
    assert np.array_equal(ours, theirs, equal_nan=True)


@pytest.mark.recent_reference  # transformers' torch dequantiser (transformers.integrations.gguf, newer than the floors allow)
@pytest.mark.parametrize("qtype", ["Q4_K", "Q6_K", "IQ4_XS"])
def test_a_k_quant_tensor_is_read_in_chunks_as_transformers_dequantises_it(tmp_path, monkeypatch, qtype):
    """A tensor of a type gguf cannot write (its blocks random bytes), read row chunk by row chunk from a file."""
    import gguf
    from transformers.integrations.gguf import dequant

    from explorer.core.checkpoint import gguf_format
    from explorer.core.checkpoint.gguf_validate import read_header

    kind = gguf.GGMLQuantizationType[qtype]
    _, nbytes = dequant.GGML_BLOCK[int(kind)]
    raw = np.random.default_rng(1).integers(0, 256, size=(24, 2 * nbytes), dtype=np.uint8)  # 24 rows of 512
    w = gguf.GGUFWriter(str(tmp_path / "k.gguf"), "llama")
    w.add_tensor("blk.0.ffn_down.weight", raw, raw_dtype=kind)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    (info,) = read_header(tmp_path / "k.gguf").tensors
    assert info.shape == (24, 512) and info.type_name == qtype
    monkeypatch.setattr(gguf_format, "CHUNK_ELEMENTS", 5 * 512)  # five rows at a time
    with open(tmp_path / "k.gguf", "rb") as f:
        ours = gguf_format.dequantised(f, info, torch.float32).numpy()
    theirs = dequant.dequantize(torch.from_numpy(raw.copy()).reshape(-1), int(kind)).numpy().reshape(24, 512)
    assert np.array_equal(ours, theirs, equal_nan=True)


def test_info_lists_each_tensors_type(tmp_path, capsys):
    import json

    from explorer.cli import main

    path = written(tmp_path, "llama", "Q5_0")
    assert main(["info", "--checkpoint", str(path), "--tensors"]) == 0
    out = capsys.readouterr().out
    assert "blk.0.attn_q.weight" in out and "Q5_0" in out and "dequantised" in out
    assert main(["info", "--checkpoint", str(path), "--tensors", "--json"]) == 0
    tensors = json.loads(capsys.readouterr().out)["tensors"]
    assert tensors["blk.1.ffn_down.weight"] == "Q5_0" and tensors["output_norm.weight"] == "F32" and len(tensors) == 21
