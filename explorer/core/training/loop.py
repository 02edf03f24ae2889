"""Training the built-in models from scratch: the one small, readable loop (recipes.py has the recipes).

The loop (``train``) is plain next-token prediction: AdamW, a linear warmup then a cosine decay of
the learning rate, gradient clipping, and a held-out loss every ``eval_every`` steps. Everything
random is seeded: ``torch.manual_seed`` for the initial weights, a numpy ``Generator`` for the
batches, and the number of CPU threads is fixed, so the same seed and thread count give the same
weights, bit for bit, on the same machine and library versions.

Recipes (``RECIPES``), both on a 4096-token byte-level BPE learned from the training split of the
Shakespeare corpus (``explorer.core.training.corpus``):

* ``shakespeare``: a GPT-2-style model trained on random windows of the plays;
* ``induction``: a two-layer attention-only model trained on random token sequences in which a
  random segment repeats, so that a previous-token head and an induction head form.

``transformer-explorer train NAME`` (``explorer.commands.train``) runs a recipe and writes the
checkpoint with its model card.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from explorer.core.config import ModelConfig
from explorer.core.model import Transformer

# A batch is [B, n + 1] token ids (inputs are the first n, targets the last n), optionally with a
# [B, n] mask that weights each target position's loss (1 = counts, 0 = ignored).
Batch = Tensor | tuple[Tensor, Tensor]
Sampler = Callable[[np.random.Generator, int], Batch]

VOCAB_SIZE = 4096  # 4095 learned byte-level tokens plus <|endoftext|>
TOKENIZER_NAME = "shakespeare-bpe-4096"
DEFAULT_CACHE = Path("~/.cache/transformer-explorer")


@dataclass(frozen=True)
class TrainSettings:
    steps: int = 1000
    batch_size: int = 16
    lr: float = 1e-3             # peak learning rate, reached after the warmup
    min_lr: float = 1e-4         # where the cosine decay ends
    warmup_steps: int = 100
    weight_decay: float = 0.1    # on matrices and embeddings; never on biases and norm gains
    betas: tuple[float, float] = (0.9, 0.95)
    grad_clip: float = 1.0       # largest allowed global gradient norm
    eval_every: int = 100
    seed: int = 0
    threads: int = 2


# --- the pieces ----------------------------------------------------------------------------------

def lr_at(step: int, s: TrainSettings) -> float:
    """Learning rate of 0-based ``step``: linear warmup to ``lr``, then cosine down to ``min_lr``."""
    if step < s.warmup_steps:
        return s.lr * (step + 1) / s.warmup_steps
    progress = (step - s.warmup_steps) / max(1, s.steps - s.warmup_steps)
    return s.min_lr + 0.5 * (s.lr - s.min_lr) * (1.0 + math.cos(math.pi * min(1.0, progress)))


def new_model(cfg: ModelConfig, seed: int, std: float = 0.02) -> Transformer:
    """A freshly initialised model, GPT-2 style: weights N(0, std), biases 0, norm gains 1.

    The projections that write into the residual stream (W_O and the FFN's W_out) start smaller,
    std / sqrt(2 L), so that the stream's variance does not grow with depth; learned positions
    start at std / 2.
    """
    torch.manual_seed(seed)
    model = Transformer(cfg)
    residual_std = std / math.sqrt(2 * cfg.n_layers)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("attn.W_O.weight", "mlp.W_out.weight")):
                p.normal_(0.0, residual_std)
            elif name == "pos_embed.weight":
                p.normal_(0.0, std / 2)
            elif p.dim() >= 2:
                p.normal_(0.0, std)
            elif name.endswith("bias"):
                p.zero_()
            else:  # norm gains
                p.fill_(1.0)
    return model


def random_windows(tokens: np.ndarray, length: int, batch_size: int, rng: np.random.Generator) -> Tensor:
    """``batch_size`` random contiguous windows of ``length`` tokens: [B, length] int64."""
    if len(tokens) < length:
        raise ValueError(f"need at least {length} tokens, have {len(tokens)}")
    starts = rng.integers(0, len(tokens) - length + 1, size=batch_size)
    return torch.from_numpy(np.stack([tokens[s:s + length] for s in starts]).astype(np.int64))


def consecutive_windows(tokens: np.ndarray, length: int, batch_size: int,
                        max_windows: int | None = None) -> list[Tensor]:
    """Non-overlapping windows from the start of ``tokens``, grouped into batches (for evaluation)."""
    count = (len(tokens) - 1) // (length - 1)
    if max_windows is not None:
        count = min(count, max_windows)
    windows = [tokens[i * (length - 1): i * (length - 1) + length] for i in range(count)]
    return [torch.from_numpy(np.stack(windows[i:i + batch_size]).astype(np.int64))
            for i in range(0, count, batch_size)]


def spread_windows(tokens: np.ndarray, length: int, count: int, batch_size: int = 16) -> list[Tensor]:
    """``count`` windows at evenly spaced places through ``tokens``, grouped into batches (for evaluation)."""
    starts = np.linspace(0, len(tokens) - length, count).astype(np.int64)
    windows = np.stack([tokens[s:s + length] for s in starts]).astype(np.int64)
    return [torch.from_numpy(windows[i:i + batch_size]) for i in range(0, count, batch_size)]


def token_losses(model: Transformer, tokens: Tensor) -> Tensor:
    """Cross-entropy of every next-token prediction: tokens [B, n + 1] -> losses [B, n]."""
    logits = model(tokens[:, :-1])                                      # [B, n, V]
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1),
                           reduction="none").view(tokens.shape[0], -1)


def loss_on(model: Transformer, batch: Batch) -> tuple[Tensor, int]:
    """Mean cross-entropy of next-token prediction over the (masked-in) target positions, and their count."""
    tokens, mask = batch if isinstance(batch, tuple) else (batch, None)
    losses = token_losses(model, tokens).reshape(-1)
    if mask is None:
        return losses.mean(), losses.numel()
    weights = mask.reshape(-1).to(losses.dtype)
    count = int(weights.sum().item())
    return (losses * weights).sum() / max(count, 1), count


def evaluator(eval_sets: dict[str, Sequence[Batch]]) -> Callable[[Transformer], dict[str, float]]:
    """An evaluation function for ``train``: the mean loss of each named set of fixed batches."""
    return lambda model: {name: evaluate(model, batches) for name, batches in eval_sets.items()}


@torch.no_grad()
def evaluate(model: Transformer, batches: Sequence[Batch]) -> float:
    """Mean loss per target token over all ``batches`` (the model is left in the mode it was in)."""
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    for batch in batches:
        loss, n = loss_on(model, batch)
        total += loss.item() * n
        count += n
    model.train(was_training)
    return total / count if count else float("nan")


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rem = divmod(seconds, 3600)
    return f"{h}:{rem // 60:02d}:{rem % 60:02d}" if h else f"{rem // 60}:{rem % 60:02d}"


class Progress:
    """A one-line text progress bar: redrawn in place on a terminal, printed line by line in a log."""

    def __init__(self, total: int, stream: TextIO | None = None, width: int = 24) -> None:
        self.total, self.width = total, width
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.every = max(1, total // 50)  # lines written to a log file
        self._last_len = 0

    def update(self, step: int, loss: float, tokens_per_s: float, elapsed: float, note: str = "",
               force: bool = False) -> None:
        if not (self.tty or force or step % self.every == 0 or step == self.total):
            return
        filled = int(self.width * step / self.total)
        bar = "#" * filled + "." * (self.width - filled)
        eta = elapsed / step * (self.total - step) if step else 0.0
        line = (f"step {step:>{len(str(self.total))}}/{self.total} [{bar}] loss {loss:.3f}"
                f"{(' | ' + note) if note else ''} | {tokens_per_s:,.0f} tok/s | {_clock(elapsed)} elapsed, "
                f"ETA {_clock(eta)}")
        if self.tty:
            self.stream.write("\r" + line + " " * max(0, self._last_len - len(line)))
            self._last_len = len(line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


# --- the loop ------------------------------------------------------------------------------------

def train(model: Transformer, sample: Sampler, settings: TrainSettings,
          evaluate_fn: Callable[[Transformer], dict[str, float]] | None = None, stream: TextIO | None = None,
          quiet: bool = False) -> dict[str, Any]:
    """Train ``model`` in place for ``settings.steps`` steps; return a summary.

    ``sample(rng, batch_size)`` draws one training batch from the numpy Generator seeded with
    ``settings.seed``. ``evaluate_fn(model)`` returns named held-out losses (e.g. ``evaluator(sets)``);
    it runs every ``eval_every`` steps and at the end, in eval mode and without gradients, and
    its numbers are shown on the progress bar. The summary holds steps, the mean training loss of
    the last 50 steps, ``{name}_loss`` of every evaluation, seconds, tokens/s, the parameter count
    and the loss curve.
    """
    s = settings
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(s.threads)
    rng = np.random.Generator(np.random.PCG64(s.seed))

    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": s.weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=s.lr, betas=s.betas)
    progress = Progress(s.steps, stream) if not quiet else None
    curve: list[dict[str, float]] = []
    recent: list[float] = []
    tokens_seen, train_seconds = 0, 0.0
    start = time.perf_counter()
    note = ""
    model.train()
    try:
        for step in range(s.steps):
            t0 = time.perf_counter()
            for group in optimizer.param_groups:
                group["lr"] = lr_at(step, s)
            batch = sample(rng, s.batch_size)
            loss, n_targets = loss_on(model, batch)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), s.grad_clip)
            optimizer.step()
            train_seconds += time.perf_counter() - t0
            tokens_seen += (batch[0] if isinstance(batch, tuple) else batch)[:, :-1].numel()
            recent = (recent + [loss.item()])[-50:]

            done = step + 1
            point: dict[str, float] = {}
            if evaluate_fn is not None and (done % s.eval_every == 0 or done == s.steps):
                model.eval()
                with torch.no_grad():
                    losses = evaluate_fn(model)
                model.train()
                point = {"step": done, "train_loss": float(np.mean(recent)), "lr": lr_at(step, s)}
                point.update({f"{name}_loss": float(value) for name, value in losses.items()})
                curve.append(point)
                note = " ".join(f"{name} {value:.3f}" for name, value in losses.items())
            if progress is not None:
                progress.update(done, float(np.mean(recent)), tokens_seen / max(train_seconds, 1e-9),
                                time.perf_counter() - start, note, force=bool(point))
    finally:
        if progress is not None:
            progress.close()
        torch.set_num_threads(previous_threads)
    model.eval()
    summary: dict[str, Any] = {"steps": s.steps, "train_loss": float(np.mean(recent)) if recent else float("nan")}
    if curve:
        summary.update({k: v for k, v in curve[-1].items() if k.endswith("_loss") and k != "train_loss"})
    summary.update({"seconds": round(time.perf_counter() - start, 1),
                    "tokens_per_second": round(tokens_seen / max(train_seconds, 1e-9)),
                    "tokens": tokens_seen, "params": model.num_parameters(), "curve": curve})
    return summary
