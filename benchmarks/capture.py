"""Capture overhead and memory: our forward pass and Trace against transformers' forward.

GPT-2-small shape (124M parameters, random weights), float32, CPU, 2 threads, batch 1, at 128,
512 and 1024 tokens, measured side by side in one run:

* transformers' plain forward (its default attention), and with
  ``output_attentions=True, output_hidden_states=True``;
* our plain forward, and our forward with full capture (``CaptureSpec.full()``: everything but
  the n x n scores/patterns, which are derived per head from the stored q and k);
* the ratios of each to transformers' plain forward;
* the Trace's bytes for the full and the compact capture (residual stream, q, k, norm stats);
* the time to get one head's scores and pattern from a compact Trace (median and max over heads);
* the peak memory (max RSS) of a fresh process doing each kind of forward at the longest length.

With ``--llama`` (or when the Llama loader exists) a Llama-shaped model of similar size is measured too.

With ``--device cuda|cpu`` (or ``--sections``) it measures the sections of benchmarks/_sections.py instead
(GPT-2 small, Llama-3.2-1B and -3.1-8B shapes on a GPU; SmolLM2-135M at 4096 tokens on the CPU):
transformers' plain forward, ours plain, ours recording (the device's default capture: compact and
kept on the device for a GPU, full on the host for the CPU), ``capture()`` whole (the Trace built,
nothing copied to the host), the Trace's bytes, one head's pattern derived and brought to the host,
and TransformerLens' ``run_with_cache`` where it is installed (TL 4: ``TransformerBridge`` around the
same transformers model, default mode; TL 3.x: ``HookedTransformer``), its logits checked against
transformers' first. ``--max-layers`` / ``--tokens`` make a reduced run (said in the header), e.g. to
show that the GPU sections run end to end on a CPU.

Mixtures of experts (sections olmoe-1024 on the CPU, qwen3moe-1024 on a GPU): the same lines, transformers'
experts kernel named beside its time.

Usage: python benchmarks/capture.py [--lengths 128 512 1024] [--repeats 3] [--no-memory]
       python benchmarks/capture.py --device cuda --dtype bfloat16 [--sections llama1b-8192 ...]
       python benchmarks/capture.py --device cpu --sections gpt2-1024 llama8b-8192 --max-layers 2 --tokens 256
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from _models import gpt2_small_pair  # noqa: E402


def llama_pair():
    """A Llama-shaped model of GPT-2-small size: 12 layers, d=768, 12 heads (4 K/V heads), SwiGLU 2048."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from explorer.core.checkpoint import llama as hf_loaders
    from explorer.core.checkpoint.safe_io import assign_weights
    from explorer.core.model import Transformer

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=32000, hidden_size=768, intermediate_size=2048, num_hidden_layers=12,
                         num_attention_heads=12, num_key_value_heads=4, max_position_embeddings=2048)
    hf = LlamaForCausalLM(config).eval()
    cfg, _ = hf_loaders.llama_config(config.to_dict())
    ours = Transformer(cfg)
    assign_weights(ours, hf_loaders.convert_llama(hf.state_dict(), cfg), "benchmark")
    return hf, ours.eval()


