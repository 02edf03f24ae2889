"""load.py's sections for weights kept as the file stores them (issue 37).

* ``keep-q4_k``: the Llama-3.2-1B shape as Q4_K (random blocks with ordinary scales; gguf cannot quantise into
  Q4_K), 2-D weights Q4_K, norms F32, written tensor by tensor. Loaded three ways in fresh processes:
  ``--weights keep`` with the default memory budget (expanded layers cached), ``keep`` with a budget too small
  for any layer (each expanded as it runs: the resident memory is the file's plus the trace's), and
  ``--weights dequantize`` (what the app did before: every weight float32 at load). Each reports load time,
  resident memory after the load, the first 64-token trace (default capture on the CPU) and the second,
  the peak, and greedy decoding with the KV cache in tokens/s.
* ``gpt-oss``: a gpt-oss-20b-shaped file (24 layers, d_model 2880, 32 experts of 2880, top 4; experts MXFP4,
  the rest Q8_0), random weights, measured like ``keep-q4_k``, plus how the expert banks were expanded: never
  whole (each bank is one packed tensor; an expert's matrices are expanded when a token is routed to it), the
  largest expansion one expert's matrix. The resident growth after the first trace is compared with the file plus
  the trace: the pages of the file the chosen experts touched, the expanded weights the budget caches, and the
  un-embedding expanded whole (vocabulary x d_model in float32: 2.3 GB at the real shape) while the logits run.
* ``dequant``: the dequantisers' MB/s of float32 output, ours (torch, one thread and torch's default) beside
  ``gguf``'s numpy ones, per type.

``--layers N`` (at most N blocks) and ``--scale F`` (the vocabulary and the widths times F, kept whole blocks)
make a reduced run for a busy machine; every header line says so.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
LLAMA_1B = dict(d=2048, layers=16, heads=32, kv=8, ff=8192, vocab=128256)
GPT_OSS_20B = dict(d=2880, layers=24, heads=64, kv=8, head_dim=64, experts=32, used=4, ff=2880, vocab=201088)


def _arg(name: str, default: float) -> float:
    return float(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else default


def reduced() -> tuple[int | None, float]:
    layers = int(_arg("--layers", 0)) or None
    return layers, _arg("--scale", 1.0)


def _round(n: float, multiple: int) -> int:
    return max(multiple, int(n) // multiple * multiple)


def write_llama_q4k(path: Path, layers: int | None, scale: float) -> dict:
    import gguf

    sys.path.insert(0, str(ROOT / "tests"))
    from gguf_files import random_blocks

    s = LLAMA_1B
    d, ff, vocab = _round(s["d"] * scale, 256), _round(s["ff"] * scale, 256), max(256, int(s["vocab"] * scale))
    heads = max(2, int(s["heads"] * scale) // 2 * 2)
    kv, L = max(1, min(s["kv"], heads // 4)), min(layers or s["layers"], s["layers"])
    head_dim = d // heads
    shapes = {"token_embd.weight": (vocab, d), "output_norm.weight": (d,)}
    for i in range(L):
        p = f"blk.{i}."
        shapes.update({p + "attn_norm.weight": (d,), p + "attn_q.weight": (heads * head_dim, d),
                       p + "attn_k.weight": (kv * head_dim, d), p + "attn_v.weight": (kv * head_dim, d),
                       p + "attn_output.weight": (d, heads * head_dim), p + "ffn_norm.weight": (d,),
                       p + "ffn_gate.weight": (ff, d), p + "ffn_up.weight": (ff, d), p + "ffn_down.weight": (d, ff)})
    w = gguf.GGUFWriter(str(path), "llama")
    for key, value in (("context_length", 131072), ("embedding_length", d), ("block_count", L),
                       ("feed_forward_length", ff), ("attention.head_count", heads), ("attention.head_count_kv", kv),
                       ("rope.dimension_count", head_dim), ("vocab_size", vocab)):
        w.add_uint32(f"llama.{key}", value)
    w.add_float32("llama.rope.freq_base", 500000.0)
    w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
    w.add_tokenizer_model("gpt2")
    w.add_token_list([f"t{i}" for i in range(vocab)])
    kind = gguf.GGMLQuantizationType.Q4_K
    for name, shape in shapes.items():
        if len(shape) == 1:
            w.add_tensor_info(name, shape, np.dtype(np.float32), shape[0] * 4)
        else:
            w.add_tensor_info(name, (shape[0], shape[1] // 256 * 144), np.dtype(np.uint8),
                              shape[0] * shape[1] // 256 * 144, raw_dtype=kind)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for i, (name, shape) in enumerate(shapes.items()):
        w.write_tensor_data(np.ones(shape, dtype=np.float32) if len(shape) == 1 else
                            random_blocks(shape, "Q4_K", i, scale=2e-4))
    w.close()
    return {"d_model": d, "layers": L, "vocab": vocab, "d_ff": ff}


CHILD = """
import json, sys, time
sys.path.insert(0, {root!r})
import torch
torch.set_num_threads(2)
from explorer.core.budget import global_budget
from explorer.core.checkpoint import load_checkpoint
from explorer.core.generation.generate import generate
from explorer.core.generation.sampling import SamplingParams
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
from explorer.core.quant.packed import Packed
banks = {{"whole": 0, "expert": 0, "bank": 0}}  # expert banks: whole-bank expansions (must stay 0), largest expert
real_dense, real_expert = Packed.dense, Packed.expert
def dense(self, dtype=None):
    if len(self.shape) == 3:
        banks["whole"] += 1
    return real_dense(self, dtype)
