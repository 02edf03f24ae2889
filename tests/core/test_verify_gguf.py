"""``verify`` on GGUF files: our GGUF loading against transformers' own (``from_pretrained(dir, gguf_file=...)``).

Tiny files written as llama.cpp lays them out (``tests/gguf_files.py``, the writers of test_gguf.py) pass
with the same per-layer lines and tolerances as directories; a conversion broken on purpose (layer 1's
query weight, changed as our loader reads it) fails naming that layer; what transformers does not read
from GGUF, or reads as another model, is refused with one line.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from decoder_reference import build
from gguf_files import byte_vocabulary, llama3_rope_freqs, write_model
from test_gguf import ARCH, tiny, written

from explorer.cli import main
from explorer.core.checkpoint import gguf_format, load_checkpoint
from explorer.core.quant.packed import Packed
from explorer.core.verify import LOGITS_TOL, PATTERN_TOL, VerifyRefused, verify_checkpoint

transformers = pytest.importorskip("transformers")

PROMPT = "TheQuickBrownFox!#"  # characters of the files' byte vocabulary
REFERENCE = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "gpt2": "GPT2LMHeadModel"}


def with_tokenizer(tmp_path, family: str, qtype: str):
    """test_gguf.py's file, its byte vocabulary given one merge ("T h" -> "Th", token 98) so that transformers'
    GGUF tokenizer reads it too (it needs merges or scores)."""
    model, tok = tiny(family), byte_vocabulary(100)
    tok["tokens"][98], tok["merges"] = "Th", ["T h"]
    if isinstance(getattr(model.config, "pad_token_id", None), int):
        tok["pad"] = model.config.pad_token_id  # transformers reads the config's pad id from here (Phi-3)
    path = tmp_path / f"{family}-{qtype}.gguf"
    return write_model(model, path, ARCH.get(family, family), qtype, tokenizer=tok)


CASES = [(f, q) for f in ("llama", "qwen2", "gpt2") for q in ("F32", "Q8_0")] + \
    [("llama", "Q4_0"), ("qwen3", "Q5_0"), ("gemma2", "Q8_0"), ("gemma3", "Q4_0"), ("phi3", "Q8_0"),
     ("stablelm", "F16"), ("falcon", "Q8_0"), ("mistral", "Q4_0")]
REFERENCE.update(qwen3="Qwen3ForCausalLM", gemma2="Gemma2ForCausalLM", gemma3="Gemma3ForCausalLM",
                 phi3="Phi3ForCausalLM", stablelm="StableLmForCausalLM", falcon="FalconForCausalLM",
                 mistral="LlamaForCausalLM")  # transformers reads a llama file as Mistral only by its name


@pytest.mark.recent_reference  # transformers' GGUF loading as of 5.2x (older ones add no BOS)
@pytest.mark.parametrize(("family", "qtype"), CASES)
def test_gguf_files_verify_within_tolerance(tmp_path, family, qtype):
    path = with_tokenizer(tmp_path, family, qtype)
    report = verify_checkpoint(path, PROMPT)
    assert report.passed, "\n".join(report.lines())
    assert report.checkpoint == str(path) and report.reference == REFERENCE[family]
    assert report.prompt_ids_equal is True and report.ids[0] == 98  # transformers' GGUF tokenizer: "Th", ...
    assert len(report.ids) == len(PROMPT) - 1
    assert len(report.layers) == load_checkpoint(path, device="cpu").config.n_layers + 1
    assert report.logits is not None and report.logits <= LOGITS_TOL
    assert all(row.pattern is not None and row.pattern <= PATTERN_TOL for row in report.layers[1:])
    assert report.lines()[-1].endswith("within tolerance")


def _broken_conversion(monkeypatch, name: str) -> None:
    """Our GGUF loader's conversion, with one layer's query weight transposed after it is dequantised."""
    real = gguf_format.read_tensors

    def read_tensors(*args, **kwargs):
        out = real(*args, **kwargs)
        weight = out[name]
        if isinstance(weight, Packed):  # kept as the file stores it: its dequantised numbers
            weight = weight.dense(torch.float32)
        out[name] = weight.T.contiguous()
        return out

    monkeypatch.setattr(gguf_format, "read_tensors", read_tensors)


@pytest.mark.parametrize(("family", "weight"), [("llama", "model.layers.1.self_attn.q_proj.weight"),
                                                ("qwen2", "model.layers.1.self_attn.q_proj.weight")])
def test_a_layer_our_loader_converts_wrongly_fails_naming_it(tmp_path, capsys, monkeypatch, family, weight):
    path = with_tokenizer(tmp_path, family, "Q8_0")
    assert main(["verify", "--checkpoint", str(path), "--prompt", PROMPT]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"{path}: against transformers' {REFERENCE[family]} on {len(PROMPT) - 1} tokens")
    assert [line.split()[:2] for line in out if line.startswith(("embeddings", "layer "))] == \
        [["embeddings", "resid"], ["layer", "0"], ["layer", "1"]]
    _broken_conversion(monkeypatch, weight)
    report = verify_checkpoint(path, PROMPT)
    assert not report.passed and report.first_failure.label == "layer 1"
    assert all(row.passed for row in report.layers[:2])  # the embeddings and layer 0 still agree
    assert main(["verify", "--checkpoint", str(path), "--prompt", PROMPT]) == 1
    assert "FAILED: first difference at layer 1" in capsys.readouterr().out.splitlines()[-1]


def test_gpt2_fused_qkv_broken_in_layer_0_fails_there(tmp_path, monkeypatch):
    path = written(tmp_path, "gpt2", "F32")
    real = gguf_format.read_tensors

    def read_tensors(*args, **kwargs):  # layer 0's fused q/k/v bias shifted
        out = real(*args, **kwargs)
        out["transformer.h.0.attn.c_attn.bias"] = out["transformer.h.0.attn.c_attn.bias"] + 0.5
        return out

    monkeypatch.setattr(gguf_format, "read_tensors", read_tensors)
    report = verify_checkpoint(path, PROMPT)
    assert not report.passed and report.first_failure.label == "layer 0" and report.layers[0].passed


def test_a_folder_of_one_gguf_file_and_a_blob_without_suffix_verify(tmp_path):
    (tmp_path / "folder").mkdir()
    path = with_tokenizer(tmp_path / "folder", "qwen2", "Q8_0")
    assert verify_checkpoint(path.parent, PROMPT).passed
    blob = tmp_path / "sha256-0123abcd"
    blob.write_bytes(path.read_bytes())
    report = verify_checkpoint(blob, PROMPT)
    assert report.passed, "\n".join(report.lines())
    assert report.checkpoint == str(blob)


def _refused(source, capsys, *words):
    with pytest.raises(VerifyRefused):
        verify_checkpoint(source, PROMPT)
    assert main(["verify", "--checkpoint", str(source), "--prompt", PROMPT]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    for word in words:
        assert word in err[0], err[0]


def test_an_architecture_transformers_does_not_read_from_gguf_is_refused_naming_it(tmp_path, capsys, monkeypatch):
    path = written(tmp_path, "qwen2", "F32")
    from transformers import modeling_gguf_pytorch_utils as gguf_utils

    monkeypatch.setattr(gguf_utils, "GGUF_SUPPORTED_ARCHITECTURES",
                        [a for a in gguf_utils.GGUF_SUPPORTED_ARCHITECTURES if a != "qwen2"])
    _refused(path, capsys, "does not read GGUF architecture 'qwen2'")


def test_an_architecture_this_app_does_not_read_is_refused_naming_it(tmp_path, capsys):
    import gguf

    w = gguf.GGUFWriter(str(tmp_path / "mamba.gguf"), "mamba")
    w.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    _refused(tmp_path / "mamba.gguf", capsys, "'mamba'")


def test_files_transformers_reads_as_another_model_are_refused(tmp_path, capsys):
    """transformers' GGUF loading drops Llama 3.1+'s rope_freqs and RoPE scaling metadata, keeps Falcon-40B's
    regrouped q/k/v rows and scales every Gemma's scores by 1/sqrt(256): its model would differ from the
    file's at layer 0, so verify says why instead of failing."""
    llama3 = build("LlamaConfig", "LlamaForCausalLM", num_key_value_heads=2, max_position_embeddings=131072,
                   rope_parameters={"rope_theta": 500000.0, "rope_type": "llama3", "factor": 32.0,
                                    "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                    "original_max_position_embeddings": 8192})
    path = write_model(llama3, tmp_path / "llama3.gguf", "llama", "F32",
                       extra_tensors={"rope_freqs.weight": llama3_rope_freqs(16, 500000.0, 32.0)})
    _refused(path, capsys, "rope_freqs")
    falcon = build("FalconConfig", "FalconForCausalLM", new_decoder_architecture=True, num_kv_heads=2)
    _refused(write_model(falcon, tmp_path / "falcon40.gguf", "falcon", "F32"), capsys, "Falcon-40B")
    scaled = build("LlamaConfig", "LlamaForCausalLM", num_key_value_heads=2,
                   rope_parameters={"rope_theta": 10000.0, "rope_type": "linear", "factor": 4.0})
    _refused(write_model(scaled, tmp_path / "linear.gguf", "llama", "F32"), capsys, "rope.scaling.type")
    gemma = build("Gemma2Config", "Gemma2ForCausalLM", head_dim=32)  # llama.cpp: scores / sqrt(32)
    _refused(write_model(gemma, tmp_path / "gemma2.gguf", "gemma2", "F32"), capsys, "1/sqrt(32)")


def test_two_gguf_files_in_a_folder_are_refused_naming_them(tmp_path, capsys):
    written(tmp_path, "llama", "F32")
    written(tmp_path, "llama", "Q8_0")
    _refused(tmp_path, capsys, "llama-F32.gguf", "llama-Q8_0.gguf")


def test_the_reference_opens_the_file_only_after_our_reader_checked_it(tmp_path, capsys):
    path = written(tmp_path, "llama", "F32")
    data = bytearray(path.read_bytes())
    path.write_bytes(bytes(data[: len(data) // 2]))  # cut short: our reader names the truncation
    _refused(path, capsys, "truncated")
