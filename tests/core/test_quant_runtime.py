"""Before loading: each way of holding the weights with its memory; and the GGUF file beside llama.cpp.

* ``memory_options`` reads only headers: for a quantised GGUF file ``keep`` takes the file's matrix bytes, half
  precision two bytes a number, ``dequantize`` four; ``info`` prints them and says which one ``auto`` picks.
* The llama.cpp comparison's numbers (top-1 agreement, max |Δ logit|, KL) from two sets of logits; with
  ``llama-cpp-python`` installed, ``verify`` runs the file in llama.cpp and shows them per position.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_quant_keep import llama_file

from explorer.cli import main
from explorer.core.checkpoint import load_checkpoint
from explorer.core.checkpoint.gguf_validate import read_header
from explorer.core.quant.plan import choose, memory_options
from explorer.core.verify_llamacpp import EXPLAIN, available, compare_logits


def test_memory_options_of_a_quantised_gguf_file(tmp_path):
    path = llama_file(tmp_path, "Q8_0")
    options = {o.weights: o for o in memory_options(path, "cpu", "float32")}
    assert list(options) == ["keep", "bfloat16", "float16", "dequantize"]
    header = read_header(path)
    matrices = [t for t in header.tensors if len(t.shape) == 2]
    rest = sum(t.numel for t in header.tensors if len(t.shape) == 1)
    assert options["keep"].nbytes == sum(t.end - t.start for t in matrices) + 4 * rest
    assert options["bfloat16"].nbytes == 2 * sum(t.numel for t in matrices) + 4 * rest
    assert options["dequantize"].nbytes == 4 * (sum(t.numel for t in matrices) + rest)
    assert choose(list(options.values())).weights == "keep"
    kept = load_checkpoint(path, device="cpu", weights="keep")
    packed = sum(p.nbytes for p in kept.model.modules() if hasattr(p, "raw") and hasattr(p, "type_id"))
    assert packed == sum(t.end - t.start for t in matrices)


def test_memory_options_of_a_bfloat16_directory(tmp_path):
    import torch
    from decoder_reference import build

    model = build("LlamaConfig", "LlamaForCausalLM", num_key_value_heads=2).to(torch.bfloat16)
    model.save_pretrained(tmp_path)
    options = {o.weights: o.nbytes for o in memory_options(tmp_path, "cpu", "float32")}
    matrices = sum(p.numel() for p in model.parameters() if p.dim() == 2)
    rest = sum(p.numel() for p in model.parameters() if p.dim() == 1)
    assert options == {"dequantize": 4 * (matrices + rest), "keep": 2 * matrices + 4 * rest,
                       "bfloat16": 2 * matrices + 4 * rest}
    assert memory_options(tmp_path / "missing", "cpu") == []


def test_info_prints_the_memory_of_each_way(tmp_path, capsys):
    path = llama_file(tmp_path, "Q8_0")
    assert main(["info", "--checkpoint", str(path)]) == 0
    out = capsys.readouterr().out
    assert "--weights keep" in out and "(auto picks it)" in out and "--weights dequantize" in out
    line = next(x for x in out.splitlines() if x.startswith("weights "))
    assert "Q8_0" in line
    assert main(["info", "--checkpoint", str(path), "--weights", "dequantize"]) == 0
    assert next(x for x in capsys.readouterr().out.splitlines() if x.startswith("weights ")).split()[-1] == "float32"


def test_runtime_comparison_numbers():
    gen = np.random.default_rng(0)
    ours = gen.standard_normal((5, 40)).astype(np.float32)
    theirs = ours.copy()
    theirs[2, :] += 0.25  # a shift: the same distribution, the same top token
    theirs[4, int(ours[4].argmax())] -= 10.0  # the top token pushed down
    result = compare_logits(ours, np.concatenate([theirs, np.zeros((5, 3))], axis=1), list(range(5)))
    assert result.top1_same == (True, True, True, True, False)
    assert result.max_delta[0] == 0.0 and result.max_delta[2] == pytest.approx(0.25, abs=1e-6) \
        and result.max_delta[4] == pytest.approx(10, abs=1e-5)
    assert result.kl[2] == pytest.approx(0.0, abs=1e-9) and result.kl[4] > 0.1
    p, q = (np.exp(x.astype(np.float64) - x.max()) for x in (theirs[4], ours[4]))
    p, q = p / p.sum(), q / q.sum()
    assert result.kl[4] == pytest.approx(float((p * np.log(p / q)).sum()), rel=1e-9)
    assert "top-1 agrees at 4 of 5" in result.summary() and "quantised activations" in EXPLAIN
    assert result.lines()[5].startswith("llama.cpp pos 4") and "DIFFERS" in result.lines()[5]


def test_verify_without_the_binding_says_how_to_install_it(tmp_path, monkeypatch):
    from explorer.core import verify_llamacpp
    from explorer.core.verify import verify_checkpoint

    pytest.importorskip("transformers")
    monkeypatch.setattr(verify_llamacpp, "available", lambda: False)
    report = verify_checkpoint(llama_file(tmp_path, "Q8_0"), ids=list(range(1, 9)))
    assert report.runtime is None
    assert any(n.startswith("llama.cpp comparison not run: llama-cpp-python is not installed") for n in report.notes)


def llamacpp_readable_file(tmp_path, qtype: str):
    """A tiny Llama GGUF that llama.cpp itself opens: its BPE vocabulary needs a merges list (at least one
    merge, whose result is a token), which the byte vocabulary of the other tests leaves out."""
    from decoder_reference import build
    from gguf_files import byte_vocabulary, write_model
    from test_quant_keep import WIDE

    vocab = byte_vocabulary(100)
    vocab["tokens"] = vocab["tokens"][:-2] + ["!\"", vocab["tokens"][-1]]
    vocab["merges"] = ["! \""]
    return write_model(build("LlamaConfig", "LlamaForCausalLM", **WIDE), tmp_path / f"llama-{qtype}.gguf", "llama",
                       qtype, tokenizer=vocab)


@pytest.mark.skipif(not available(), reason="llama-cpp-python is not installed")
@pytest.mark.parametrize("qtype", ["F16", "Q8_0", "Q4_K"])
def test_verify_runs_the_file_in_llama_cpp(tmp_path, qtype):
    """The real binding on the same ids: llama.cpp's next-token choice agrees with ours where its quantised
    activations cannot flip it (an F16 file: all of them), and its logits are close."""
    from explorer.core.verify import verify_checkpoint

    report = verify_checkpoint(llamacpp_readable_file(tmp_path, qtype), ids=list(range(1, 9)))
    runtime = report.runtime
    assert runtime is not None and len(runtime.top1_same) == 8
    assert runtime.agreement >= 0.5 and max(runtime.max_delta) < 5.0
    assert any(line.startswith("llama.cpp pos 7") for line in report.lines())


def test_a_llamacpp_crash_is_one_line_and_the_app_stays_up(tmp_path, monkeypatch):
    """llama.cpp runs in a child process: a crash there (here a child that kills itself with SIGSEGV, as a
    malformed file or a CPU path the machine lacks can make llama.cpp do) is one line in the report."""
    from explorer.core import verify_llamacpp

    monkeypatch.setattr(verify_llamacpp, "available", lambda: True)
    monkeypatch.setattr(verify_llamacpp, "_CHILD", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")
    said = verify_llamacpp.compare_with_llamacpp(tmp_path / "m.gguf", np.zeros((2, 4)), [1, 2])
    assert said == "llama.cpp comparison not run: llama.cpp could not run m.gguf (llama.cpp crashed (signal 11))"
