"""Generation speed: tokens per second for 128 new tokens after a 32-token prompt, greedy, on the CPU
with two threads, for a GPT-2-small-shaped model with random weights (no files needed):

* ours with the KV cache, ours without it (the whole sequence every step),
* ``transformers``' ``generate`` (its default attention, with its cache) on the same weights,

and, if ``models/shakespeare`` exists, the bundled default model. Best of 3 runs after a warm-up.

    python benchmarks/generate.py [--new-tokens 128] [--prompt-tokens 32] [--runs 3] [--skip-no-cache]

With ``--device cuda|cpu`` (or ``--sections``): the sections of benchmarks/_sections.py instead, each a
prompt of the section's length then ``--new-tokens`` greedy tokens, ours (KV cache) against
``transformers``' ``generate`` on the same weights, interleaved; ``--max-layers`` / ``--tokens`` make a
reduced run (said in the header).

    python benchmarks/generate.py --device cuda --dtype bfloat16 --new-tokens 64
    python benchmarks/generate.py --device cpu --sections llama1b-1024 --max-layers 2 --tokens 128 --new-tokens 16
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _models import gpt2_small_pair  # noqa: E402
from explorer.core.loaded import LoadedModel  # noqa: E402
from explorer.core.generation.generate import generate  # noqa: E402
from explorer.core.paths import models_dir  # noqa: E402
from explorer.core.generation.sampling import SamplingParams  # noqa: E402
from explorer.core.tokenize.base import gpt2_tokenizer  # noqa: E402

PROMPT = ("It was the best of times, it was the worst of times, it was the age of wisdom, it was the age "
          "of foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the season")


def interleaved(fns: dict, runs: int) -> list[float]:
    """Best wall time of each function over ``runs`` rounds (one call of each per round), after a warm-up."""
    for fn in fns.values():
        fn()
    best = [float("inf")] * len(fns)
    for _ in range(runs):
        for i, fn in enumerate(fns.values()):
            t0 = time.perf_counter()
            fn()
            best[i] = min(best[i], time.perf_counter() - t0)
    return best


def best_of(fn, runs: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def run_sections(args, names: list[str]) -> int:
    import _sections as sec
    import transformers

    for name in names:
        s = sec.build(name, args.device, getattr(torch, args.dtype), args.max_layers, args.tokens)
        n_new = args.new_tokens
        print(s.header("generate") + f" {n_new} new tokens, greedy")
        prompt = s.ids()[0].tolist()
        params = SamplingParams(temperature=0.0, max_new_tokens=n_new, stop_at_eos=False)
        s.hf.generation_config.eos_token_id = None
        tokens: dict[str, list[int]] = {}

        def ours() -> None:
            result = generate(s.loaded, prompt, params)
            assert result.n_new == n_new, result.stop_reason
            tokens["ours"] = result.token_ids

        def theirs() -> None:
            ids = torch.tensor([prompt], device=args.device)
            with torch.inference_mode():
                out = s.hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n_new,
                                    do_sample=False, pad_token_id=0)
            tokens["transformers"] = out[0, len(prompt):].tolist()

        t_ours, t_hf = sec.interleaved([ours, theirs], args.runs, args.device)
        print(f"  ours, KV cache                   {n_new / t_ours:8.2f} tokens/s ({t_ours:.2f}s with the prompt)")
        print(f"  transformers {transformers.__version__} generate     {n_new / t_hf:8.2f} tokens/s ({t_hf:.2f}s)")
        print(f"  ratio ours / transformers: {t_hf / t_ours:.2f} (target >= 1.0); same greedy tokens: "
              f"{tokens.get('ours') == tokens.get('transformers')}{sec.peak_line(args.device)}")
        s = None
        sec.release(args.device)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--prompt-tokens", type=int, default=32)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--skip-no-cache", action="store_true", help="leave out the slow no-cache run")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    import _sections

    _sections.add_arguments(parser)
    args = parser.parse_args()
    args.device_given = _sections.device_given(sys.argv[1:])
    torch.set_num_threads(args.threads)
    sections = _sections.wanted(args)
    if sections is not None:
        return run_sections(args, sections)
    dtype = getattr(torch, args.dtype)
    n_new = args.new_tokens
    params = SamplingParams(temperature=0.0, max_new_tokens=n_new, stop_at_eos=False)

    hf, ours = gpt2_small_pair()
    hf.to(args.device, dtype)
    ours.to(args.device, dtype)
    loaded = LoadedModel(ours, gpt2_tokenizer(), "gpt2-small-shaped (random)", "benchmark", "gpt2")
    prompt = loaded.tokenizer.encode(PROMPT * 4)[: args.prompt_tokens]
    print(f"GPT-2 small shape, random weights ({loaded.n_params / 1e6:.0f}M parameters), {args.device} {args.dtype}, "
          f"{torch.get_num_threads()} threads, torch {torch.__version__}; "
          f"{len(prompt)}-token prompt, {n_new} new tokens, greedy, best of {args.runs} after a warm-up; "
          f"load average {os.getloadavg()[0]:.1f}")

    tokens: dict[str, list[int]] = {}

    def ours(use_cache: bool):
        def run() -> None:
            result = generate(loaded, prompt, params, use_cache=use_cache)
            assert result.n_new == n_new, result.stop_reason
            tokens["cache" if use_cache else "no-cache"] = result.token_ids
        return run

    hf.generation_config.eos_token_id = None  # random weights: never stop early, like stop_at_eos=False

    def theirs() -> None:
        ids = torch.tensor([prompt], device=args.device)
        with torch.inference_mode():
            out = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n_new,
                              do_sample=False, pad_token_id=0)
        if args.device != "cpu":
            torch.cuda.synchronize()
        assert out.shape[1] == len(prompt) + n_new, out.shape
        tokens["transformers"] = out[0, len(prompt):].tolist()

    import transformers

    attn = getattr(hf.config, "_attn_implementation", "?")
    variants = {"ours, KV cache": ours(True),
                f"transformers {transformers.__version__} generate ({attn})": theirs}
    if not args.skip_no_cache:
        variants["ours, no cache"] = ours(False)
    # interleaved, so that a change in the machine's load does not favour one variant
    times = dict(zip(variants, interleaved(variants, args.runs)))
    results = {name: n_new / t for name, t in times.items()}
    for name, rate in results.items():
        print(f"  {name:<40} {rate:8.1f} tokens/s  ({1e3 * times[name] / n_new:.1f} ms/token)")
    ours_rate, theirs_rate = results["ours, KV cache"], results[list(variants)[1]]
    print(f"  ratio ours (cache) / transformers: {ours_rate / theirs_rate:.2f}")
    if "ours, no cache" in results:
        print(f"  ratio ours cache / no cache:        {results['ours, KV cache'] / results['ours, no cache']:.2f}")
    same = tokens.get("cache") == tokens.get("transformers")
    print(f"  same greedy tokens as transformers: {same}"
          + ("" if "no-cache" not in tokens else f"; cache == no cache: {tokens['cache'] == tokens['no-cache']}"))

    if (models_dir() / "shakespeare" / "config.json").is_file() and args.device == "cpu":
        from explorer.core.checkpoint import load_checkpoint

        shakespeare = load_checkpoint("shakespeare", device="cpu")
        sp = shakespeare.tokenizer.encode(PROMPT * 8)[: args.prompt_tokens]
        sparams = params.replace(max_new_tokens=min(n_new, shakespeare.config.n_ctx - len(sp)))
        count = sparams.max_new_tokens
        rate = count / best_of(lambda: generate(shakespeare, sp, sparams), args.runs)
        print(f"  bundled shakespeare ({shakespeare.n_params / 1e6:.1f}M parameters), KV cache: "
              f"{rate:8.1f} tokens/s ({len(sp)}-token prompt, {count} new tokens)")
    else:
        print("  (models/shakespeare not found: bundled model skipped)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
