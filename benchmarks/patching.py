"""Activation patching on the GPT-2-small-sized model at 64 tokens: a full layer x position grid
(13 x 64 = 832 patched runs) batched, against the naive loop of one full forward per cell.
Then attribution patching on a Llama-3.2-1B-shaped model (random weights) at 14 tokens: the linear
estimate of both full grids (one clean forward, one corrupted forward with autograd, one backward)
against one plain forward (target: the estimate in at most 3 forwards' time), the time estimate the
panel shows before an exact grid, and the exact full grid itself, side by side.

    PYTHONPATH=. python benchmarks/patching.py [--tokens 64] [--batch 32] [--naive-sample 24]
        [--attribution-tokens 14] [--exact full|sample|skip] [--exact-batches 4] [--only all|batched|attribution]

The naive loop is timed on ``--naive-sample`` cells and scaled to the grid (it would take minutes);
both run on the same machine one after the other, so compare the ratio, not the seconds, on a busy one.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from _models import gpt2_small_pair, llama_1b_loaded

from explorer.core.cancel import Cancel
from explorer.core.interventions.apply import Intervener, record_sites
from explorer.core.interventions.patching import activation_patching, patch_for


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--naive-sample", type=int, default=24)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--attribution-tokens", type=int, default=14)
    parser.add_argument("--exact", choices=("full", "sample", "skip"), default="full",
                        help="the 1B-shaped model's exact full grid: run it (many minutes on a CPU), time its "
                             "first --exact-batches batches and scale to the grid's token positions, or skip it")
    parser.add_argument("--exact-batches", type=int, default=4)
    parser.add_argument("--only", choices=("all", "attribution", "batched"), default="all")
    args = parser.parse_args()
    if args.only in ("all", "batched"):
        batched_against_naive(args)
    if args.only in ("all", "attribution"):
        attribution_section(args)


def batched_against_naive(args: argparse.Namespace) -> None:
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


def attribution_section(args: argparse.Namespace) -> None:
    from explorer.core.interventions.attribution import attribution_patching

    model = llama_1b_loaded(args.device).model
    cfg, n = model.cfg, args.attribution_tokens
    gen = torch.Generator().manual_seed(1)
    clean = torch.randint(0, cfg.vocab_size, (n,), generator=gen).tolist()
    corrupt = list(clean)
    corrupt[n // 3] = (clean[n // 3] + 1) % cfg.vocab_size
    target, distractor = clean[-1], corrupt[-1] ^ 1
    ids = torch.tensor([clean], device=args.device)
    print(f"\nattribution patching: Llama-3.2-1B-shaped (random), {model.num_parameters() / 1e9:.2f}B parameters, "
          f"{n} tokens, {cfg.n_layers + 1} x {n} resid + {cfg.n_layers} x {cfg.n_heads} head cells, "
          f"{torch.get_num_threads()} threads, device {args.device}")

    def forward() -> float:
        t0 = time.perf_counter()
        with torch.inference_mode():
            model(ids, last_only=True)
        return time.perf_counter() - t0

    forward()  # warm-up
    forwards, estimates = [], []
    for _ in range(3):  # interleaved, best of 3 each: the machine may be shared
        forwards.append(forward())
        t0 = time.perf_counter()
        estimate = attribution_patching(model, clean, corrupt, target, distractor)
        estimates.append(time.perf_counter() - t0)
    one, est = min(forwards), min(estimates)
    print(f"one forward (plain, inference mode): {one:.2f} s (best of 3)")
    print(f"attribution estimate of both full grids: {est:.2f} s (best of 3) = {est / one:.2f} forwards "
          f"(target <= 3): {'met' if est <= 3 * one else 'MISSED'}")
    print(f"exact full grid, estimated before it starts: {estimate.exact_runs} patched runs = "
          f"{estimate.exact_forwards:.0f} whole-prompt forwards -> about {estimate.exact_seconds():.1f} s "
          f"(from the estimate's measured forward, {estimate.forward_seconds:.2f} s)")
    if args.exact == "skip":
        return
    stop, batches = Cancel(), []

    def progress(update) -> None:  # the first update names the cells left out (exactly 0), the others a batch each
        batches.append(update)
        if args.exact == "sample" and len(batches) > args.exact_batches:
            stop.set()

    t0 = time.perf_counter()
    exact = activation_patching(model, clean, corrupt, target, distractor, batch_size=args.batch, cancel=stop,
                                progress=progress)
    took = time.perf_counter() - t0
    total_positions = estimate.exact_forwards * n
    full = took * total_positions / max(exact.positions_run, 1) if exact.cancelled else took
    how = (f"{exact.runs} of {estimate.exact_runs} patched runs timed ({took:.1f} s, {exact.batches} batches), "
           f"scaled by token positions to the grid" if exact.cancelled else
           f"{exact.runs} patched runs in {exact.batches} batches")
    print(f"exact full grid: {how}: {full:.1f} s = {full / one:.0f} forwards; the estimate is {full / est:.0f}x faster")
    if not exact.cancelled:
        cells = np.concatenate([exact.resid.ravel(), exact.heads.ravel()])
        approx = np.concatenate([estimate.resid.ravel(), estimate.heads.ravel()])
        print(f"Pearson(estimate, exact) over the cells (random weights): {np.corrcoef(approx, cells)[0, 1]:.2f}")
    print(f"side by side: forward {one:.2f} s | estimate {est:.2f} s ({est / one:.2f} forwards) | exact grid "
          f"{full:.1f} s{' (extrapolated)' if exact.cancelled else ''} | exact grid estimated beforehand "
          f"{estimate.exact_seconds():.1f} s")


if __name__ == "__main__":
    main()
