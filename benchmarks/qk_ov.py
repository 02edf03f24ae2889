"""Why a head attends / what it moves: the cost of one QK split, one OV split and one OV circuit on the
last block, beside the forward pass that made the trace (ours, and transformers' on the same weights for
GPT-2), on a GPT-2-small-shaped model (random weights) and optionally a Llama-3.2-1B-shaped one.

    PYTHONPATH=. python benchmarks/qk_ov.py [--tokens 256] [--models gpt2|llama|both] [--device cpu] [--repeat 3]

Each split reads two positions of every earlier block (the heads' z, the FFN outputs, the norm statistics)
and the head's own weights; the OV circuit un-embeds one row per source (chunks of 64) against the whole
vocabulary. Numbers are the median of --repeat runs after one warm-up; the trace is captured once.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from _models import gpt2_small_pair, llama_1b_loaded

from explorer.core.analysis.ov import ov_circuit, ov_split
from explorer.core.analysis.qk import qk_split
from explorer.core.loaded import LoadedModel
from explorer.core.tokenize.base import gpt2_tokenizer


def timed(fn, repeat: int) -> float:
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def section(name: str, loaded: LoadedModel, hf, args: argparse.Namespace) -> None:
    cfg, n = loaded.config, args.tokens
    ids = torch.randint(0, cfg.vocab_size, (n,), generator=torch.Generator().manual_seed(0)).tolist()
    forward = timed(lambda: loaded.trace_ids(ids), args.repeat)
    line = (f"{name}: {n} tokens, device {args.device}, {torch.get_num_threads()} threads; "
            f"trace (ours) {forward * 1e3:.0f} ms")
    if hf is not None:
        with torch.inference_mode():
            reference = timed(lambda: hf(torch.tensor([ids], device=args.device)), args.repeat)
        line += f"; transformers forward {reference * 1e3:.0f} ms"
    print(line)
    trace = loaded.trace_ids(ids)
    layer, head, query = cfg.n_layers - 1, cfg.n_heads - 1, n - 1
    for label, fn in (("qk_split by head", lambda: qk_split(trace, layer, head, query, n // 2)),
                      ("qk_split by layer", lambda: qk_split(trace, layer, head, query, n // 2, by="layer")),
                      ("ov_split", lambda: ov_split(trace, layer, head, query)),
                      ("ov_circuit embedding, 16 sources", lambda: ov_circuit(trace, layer, head, query, limit=16)),
                      ("ov_circuit value, all sources", lambda: ov_circuit(trace, layer, head, query, copy="value"))):
        print(f"  {label}: {timed(fn, args.repeat) * 1e3:.1f} ms")
    split = qk_split(trace, layer, head, query, n // 2)
    error = abs(split.total - split.score)
    print(f"  table {split.table.shape[0]} x {split.table.shape[1]}, |total - score| = {error:.2e}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--models", choices=("gpt2", "llama", "both"), default="gpt2")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if args.models in ("gpt2", "both"):
        hf, ours = gpt2_small_pair()
        loaded = LoadedModel(ours.to(args.device), gpt2_tokenizer(), "gpt2-small-shaped (random)", "benchmark", "gpt2")
        section("GPT-2-small-shaped", loaded, hf.to(args.device), args)
    if args.models in ("llama", "both"):
        section("Llama-3.2-1B-shaped", llama_1b_loaded(args.device), None, args)


if __name__ == "__main__":
    main()
