"""How fast an SAE's features come after a trace: GPT-2-small-shaped random model, a random 24,576-feature SAE
on blocks.6.hook_resid_pre (SAELens format, written to a temporary directory), 256 random tokens, CPU, 2 threads.

Printed (median of --runs): opening the SAE (headers checked, 150 MB of weights read), the forward pass, the
selected token's features (one row encoded + top 20: what a Features panel shows first), the visible rows
(40 tokens) and every row (256), the strongest features over the prompt, a feature's vocabulary effect,
the reconstruction error per token, and a forward pass with one feature switched off.

    python benchmarks/features.py [--runs 5] [--panel]

``--panel`` adds the window (offscreen, the SAE open in the Features panel; the default layout with the Features
tab raised, then every panel on screen), per edit of a 256-token prompt (medians, the first two dropped): the
trace handed over by the worker -> the selected
token's first features drawn (target 100 ms); -> the whole tokens x features view drawn (progressive); edit ->
every visible panel complete (target 1.5 x forward + 150 ms); the longest GUI-thread stall.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(2)

from _models import gpt2_small_loaded  # noqa: E402

from explorer.core.features.analysis import (  # noqa: E402
    feature_vocab_effect,
    reconstruction_error,
    strongest_features,
    top_features,
)
from explorer.core.features.edits import feature_intervention  # noqa: E402
from explorer.core.features.sae import open_sae  # noqa: E402
from explorer.core.interventions.apply import run  # noqa: E402

D_SAE, N = 24576, 256


def timed_ms(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def write_sae(path: Path, d: int) -> None:
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(0)
    save_file({"W_enc": torch.randn(d, D_SAE, generator=g) / d ** 0.5, "b_enc": torch.zeros(D_SAE) - 0.5,
               "W_dec": torch.randn(D_SAE, d, generator=g) / d ** 0.5, "b_dec": torch.zeros(d)},
              path / "sae_weights.safetensors")
    (path / "cfg.json").write_text(json.dumps({"architecture": "standard", "d_in": d, "d_sae": D_SAE,
                                               "metadata": {"hook_name": "blocks.6.hook_resid_pre"}}))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--panel", action="store_true", help="also time the Features panel in the window")
    args = parser.parse_args()
    runs = args.runs
    loaded = gpt2_small_loaded()
    ids = np.random.default_rng(0).integers(0, 50257, N).tolist()
    with tempfile.TemporaryDirectory() as tmp:
        write_sae(Path(tmp), loaded.config.d_model)
        t0 = time.perf_counter()
        sae = open_sae(tmp, loaded.config)
        print(f"open_sae ({D_SAE} features): {(time.perf_counter() - t0) * 1000:.0f} ms")
        if args.panel:
            from features_panel import panel_section

            panel_section(loaded, tmp, N, runs)
    print(f"forward pass, {N} tokens: {timed_ms(lambda: loaded.trace_ids(ids), runs):.0f} ms")
    trace = loaded.trace_ids(ids)
    trace["blocks.6.resid_pre"]
    token = N - 1
    print(f"selected token's top 20 features: "
          f"{timed_ms(lambda: top_features(sae.activations(trace, rows=slice(token, token + 1)), 0, 20), runs):.1f} ms")
    print(f"visible rows (40 tokens): {timed_ms(lambda: sae.activations(trace, rows=slice(0, 40)), runs):.0f} ms")
    acts = sae.activations(trace)
    print(f"every row ({N} tokens): {timed_ms(lambda: sae.activations(trace), runs):.0f} ms")
    print(f"strongest 64 features over the prompt: {timed_ms(lambda: strongest_features(acts, 64), runs):.1f} ms")
    print(f"a feature's vocabulary effect: {timed_ms(lambda: feature_vocab_effect(sae, loaded.model, 7), runs):.1f} ms")
    print(f"reconstruction error per token: {timed_ms(lambda: reconstruction_error(sae, trace, acts), runs):.0f} ms")
    off = feature_intervention(sae, int(acts.max(0).argmax()))
    print(f"forward pass with a feature off: {timed_ms(lambda: run(loaded.model, ids, [off]), runs):.0f} ms "
          f"(plain: {timed_ms(lambda: run(loaded.model, ids), runs):.0f} ms)")


if __name__ == "__main__":
    main()
