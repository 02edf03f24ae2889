"""Corpus runs on the GPT-2-small shape: speed against transformers, the database's size, memory, reading speed.

GPT-2 small (124M parameters, random weights, GPT-2's tokenizer) reads the bundled sample corpus (two
copies, ~1.7M tokens, when more than one is needed) in windows of ``--window`` tokens:

* ours: ``run_corpus`` end to end (tokenizing, every neuron's top-20 / sums / histogram, every head's five
  statistics, chance levels and top pairs, one SQLite commit per batch), in a child process;
* transformers: ``GPT2LMHeadModel``'s plain forward (its default attention) over the same batches of the same
  token ids, already tokenized, timed alone; the ratio ours / transformers in tokens per second (goal >= 0.8);
* the database's size, and per million tokens;
* the run's memory: the child's RSS after 25 %, 50 % and 100 % of the tokens and its peak (and the GPU's
  peak allocation): flat means the memory does not grow with the corpus;
* opening a neuron's top examples: ``open_run`` then ``top_examples`` for random neurons, each in a fresh
  process-level open (median and max, goal <= 50 ms), and warm.
* the same in the window (``--no-window`` skips it): the Neurons panel's "Over the corpus" tab showing a
  neuron's top examples and corpus histogram, alone and within a whole neuron switch, repaint included
  (benchmarks/_corpus_window.py).

Usage: python benchmarks/corpus.py [--device cuda] [--tokens 1000000] [--window 1024] [--batch B]
       python benchmarks/corpus.py --device cpu --max-layers 1 --tokens 4096 --window 128   (a smoke run)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402


def gpt2_pair(layers: int | None):
    """(transformers' GPT-2 small, our Transformer) on the same random weights; ``layers`` keeps the first few."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from explorer.core.checkpoint.gpt2 import convert_gpt2, gpt2_config
    from explorer.core.checkpoint.safe_io import assign_weights
    from explorer.core.model import Transformer

    torch.manual_seed(0)
    hf = GPT2LMHeadModel(GPT2Config(**({"n_layer": layers} if layers else {}))).eval()
    cfg = gpt2_config(hf.config.to_dict())
    ours = Transformer(cfg)
    assign_weights(ours, convert_gpt2(dict(hf.state_dict()), cfg), "GPT2LMHeadModel(GPT2Config())")
    return hf, ours.eval()


def loaded_model(args):
    from explorer.core.loaded import LoadedModel
    from explorer.core.tokenize.base import gpt2_tokenizer

    hf, ours = gpt2_pair(args.max_layers)
    dtype = getattr(torch, args.dtype)
    return hf.to(args.device, dtype), LoadedModel(ours.to(args.device, dtype), gpt2_tokenizer(),
                                                  "gpt2-small-shaped", "benchmark", "gpt2")


def corpus_folder(tmp: Path, copies: int) -> Path:
    from explorer.core.corpus.reading import sample_path

    folder = tmp / "corpus"
    folder.mkdir()
    for i in range(copies):
        shutil.copy(sample_path(), folder / f"sample{i}.jsonl.gz")
    return folder


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def child(args) -> None:
    """Our corpus run alone in this process: prints one JSON line of what it measured."""
    from explorer.core.corpus.run import run_corpus

    torch.set_num_threads(args.threads)
    _, loaded = loaded_model(args)
    marks, samples = [0.25, 0.5, 1.0], {}

    peak = [rss_mb()]

    def progress(p):
        peak[0] = max(peak[0], rss_mb())
        while marks and p.tokens >= marks[0] * args.tokens:
            samples[f"{int(marks.pop(0) * 100)}%"] = round(rss_mb(), 1)

    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    t0 = time.perf_counter()
    summary = run_corpus(loaded, args.corpus, args.out, tokens=args.tokens, window=args.window, batch=args.batch,
                         progress=progress)
    sync()
    seconds = time.perf_counter() - t0
    gpu = torch.cuda.max_memory_allocated() / 2**20 if args.device.startswith("cuda") else None
    print(json.dumps({"tokens": summary.tokens, "seconds": seconds, "rss": samples, "windows": summary.windows,
                      "run_peak": peak[0], "process_peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                      "gpu_peak": gpu}))


def baseline(args, hf) -> tuple[int, float]:
    """transformers' plain forward over the same batches: (tokens, seconds), tokenized beforehand."""
    from explorer.core.corpus.reading import Corpus
    from explorer.core.corpus.run import default_batch
    from explorer.core.corpus.windows import batches
    from explorer.core.tokenize.base import gpt2_tokenizer

    batch = args.batch
    if batch is None:
        from explorer.core.checkpoint.gpt2 import gpt2_config

        batch = default_batch(gpt2_config(hf.config.to_dict()), args.window, torch.device(args.device))
    ids = [torch.as_tensor(b.ids, device=args.device) for b in
           batches(Corpus(args.corpus), gpt2_tokenizer(), args.window, batch, limit=args.tokens)]
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    with torch.inference_mode():
        hf(ids[0])  # warm-up
        sync()
        t0 = time.perf_counter()
        for x in ids:
            hf(x)
        sync()
    return sum(int(x.numel()) for x in ids), time.perf_counter() - t0


def open_times(path: Path, units: int, layers: int, count: int = 50) -> tuple[list[float], list[float]]:
    """Milliseconds to open the run and read one neuron's top examples (fresh opens), and warm reads."""
    import random

    from explorer.core.corpus.read import open_run

    rng = random.Random(0)
    cold, warm = [], []
    for _ in range(count):
        layer, unit = rng.randrange(layers), rng.randrange(units)
        t0 = time.perf_counter()
        with open_run(path) as run:
            run.top_examples("neurons", layer, unit)
            cold.append((time.perf_counter() - t0) * 1000)
            t0 = time.perf_counter()
            run.top_examples("neurons", (layer + 1) % layers, (unit + 1) % units)
            warm.append((time.perf_counter() - t0) * 1000)
    return cold, warm


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--tokens", type=int, default=1_000_000)
    parser.add_argument("--window", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=None)
    parser.add_argument("--max-layers", type=int, default=None, help="a reduced run: the first layers only")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-window", action="store_true", help="skip the window's time to open top examples")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--corpus", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return 0
    torch.set_num_threads(args.threads)
    tmp = Path(tempfile.mkdtemp(prefix="corpus-bench-"))
    try:
        args.corpus = str(corpus_folder(tmp, 1 if args.tokens <= 800_000 else 2))
        args.out = str(tmp / "run.db")
        hf, _ = loaded_model(args)
        layers = hf.config.n_layer
        reduced = f", first {layers} layers only" if args.max_layers else ""
        print(f"GPT-2-small shape{reduced}, {args.dtype}, {args.device}, window {args.window}, "
              f"{args.tokens:,} tokens of the bundled sample; torch {torch.__version__}, {args.threads} CPU threads")
        hf_tokens, hf_seconds = baseline(args, hf)
        del hf
        command = [sys.executable, __file__, "--child", *sys.argv[1:], "--corpus", args.corpus, "--out", args.out]
        done = subprocess.run(command, capture_output=True, text=True, check=True)
        ours = json.loads(done.stdout.strip().splitlines()[-1])
        ours_rate, hf_rate = ours["tokens"] / ours["seconds"], hf_tokens / hf_seconds
        print(f"transformers plain forward: {hf_rate:,.0f} tokens/s ({hf_tokens:,} tokens, {hf_seconds:.1f} s)")
        print(f"corpus run, end to end:     {ours_rate:,.0f} tokens/s ({ours['tokens']:,} tokens, "
              f"{ours['seconds']:.1f} s) = {ours_rate / hf_rate:.2f}x transformers (goal >= 0.8x)")
        size = sum(p.stat().st_size for p in tmp.glob("run.db*"))
        import sqlite3

        con = sqlite3.connect(args.out)
        windows = con.execute("SELECT sum(length(tokens) + length(docs)) FROM windows").fetchone()[0]
        con.close()
        per_million = windows / 2**20 / (ours["tokens"] / 1e6)
        print(f"database: {size / 2**20:.1f} MB: the windows {per_million:.1f} MB per million tokens, the rest "
              f"({(size - windows) / 2**20:.1f} MB: vocabulary, every unit's top-k, sums and histogram) fixed "
              f"({ours['windows']:,} windows)")
        gpu = f", GPU peak {ours['gpu_peak']:.0f} MB" if ours["gpu_peak"] is not None else ""
        print(f"run memory (RSS MB) at {', '.join(f'{k} {v}' for k, v in ours['rss'].items())}; peak during the run "
              f"{ours['run_peak']:.0f} MB (the process's, building the model included: {ours['process_peak']:.0f} MB)"
              f"{gpu}")
        cold, warm = open_times(Path(args.out), 3072, layers)
        print(f"open a neuron's top examples: median {statistics.median(cold):.1f} ms, max {max(cold):.1f} ms "
              f"(open + read, 50 neurons; goal <= 50 ms); warm median {statistics.median(warm):.1f} ms")
        if not args.no_window:
            from _corpus_window import line, window_open_times

            _, loaded = loaded_model(args)  # the same seed: the weights the run's fingerprint names
            print(line(*window_open_times(loaded, Path(args.out), args.device)))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
