"""Real models that run on a laptop, suggested by File ▸ Get a model… and ``transformer-explorer get``.

Sizes are what the repositories held when this list was written (2026-11): the weights on disk as
the repository stores them (most in bfloat16), and the memory this app takes for them in float32
(4 bytes a parameter). The dialog asks the Hub for the exact sizes of the files it will fetch before
anything is downloaded; these numbers are for choosing.
"""

from __future__ import annotations

from dataclasses import dataclass

MB = 1_000_000


@dataclass(frozen=True)
class Suggestion:
    repo_id: str
    title: str
    disk_bytes: int     # the files the app fetches, about
    memory_bytes: int   # the model in float32 in this app, about
    good_for: str
    gated: bool = False  # the repository asks for its licence to be accepted and a token


SUGGESTED: tuple[Suggestion, ...] = (
    Suggestion("openai-community/gpt2", "GPT-2 small (124M)", 550 * MB, 500 * MB,
               "the model most articles explain: 12 layers of 12 heads, learned positions"),
    Suggestion("HuggingFaceTB/SmolLM2-135M-Instruct", "SmolLM2-135M-Instruct", 275 * MB, 540 * MB,
               "a small modern chat model (Llama layout: rotary, grouped K/V, gated FFN)"),
    Suggestion("HuggingFaceTB/SmolLM2-360M-Instruct", "SmolLM2-360M-Instruct", 730 * MB, 1450 * MB,
               "the same family, better answers; still quick on a laptop"),
    Suggestion("Qwen/Qwen3-0.6B", "Qwen3-0.6B", 1520 * MB, 3000 * MB,
               "a reasoning model with q/k norms and a thinking mode in its chat template"),
    Suggestion("google/gemma-3-270m-it", "Gemma-3-270M-it", 540 * MB, 1070 * MB,
               "Gemma 3: sliding-window and global layers, a vocabulary of 262,144", gated=True),
    Suggestion("EleutherAI/pythia-160m", "Pythia-160M", 330 * MB, 650 * MB,
               "trained on the Pile with public checkpoints: a research workhorse"),
    Suggestion("meta-llama/Llama-3.2-1B-Instruct", "Llama-3.2-1B-Instruct", 2500 * MB, 4950 * MB,
               "a real 1B chat model; needs a Hugging Face token with access granted", gated=True),
)
