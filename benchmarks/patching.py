"""Activation patching on the GPT-2-small-sized model at 64 tokens: a full layer x position grid
(13 x 64 = 832 patched runs) batched, against the naive loop of one full forward per cell.

    PYTHONPATH=. python benchmarks/patching.py [--tokens 64] [--batch 32] [--naive-sample 24]

The naive loop is timed on ``--naive-sample`` cells and scaled to the grid (it would take minutes);
both run on the same machine one after the other, so compare the ratio, not the seconds, on a busy one.
"""

from __future__ import annotations

import argparse
import time

import torch
from _models import gpt2_small_pair

from explorer.core.interventions.apply import Intervener, record_sites
from explorer.core.interventions.patching import activation_patching, patch_for


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--naive-sample", type=int, default=24)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    model = gpt2_small_pair()[1].to(args.device)  # random weights: the timing does not depend on them
    cfg, n = model.cfg, args.tokens
    gen = torch.Generator().manual_seed(0)
    clean = torch.randint(0, cfg.vocab_size, (n,), generator=gen).tolist()
    corrupt = list(clean)
    corrupt[n // 3] = (clean[n // 3] + 1) % cfg.vocab_size  # one token differs, a third of the way in
    target, distractor = clean[-1], corrupt[-1] ^ 1
    print(f"model: GPT-2-small-shaped (random), {model.num_parameters() / 1e6:.0f}M parameters, {n} tokens, "
          f"{torch.get_num_threads()} threads, device {args.device}")

    cells = (cfg.n_layers + 1) * n
    t0 = time.perf_counter()
    res = activation_patching(model, clean, corrupt, target, distractor, kinds=("resid",), batch_size=args.batch)
    batched = time.perf_counter() - t0
    equivalent = res.positions_run / n  # token positions run, in whole-prompt forward passes
    print(f"batched: {cells} cells: {res.skipped} not run (the patch changes no number), {res.runs} patched runs "
          f"in {res.batches} batched forward passes (+2 baselines) covering {res.positions_run} token positions "
          f"= {equivalent:.0f} whole-prompt forwards; {batched:.1f} s")

    # the naive loop: one full forward per cell (whole prompt, every position un-embedded)
    sites = {("resid_pre", layer) for layer in range(cfg.n_layers)} | {("resid_final", None)}
    kept, _ = record_sites(model, clean, sites)
    sample = [("resid", layer, p) for layer in range(cfg.n_layers + 1) for p in range(n)][::cells // args.naive_sample]
    ids = torch.tensor([corrupt], device=args.device)
    t0 = time.perf_counter()
    with torch.inference_mode():
        for cell in sample:
            model(ids, Intervener([[patch_for(cell, kept, cfg.n_layers)]], cfg.n_layers))
    per_cell = (time.perf_counter() - t0) / len(sample)
    naive = per_cell * cells
    print(f"naive: {cells} forward passes of 1, {per_cell * 1000:.0f} ms each (timed on {len(sample)} cells) "
          f"-> {naive:.1f} s for the grid")
    print(f"forward passes: {res.batches + 2} batched calls vs {cells} ({cells / (res.batches + 2):.0f}x fewer calls); "
          f"compute {equivalent + 2:.0f} vs {cells} whole-prompt forwards ({cells / (equivalent + 2):.1f}x less); "
          f"time: {naive / batched:.2f}x faster")


if __name__ == "__main__":
    main()