def expert(self, index, dtype=None):
    out = real_expert(self, index, dtype)
    banks["expert"] = max(banks["expert"], out.nbytes)
    banks["bank"] = max(banks["bank"], out.nbytes * self.shape[0])
    return out
Packed.dense, Packed.expert = dense, expert
if {budget} is not None:
    global_budget().set_limit({budget})
before = status("VmRSS")
start = time.perf_counter()
loaded = load_checkpoint({path!r}, device="cpu", dtype="float32", weights={weights!r})
load_seconds, after_load = time.perf_counter() - start, status("VmRSS")
ids = [1 + (7 * i) % (loaded.config.vocab_size - 1) for i in range({tokens})]
start = time.perf_counter()
trace = loaded.trace_ids(ids)
first = time.perf_counter() - start
after_trace, trace_bytes = status("VmRSS"), trace.nbytes
start = time.perf_counter()
loaded.trace_ids(ids)
second = time.perf_counter() - start
del trace
start = time.perf_counter()
out = generate(loaded, ids[:8], SamplingParams(temperature=0.0, max_new_tokens={steps}, stop_at_eos=False))
decode = len(out.token_ids) / (time.perf_counter() - start)
print(json.dumps({{"load": load_seconds, "before": before, "after_load": after_load, "first": first, "second": second,
                  "after_trace": after_trace, "trace_bytes": trace_bytes, "peak": status("VmHWM"), "decode": decode,
                  "cached": global_budget().cached, "budget": global_budget().limit, "weights": loaded.info()["weights"],
                  "banks": banks}}))
