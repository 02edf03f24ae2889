"""Loading a checkpoint: time and peak resident memory against the loaded model's size.

For a GPT-2-small-sized model (Hugging Face GPT-2 layout, float32 safetensors, 124M parameters) and a
Llama-3.2-1B-shaped model (16 layers, d_model 2048, 32 query / 8 KV heads, SwiGLU 8192, vocabulary
128,256, tied; native format, bfloat16 safetensors loaded as float32): random weights are written to
a temporary directory tensor by tensor, then a fresh Python process loads the checkpoint and reports
its load time, its resident memory before the load and its peak (VmHWM) after it. The target
(issue 11): peak resident memory while loading <= 1.3x the loaded model's size.

    python benchmarks/load.py [--only gpt2|llama|gguf-q8_0|gguf-q4_0|offload|keep-q4_k|gpt-oss|dequant]
                              [--layers N] [--scale F] [--tokens N] [--steps N]   (a reduced run of issue 37's sections)

Issue 37 (``_quant_sections.py``): a Llama-3.2-1B-shaped Q4_K file loaded with its weights kept as stored
(``--weights keep``, with and without room to cache the expanded layers) beside ``--weights dequantize``;
a gpt-oss-20b-shaped MXFP4 file (when the gpt-oss family is there); the dequantisers' MB/s beside gguf's.

The offload section (issue 22) loads the same Llama-3.2-1B-shaped model with ``--max-memory cpu=`` half its
size (``--device-map sequential``, the rest offloaded to disk, one safetensors file per block): load time,
the first trace's time, resident weights and peak resident memory while loading and while tracing against the
budget. The load streams (core/checkpoint/streamed.py): the plan comes from the configuration, then one
block at a time is read, converted and kept or written to the offload folder, so the load's own peak is
the budget plus about one block, not the whole model. Measured on 2 shared CPU cores (load average ~12):
a 4,943 MB model, budget 2,472 MB: load peak 5,282 MB before streaming (the whole model read first),
2,884 MB after (1.17x the budget, 238 MB of it the process before the load); resident weights 2,267 MB.

GGUF (issue 25): the same Llama-3.2-1B shape written as llama.cpp lays it out, 2-D weights in Q8_0
or Q4_0 (the blocks of one random quantised sample, tiled), norms in F32, streamed to the file
tensor by tensor; the load dequantises every tensor into float32, so besides time and peak memory
it reports the dequantising rate (MB of float32 weights per second, and MB of file per second).
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

_DTYPES = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16"}


def write_safetensors(path: Path, shapes: dict[str, tuple[int, ...]], dtype: torch.dtype, seed: int = 0) -> None:
    """A safetensors file of random tensors, written one tensor at a time (never the whole model in memory)."""
    item = torch.empty((), dtype=dtype).element_size()
    header, offset = {}, 0
    for name, shape in shapes.items():
        n = item
        for s in shape:
            n *= s
        header[name] = {"dtype": _DTYPES[dtype], "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    gen = torch.Generator().manual_seed(seed)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for name, shape in shapes.items():
            t = (torch.randn(shape, generator=gen) * 0.02).to(dtype)
            if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight", "norm.weight", "layernorm.weight",
                              "ln1.weight", "ln2.weight", "ln_final.weight")):
                t.fill_(1.0)
            f.write(t.contiguous().view(-1).view(torch.uint8).numpy().tobytes())


def gpt2_small(directory: Path) -> None:
    d, V, L, ctx = 768, 50257, 12, 1024
    shapes = {"transformer.wte.weight": (V, d), "transformer.wpe.weight": (ctx, d)}
    for i in range(L):
        p = f"transformer.h.{i}."
        shapes.update({p + "ln_1.weight": (d,), p + "ln_1.bias": (d,), p + "attn.c_attn.weight": (d, 3 * d),
                       p + "attn.c_attn.bias": (3 * d,), p + "attn.c_proj.weight": (d, d), p + "attn.c_proj.bias": (d,),
                       p + "ln_2.weight": (d,), p + "ln_2.bias": (d,), p + "mlp.c_fc.weight": (d, 4 * d),
                       p + "mlp.c_fc.bias": (4 * d,), p + "mlp.c_proj.weight": (4 * d, d), p + "mlp.c_proj.bias": (d,)})
    shapes.update({"transformer.ln_f.weight": (d,), "transformer.ln_f.bias": (d,)})
    directory.mkdir(parents=True)
    (directory / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_layer": L, "n_head": 12, "n_embd": d,
                                                       "vocab_size": V, "n_positions": ctx}))
    write_safetensors(directory / "model.safetensors", shapes, torch.float32)


def llama_1b(directory: Path) -> None:
    from explorer.core.checkpoint.convert import expected_shapes
    from explorer.core.config import ModelConfig

    cfg = ModelConfig(arch="llama", vocab_size=128256, n_ctx=131072, d_model=2048, n_layers=16, n_heads=32,
                      d_head=64, d_ff=8192, n_kv_heads=8, norm="rmsnorm", norm_eps=1e-5, positions="rotary",
                      rotary_base=500000.0, activation="silu", gated_ffn=True, attn_bias=False, mlp_bias=False,
                      tie_embeddings=True)
    shapes = {k: v for k, v in expected_shapes(cfg).items() if k != "unembed.weight"}
    directory.mkdir(parents=True)
    tokenizer = {"type": "vocab", "tokens": [chr(ord("a") + i) for i in range(26)], "split": "chars"}
    (directory / "config.json").write_text(json.dumps({"format": "transformer-explorer", "version": 1,
                                                       "name": "llama-1b-shaped", "model": cfg.to_dict(),
                                                       "tokenizer": tokenizer}))
    write_safetensors(directory / "model.safetensors", shapes, torch.bfloat16)


def llama_1b_gguf(directory: Path, qtype: str) -> None:
    """A Llama-3.2-1B-shaped GGUF file (``model.gguf``), its tensors streamed one at a time."""
    import gguf
    import numpy as np

    from explorer.core.checkpoint.gguf_validate import TYPES

    kind = gguf.GGMLQuantizationType[qtype]
    d, L, heads, kv, ff, V = 2048, 16, 32, 8, 8192, 128256
    shapes = {"token_embd.weight": (V, d), "output_norm.weight": (d,)}
    for i in range(L):
        p = f"blk.{i}."
        shapes.update({p + "attn_norm.weight": (d,), p + "attn_q.weight": (heads * 64, d),
                       p + "attn_k.weight": (kv * 64, d), p + "attn_v.weight": (kv * 64, d),
                       p + "attn_output.weight": (d, heads * 64), p + "ffn_norm.weight": (d,),
                       p + "ffn_gate.weight": (ff, d), p + "ffn_up.weight": (ff, d), p + "ffn_down.weight": (d, ff)})
    sample = gguf.quants.quantize(np.random.default_rng(0).standard_normal((256, d), dtype=np.float32) * 0.02, kind)
    directory.mkdir(parents=True)
    w = gguf.GGUFWriter(str(directory / "model.gguf"), "llama")
    for key, value in (("context_length", 131072), ("embedding_length", d), ("block_count", L),
                       ("feed_forward_length", ff), ("attention.head_count", heads), ("attention.head_count_kv", kv),
                       ("rope.dimension_count", 64), ("vocab_size", V)):
        w.add_uint32(f"llama.{key}", value)
    w.add_float32("llama.rope.freq_base", 500000.0)
    w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
    w.add_tokenizer_model("gpt2")
    w.add_token_list([chr(ord("a") + i) for i in range(26)])
    _, block, nbytes = TYPES[int(kind)]
    for name, shape in shapes.items():
        if len(shape) == 1:
            w.add_tensor_info(name, shape, np.dtype(np.float32), shape[0] * 4)
        else:
            w.add_tensor_info(name, (shape[0], shape[1] // block * nbytes), np.dtype(np.uint8),
                              shape[0] * shape[1] // block * nbytes, raw_dtype=kind)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for name, shape in shapes.items():
        if len(shape) == 1:
            w.write_tensor_data(np.ones(shape, dtype=np.float32))
            continue
        rows = np.resize(sample, (shape[0], sample.shape[1])) if shape[1] == d else \
            np.resize(gguf.quants.quantize(np.random.default_rng(1).standard_normal((64, shape[1]), dtype=np.float32)
                                           * 0.02, kind), (shape[0], shape[1] // block * nbytes))
        w.write_tensor_data(np.ascontiguousarray(rows))
    w.close()


CHILD = """
import json, sys, time
sys.path.insert(0, {root!r})
import torch
torch.set_num_threads(2)
from explorer.core.checkpoint import load_checkpoint
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
before = status("VmRSS")
start = time.perf_counter()
loaded = load_checkpoint({path!r}, device="cpu", dtype="float32")
seconds = time.perf_counter() - start
model_bytes = sum(p.numel() * p.element_size() for p in {{id(p): p for p in loaded.model.parameters()}}.values())
print(json.dumps({{"seconds": seconds, "before": before, "peak": status("VmHWM"), "after": status("VmRSS"),
                  "model_bytes": model_bytes, "params": loaded.n_params}}))