def best_of(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def measure(name: str, pair, lengths: list[int], repeats: int, device: str = "cpu",
            dtype: torch.dtype = torch.float32) -> None:
    from explorer.core.trace import CaptureSpec, Recorder, capture

    hf, ours = pair
    hf.to(device, dtype)
    ours.to(device, dtype)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    vocab = ours.cfg.vocab_size
    print(f"\n== {name}: {ours.num_parameters() / 1e6:.1f}M parameters, {str(dtype).replace('torch.', '')}, "
          f"{device}, "
          f"{torch.get_num_threads()} threads ==")
    print(f"{'tokens':>6} | {'hf plain':>9} {'hf +attn+hid':>13} | {'ours plain':>10} {'ours capture':>12} | "
          f"{'ratio plain':>11} {'ratio capture':>13} {'ratio hf+out':>12} | {'full trace':>10} {'compact':>9} | "
          f"{'head ms med/max':>15}")
    for n in lengths:
        ids = torch.randint(0, vocab, (1, n), generator=torch.Generator().manual_seed(n)).to(device)
        with torch.inference_mode():
            t_hf = best_of(lambda: (hf(ids), sync()), repeats)
            t_hf_out = best_of(lambda: (hf(ids, output_attentions=True, output_hidden_states=True), sync()), repeats)
            t_ours = best_of(lambda: (ours(ids), sync()), repeats)
            t_cap = best_of(lambda: (ours(ids, Recorder(CaptureSpec.full())), sync()), repeats)
        tokens = ["t"] * n
        full, _ = capture(ours, ids[0].tolist(), tokens, CaptureSpec.full())
        compact, _ = capture(ours, ids[0].tolist(), tokens, CaptureSpec.compact())
        full_bytes = full.nbytes
        del full
        head_times = []
        L, H = ours.cfg.n_layers, ours.cfg.n_heads
        for layer in range(L):
            for head in range(H):
                t0 = time.perf_counter()
                compact.head(layer, head, "scores")
                compact.head(layer, head, "pattern")
                head_times.append((time.perf_counter() - t0) * 1000)
        print(f"{n:>6} | {t_hf:>8.3f}s {t_hf_out:>12.3f}s | {t_ours:>9.3f}s {t_cap:>11.3f}s | "
              f"{t_ours / t_hf:>11.2f} {t_cap / t_hf:>13.2f} {t_hf_out / t_hf:>12.2f} | "
              f"{full_bytes / 2**20:>8.0f}MB {compact.nbytes / 2**20:>7.0f}MB | "
              f"{statistics.median(head_times):>6.1f}/{max(head_times):>6.1f}")
        del compact


def _rss_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def peak_memory_child(kind: str, model: str, n: int) -> None:
    """Run in a fresh process: build the models, keep the one measured, reset the peak, run one
    forward of ``kind`` keeping its outputs alive, and print the resident memory before and the peak."""
    import gc

    from explorer.core.trace import CaptureSpec, capture

    torch.set_num_threads(2)
    hf, ours = gpt2_small_pair() if model == "gpt2" else llama_pair()
    if kind.startswith("hf"):
        del ours
        ours = None
    else:
        del hf
        hf = None
    gc.collect()
    vocab = hf.config.vocab_size if hf is not None else ours.cfg.vocab_size
    ids = torch.randint(0, vocab, (1, n), generator=torch.Generator().manual_seed(n))
    Path("/proc/self/clear_refs").write_text("5")  # reset the peak (VmHWM) to the current size
    base = _rss_mb("VmRSS")
    with torch.inference_mode():
        if kind == "hf_plain":
            kept = hf(ids)
        elif kind == "hf_outputs":
            kept = hf(ids, output_attentions=True, output_hidden_states=True)
        elif kind == "ours_plain":
            kept = ours(ids)
        else:
            kept = capture(ours, ids[0].tolist(), ["t"] * n,
                           CaptureSpec.full() if kind == "ours_full" else CaptureSpec.compact())
    peak = _rss_mb("VmHWM")
    del kept
    print(json.dumps({"base_mb": base, "peak_mb": peak}))


def memory_table(model: str, n: int) -> None:
    print(f"\npeak memory of a fresh process, {model}, {n} tokens (resident set; 'model' = with the one model "
          f"measured, before the forward; outputs kept alive):")
    for kind in ("hf_plain", "hf_outputs", "ours_plain", "ours_full", "ours_compact"):
        out = subprocess.run([sys.executable, __file__, "--child", kind, model, str(n)],
                             capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
        r = json.loads(out)
        print(f"  {kind:<13} model {r['base_mb']:>7.0f} MB   peak {r['peak_mb']:>7.0f} MB   "
              f"forward adds {r['peak_mb'] - r['base_mb']:>6.0f} MB")


def run_sections(args, names: list[str]) -> None:
    import _sections as sec

    from explorer.core.budget import global_budget
    from explorer.core.trace import CaptureSpec, Recorder, capture

    dtype = getattr(torch, args.dtype)
    for name in names:
        s = sec.build(name, args.device, dtype, args.max_layers, args.tokens)
        print(s.header("capture"))
        ids, hf, ours, dev, reps = s.ids(), s.hf, s.loaded.model, args.device, args.repeats
        spec = CaptureSpec.default_for(dev)
        tokens = ["t"] * s.tokens
        if dev.startswith("cuda"):
            torch.cuda.reset_peak_memory_stats()
        with torch.inference_mode():  # interleaved rounds: the machine's load changes favour none
            t_hf, t_ours, t_rec, t_cap = sec.interleaved(
                [lambda: hf(ids), lambda: ours(ids), lambda: ours(ids, Recorder(spec)),
                 lambda: capture(ours, ids[0].tolist(), tokens, spec, host_logits=False)], reps, dev)
        trace, _ = capture(ours, ids[0].tolist(), tokens, spec, host_logits=False)
        last = s.layers - 1
        t0 = time.perf_counter()
        trace.head(last, 0, "pattern")  # derived where the trace lives, then copied to the host
        t_head = time.perf_counter() - t0
        where = f"{spec.storage} ({'compact' if spec == CaptureSpec.compact(storage=spec.storage) else 'full'})"
        kernel = getattr(hf.config, "_experts_implementation", None) if ours.cfg.is_moe else None
        print(f"  transformers {transformers_version()} plain forward  {t_hf:8.3f}s"
              + (f"   (its experts kernel: {kernel}; ours runs each expert on its tokens)" if kernel else ""))
        print(f"  ours plain forward                 {t_ours:8.3f}s   ratio {t_ours / t_hf:5.2f}")
        print(f"  ours recording, {where:<18} {t_rec:8.3f}s   ratio {t_rec / t_hf:5.2f}   (target <= 1.2)")
        print(f"  ours capture() -> Trace            {t_cap:8.3f}s   ratio {t_cap / t_hf:5.2f}")
        print(f"  Trace stored {trace.nbytes / 2**20:.0f} MB ({trace.storage}); one head's pattern "
              f"[{s.tokens}x{s.tokens}] derived and on the host in {t_head * 1000:.0f} ms; "
              f"{global_budget().describe()}{sec.peak_line(dev)}")
        del trace
        sec.release(dev)
        print(sec.transformer_lens_line(s, ids, reps, baseline=t_hf,  # last: a TL 4 bridge wraps hf
                                        beside=(lambda: ours(ids), t_ours))[0])
        s = hf = ours = None  # the next section builds its own
        sec.release(dev)


def transformers_version() -> str:
    import transformers

    return transformers.__version__


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lengths", type=int, nargs="+", default=[128, 512, 1024])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-memory", action="store_true")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--llama", action="store_true", help="also measure a Llama-shaped model")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    import _sections

    _sections.add_arguments(parser)
    args = parser.parse_args()
    args.device_given = _sections.device_given(sys.argv[1:])
    if args.child:
        peak_memory_child(args.child[0], args.child[1], int(args.child[2]))
        return
    torch.set_num_threads(args.threads)
    sections = _sections.wanted(args)
    if sections is not None:
        run_sections(args, sections)
        return
    models = [("GPT-2 small", gpt2_small_pair, "gpt2")]
    try:
        import explorer.core.checkpoint.llama  # noqa: F401
        has_llama = True
    except ImportError:
        has_llama = False
    if args.llama or has_llama:
        models.append(("Llama-shaped", llama_pair, "llama"))
    for name, make, key in models:
        measure(name, make(), args.lengths, args.repeats, args.device, getattr(torch, args.dtype))
        if not args.no_memory and args.device == "cpu":
            memory_table(key, max(args.lengths))


if __name__ == "__main__":
    main()