"""


def run_child(path: Path, weights: str, budget: int | None, tokens: int, steps: int) -> dict:
    code = CHILD.format(root=str(ROOT), path=str(path), weights=weights, budget=budget, tokens=tokens, steps=steps)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if out.returncode:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else f"status {out.returncode}"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def _report(title: str, path: Path, tokens: int, steps: int) -> None:
    mb = 1e6
    file_mb = path.stat().st_size / mb
    print(f"== {title}: file {file_mb:,.0f} MB ({path.stat().st_size:,} bytes)")
    runs = {"keep, default budget (expanded layers cached)": ("keep", None),
            "keep, budget 64 MB (each layer expanded as it runs)": ("keep", 64 * 2**20),
            "dequantize (every weight float32 at load, as before)": ("dequantize", None)}
    for label, (weights, budget) in runs.items():
        r = run_child(path, weights, budget, tokens, steps)
        if "error" in r:
            print(f"   {label}: failed: {r['error']}")
            continue
        grown = r["after_trace"] - r["before"]
        print(f"   {label}:")
        print(f"      load {r['load']:.2f} s; resident after the load {(r['after_load'] - r['before']) / mb:,.0f} MB "
              f"over the process's {r['before'] / mb:,.0f} MB")
        print(f"      first {tokens}-token trace {r['first']:.2f} s, second {r['second']:.2f} s; resident growth after "
              f"it {grown / mb:,.0f} MB = {grown / (path.stat().st_size + r['trace_bytes']):.2f}x (file + trace "
              f"{r['trace_bytes'] / mb:,.0f} MB); peak {r['peak'] / mb:,.0f} MB; cache {r['cached'] / mb:,.0f} MB of "
              f"a {r['budget'] / mb:,.0f} MB budget")
        print(f"      greedy decoding with the KV cache: {r['decode']:.2f} tokens/s ({steps} tokens)")
        banks = r["banks"]
        if banks["expert"]:
            print(f"      expert banks expanded whole: {banks['whole']} times (must be 0); the largest expansion of a "
                  f"bank: one expert's matrix, {banks['expert'] / mb:,.1f} MB (the whole bank: {banks['bank'] / mb:,.0f} MB)")


def keep_q4k(tmp: Path) -> None:
    layers, scale = reduced()
    path = tmp / "llama-q4_k.gguf"
    shape = write_llama_q4k(path, layers, scale)
    note = "" if layers is None and scale == 1.0 else f" [REDUCED RUN: {shape['layers']} layers, scale {scale}]"
    tokens, steps = int(_arg("--tokens", 64)), int(_arg("--steps", 16))
    _report(f"Llama-3.2-1B-shaped GGUF, Q4_K ({shape}){note}", path, tokens, steps)


def random_raw(shape: tuple[int, ...], qtype: str, seed: int) -> np.ndarray:
    """Random blocks of ``qtype`` for a tensor of ``shape`` whose scales are ordinary small numbers."""
    from explorer.core.quant.dequant import TYPES

    type_id = next(k for k, v in TYPES.items() if v[0] == qtype)
    _, block, nbytes = TYPES[type_id]
    n = int(np.prod(shape)) // block
    gen = np.random.default_rng(seed)
    raw = gen.integers(0, 256, size=(n, nbytes), dtype=np.uint8)
    if qtype == "MXFP4":
        raw[:, 0] = gen.integers(118, 123, size=n, dtype=np.uint8)  # e8m0 exponents: scales of 2^-9 to 2^-5
    else:  # Q8_0: the float16 scale first
        raw[:, :2] = (np.abs(gen.standard_normal(n)) * 2e-4 + 5e-5).astype(np.float16).view(np.uint8).reshape(n, 2)
    return raw.reshape(*shape[:-1], shape[-1] // block * nbytes)


def write_gpt_oss(path: Path, layers: int | None, scale: float) -> dict:
    """A gpt-oss-20b-shaped file as llama.cpp's converter lays it out: experts MXFP4 ([experts, rows, cols]), the
    other matrices Q8_0, norms, biases and the attention sinks F32 (random weights, written tensor by tensor)."""
    import gguf

    s = GPT_OSS_20B
    d, ff = _round(s["d"] * scale, 32), _round(s["ff"] * scale, 32)
    heads, kv, dh = max(2, int(s["heads"] * scale) // 2 * 2), max(1, int(s["kv"] * scale)), s["head_dim"]
    experts, vocab, L = max(s["used"], int(s["experts"] * scale)), max(256, int(s["vocab"] * scale)), \
        min(layers or s["layers"], s["layers"])
    shapes: dict[str, tuple[tuple[int, ...], str]] = {"token_embd.weight": ((vocab, d), "Q8_0"),
                                                       "output_norm.weight": ((d,), "F32"),
                                                       "output.weight": ((vocab, d), "Q8_0")}
    for i in range(L):
        p = f"blk.{i}."
        for name, rows in (("attn_q", heads * dh), ("attn_k", kv * dh), ("attn_v", kv * dh)):
            shapes[p + name + ".weight"], shapes[p + name + ".bias"] = ((rows, d), "Q8_0"), ((rows,), "F32")
        shapes.update({p + "attn_norm.weight": ((d,), "F32"), p + "post_attention_norm.weight": ((d,), "F32"),
                       p + "attn_output.weight": ((d, heads * dh), "Q8_0"), p + "attn_output.bias": ((d,), "F32"),
                       p + "attn_sinks.weight": ((heads,), "F32"), p + "ffn_gate_inp.weight": ((experts, d), "F32"),
                       p + "ffn_gate_inp.bias": ((experts,), "F32")})
        for name, (rows, cols) in (("ffn_gate_exps", (ff, d)), ("ffn_up_exps", (ff, d)), ("ffn_down_exps", (d, ff))):
            shapes[p + name + ".weight"] = ((experts, rows, cols), "MXFP4")
            shapes[p + name + ".bias"] = ((experts, rows), "F32")
    w = gguf.GGUFWriter(str(path), "gpt-oss")
    for key, value in (("context_length", 131072), ("embedding_length", d), ("block_count", L),
                       ("feed_forward_length", ff), ("expert_feed_forward_length", ff), ("attention.head_count", heads),
                       ("attention.head_count_kv", kv), ("attention.key_length", dh), ("attention.value_length", dh),
                       ("expert_count", experts), ("expert_used_count", s["used"]), ("attention.sliding_window", 128),
                       ("rope.scaling.original_context_length", 4096), ("vocab_size", vocab)):
        w.add_uint32(f"gpt-oss.{key}", value)
    for key, value in (("rope.freq_base", 150000.0), ("attention.layer_norm_rms_epsilon", 1e-5),
                       ("rope.scaling.factor", 32.0)):
        w.add_float32(f"gpt-oss.{key}", value)
    w.add_string("gpt-oss.rope.scaling.type", "yarn")
    w.add_tokenizer_model("gpt2")
    w.add_token_list([f"t{i}" for i in range(vocab)])
    for name, (shape, qtype) in shapes.items():
        if qtype == "F32":
            w.add_tensor_info(name, shape, np.dtype(np.float32), int(np.prod(shape)) * 4)
        else:
            raw_shape = shape[:-1] + (shape[-1] // 32 * (17 if qtype == "MXFP4" else 34),)
            w.add_tensor_info(name, raw_shape, np.dtype(np.uint8), int(np.prod(raw_shape)),
                              raw_dtype=gguf.GGMLQuantizationType[qtype])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    gen = np.random.default_rng(1)
    for i, (name, (shape, qtype)) in enumerate(shapes.items()):
        if qtype != "F32":
            w.write_tensor_data(random_raw(shape, qtype, i))
        elif "norm" in name:
            w.write_tensor_data(np.ones(shape, dtype=np.float32))
        else:
            w.write_tensor_data((gen.standard_normal(shape) * 0.02).astype(np.float32))
    w.close()
    return {"d_model": d, "layers": L, "experts": experts, "vocab": vocab, "d_ff": ff}


def gpt_oss(tmp: Path) -> None:
    from explorer.core.checkpoint.gguf_config import ARCHS

    layers, scale = reduced()
    if "gpt-oss" not in ARCHS and "--write-anyway" not in sys.argv:
        print("== gpt-oss-20b-shaped MXFP4 file: NOT RUN: this build has no gpt-oss family (it comes with the "
              "mixture-of-experts work, issue 35); with it, this section writes a gpt-oss-20b-shaped file "
              f"({GPT_OSS_20B}; experts MXFP4, other matrices Q8_0) and measures it as the Q4_K section does")
        return
    path = tmp / "gpt-oss.gguf"
    shape = write_gpt_oss(path, layers, scale)
    note = "" if layers is None and scale == 1.0 else f" [REDUCED RUN: {shape['layers']} layers, scale {scale}]"
    if "gpt-oss" not in ARCHS:  # --write-anyway: the writer checked against our header reader only
        from explorer.core.checkpoint.gguf_validate import read_header

        header = read_header(path)
        print(f"== gpt-oss-shaped file written{note}: {path.stat().st_size / 1e6:,.0f} MB, "
              f"{len(header.tensors)} tensors, {header.tensor_types()}; not loaded (no gpt-oss family here)")
        return
    tokens, steps = int(_arg("--tokens", 64)), int(_arg("--steps", 16))
    _report(f"gpt-oss-20b-shaped GGUF, MXFP4 experts ({shape}){note}", path, tokens, steps)


def dequant_speed() -> None:
    import torch
    from gguf import GGMLQuantizationType as Q
    from gguf import quants

    from explorer.core.quant import dequant

    elements = int(16 * 2**20 * _arg("--scale", 1.0))
    threads = torch.get_num_threads()
    print(f"== dequantising {elements / 2**20:.0f}M numbers of each type (MB/s of float32 output; gguf's numpy "
          f"is single-threaded; torch with 1 and {threads} threads)")
    for name in ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS",
                 "MXFP4"):
        type_id = int(Q[name])
        block, nbytes = dequant.SIZES[type_id]
        raw = np.random.default_rng(0).integers(0, 256, size=(elements // block, nbytes), dtype=np.uint8)
        mb = elements * 4 / 1e6
        with np.errstate(all="ignore"):
            start = time.perf_counter()
            quants.dequantize(raw, Q[name])
            numpy_s = time.perf_counter() - start
        rates = []
        for n in (1, threads):
            torch.set_num_threads(n)
            dequant.dequantize(torch.from_numpy(raw[:64]), type_id)
            start = time.perf_counter()
            dequant.dequantize(torch.from_numpy(raw), type_id)
            rates.append(mb / (time.perf_counter() - start))
        torch.set_num_threads(threads)
        print(f"   {name:<7} gguf numpy {mb / numpy_s:7,.0f}   torch 1 thread {rates[0]:7,.0f}   "
              f"{threads} threads {rates[1]:7,.0f}   ({rates[0] * numpy_s / mb:.1f}x)")


SECTIONS = {"keep-q4_k": keep_q4k, "gpt-oss": gpt_oss}