"""


OFFLOAD_CHILD = """
import json, sys, time
sys.path.insert(0, {root!r})
import torch
torch.set_num_threads(2)
from explorer.core.checkpoint import load_checkpoint
from explorer.core.placement import Placement, describe, resident_bytes
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
before = status("VmRSS")
start = time.perf_counter()
loaded = load_checkpoint({path!r}, device="cpu", dtype="float32",
                         placement=Placement("sequential", {{"cpu": {budget}}}, {offload!r}))
seconds = time.perf_counter() - start
load_peak, after = status("VmHWM"), status("VmRSS")
open("/proc/self/clear_refs", "w").write("5")  # reset the peak: what follows is the trace's own
start = time.perf_counter()
trace = loaded.trace_ids([1 + i % 25 for i in range(32)])
trace_seconds = time.perf_counter() - start
start = time.perf_counter()
trace2 = loaded.trace_ids([1 + i % 25 for i in range(32)])
second_seconds = time.perf_counter() - start
print(json.dumps({{"seconds": seconds, "before": before, "load_peak": load_peak, "after": after,
                  "trace_seconds": trace_seconds, "second_seconds": second_seconds, "trace_peak": status("VmHWM"),
                  "resident": resident_bytes(loaded.model), "where": describe(loaded.model)}}))
"""


def measure(path: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD.format(root=str(ROOT), path=str(path))], capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def offload(tmp: str) -> None:
    directory = Path(tmp) / "llama-offload"
    llama_1b(directory)
    plain = measure(directory)
    budget = plain["model_bytes"] // 2
    (Path(tmp) / "offload").mkdir(exist_ok=True)  # --offload-dir must exist
    out = subprocess.run([sys.executable, "-c", OFFLOAD_CHILD.format(root=str(ROOT), path=str(directory), budget=budget,
                                                                     offload=str(Path(tmp) / "offload"))],
                         capture_output=True, text=True)
    if out.returncode:
        sys.exit(f"the offloaded load failed:\n{out.stderr[-3000:]}")
    r = json.loads(out.stdout.strip().splitlines()[-1])
    mb = 1e6
    print(f"== offload: Llama-3.2-1B-shaped, model {plain['model_bytes'] / mb:,.0f} MB, --max-memory cpu={budget / mb:,.0f} MB "
          f"(half), the rest on disk: {r['where']}")
    print(f"   load {r['seconds']:.2f} s (without offload {plain['seconds']:.2f} s); load peak {r['load_peak'] / mb:,.0f} MB "
          f"= {r['load_peak'] / budget:.2f}x the budget (process before the load {r['before'] / mb:,.0f} MB; growth "
          f"{(r['load_peak'] - r['before']) / mb:,.0f} MB); after the load {r['after'] / mb:,.0f} MB resident")
    print(f"   resident weights {r['resident'] / mb:,.0f} MB against the budget {budget / mb:,.0f} MB")
    print(f"   first trace (32 tokens) {r['trace_seconds']:.2f} s, second {r['second_seconds']:.2f} s; peak resident "
          f"while tracing {r['trace_peak'] / mb:,.0f} MB = {r['trace_peak'] / budget:.2f}x the budget "
          f"(the budget + one block read from disk + the process)")


def main() -> None:
    only = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else None
    models = {"gpt2": ("GPT-2-small-sized (HF GPT-2 layout, float32 file)", gpt2_small),
              "llama": ("Llama-3.2-1B-shaped (native, bfloat16 file -> float32)", llama_1b),
              "gguf-q8_0": ("Llama-3.2-1B-shaped GGUF, Q8_0 -> float32", lambda p: llama_1b_gguf(p, "Q8_0")),
              "gguf-q4_0": ("Llama-3.2-1B-shaped GGUF, Q4_0 -> float32", lambda p: llama_1b_gguf(p, "Q4_0"))}
    from _quant_sections import SECTIONS, dequant_speed

    if only == "dequant":
        return dequant_speed()
    with tempfile.TemporaryDirectory(prefix="load-bench-") as tmp:
        if only == "offload":
            return offload(tmp)
        if only in SECTIONS:
            return SECTIONS[only](Path(tmp))
        for key, (title, write) in models.items():
            if only and key != only:
                continue
            directory = Path(tmp) / key
            write(directory)
            file_mb = sum(f.stat().st_size for f in directory.iterdir()) / 1e6
            r = measure(directory / "model.gguf" if key.startswith("gguf") else directory)
            grew = r["peak"] - r["before"]
            print(f"== {title}: {r['params'] / 1e6:,.1f}M parameters, model {r['model_bytes'] / 1e6:,.0f} MB, "
                  f"files {file_mb:,.0f} MB")
            print(f"   load {r['seconds']:.2f} s; resident before {r['before'] / 1e6:,.0f} MB, peak {r['peak'] / 1e6:,.0f} MB, "
                  f"after {r['after'] / 1e6:,.0f} MB")
            print(f"   peak growth while loading / model size: {grew / r['model_bytes']:.2f}x (target <= 1.3x)")
            if key.startswith("gguf"):
                print(f"   dequantising: {r['model_bytes'] / 1e6 / r['seconds']:,.0f} MB/s of float32 weights, "
                      f"{file_mb / r['seconds']:,.0f} MB/s of file")
        if only is None:
            offload(tmp)
            for section in SECTIONS.values():
                section(Path(tmp))
            dequant_speed()


if __name__ == "__main__":
    main()
