"""The two bundled models: they load by name, tokenize Shakespeare, predict it, and (induction) copy."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from explorer.core.analysis.attention import head_statistics
from explorer.core.checkpoint import builtin_names, default_model_name, load_checkpoint
from explorer.core.paths import models_dir

TEXT = "ROMEO.\nBut soft, what light through yonder window breaks?\nIt is the east, and Juliet is the sun.\n"
RANDOM_LOSS = math.log(4096)  # 8.32 nats: a model that has learned nothing


@pytest.fixture(scope="module")
def shakespeare():
    return load_checkpoint("shakespeare", device="cpu")


@pytest.fixture(scope="module")
def induction():
    return load_checkpoint("induction", device="cpu")


def test_both_models_are_bundled() -> None:
    names = builtin_names()
    assert "shakespeare" in names and "induction" in names
    assert default_model_name() == "shakespeare"
    for name in ("shakespeare", "induction"):
        directory = models_dir() / name
        assert (directory / "README.md").is_file()
        size = sum(p.stat().st_size for p in directory.iterdir())
        assert size <= 25 * 2**20, f"{name} is {size / 2**20:.1f} MB"


@pytest.mark.parametrize("name", ["shakespeare", "induction"])
def test_loads_by_name_and_tokenizes(name, request) -> None:
    loaded = request.getfixturevalue(name)
    assert loaded.name == name
    assert loaded.tokenizer.vocab_size == 4096 == loaded.config.vocab_size
    assert loaded.tokenizer.name == "shakespeare-bpe-4096"
    ids = loaded.tokenizer.encode(TEXT)
    assert loaded.tokenizer.decode(ids) == TEXT
    assert len(ids) < len(TEXT) / 2.5  # a BPE learned on Shakespeare packs his words into few tokens
    assert "ROMEO" in loaded.tokenizer.displays(ids)[0] or loaded.tokenizer.displays(ids)[0] in "ROMEO"
    with torch.no_grad():
        logits = loaded.model(torch.tensor([ids]))
    assert logits.shape == (1, len(ids), 4096)
    assert torch.isfinite(logits).all()


def test_shakespeare_predicts_held_out_text(shakespeare) -> None:
    """Mean next-token loss on text from plays that training never saw, far below a random model's."""
    text = (models_dir() / "shakespeare" / "heldout_sample.txt").read_text(encoding="utf-8")
    ids = shakespeare.tokenizer.encode(text)
    n = shakespeare.config.n_ctx
    windows = torch.tensor([ids[i:i + n + 1] for i in range(0, len(ids) - n - 1, n)][:4])
    with torch.no_grad():
        logits = shakespeare.model(windows[:, :-1])
    loss = F.cross_entropy(logits.reshape(-1, 4096), windows[:, 1:].reshape(-1)).item()
    assert loss < RANDOM_LOSS - 3.0, f"held-out loss {loss:.2f}"  # measured: see models/shakespeare/README.md
    card = json.loads((models_dir() / "shakespeare" / "config.json").read_text())
    assert card["training"]["summary"]["held_out_loss_full"] < RANDOM_LOSS - 3.0


def test_shakespeare_prefers_real_continuations(shakespeare) -> None:
    tok = shakespeare.tokenizer
    prompt = tok.encode("To be, or not to")
    with torch.no_grad():
        logits = shakespeare.model(torch.tensor([prompt]))[0, -1]
    assert logits[tok.encode(" be")[0]] > logits[tok.encode(" sword")[0]]


def repeated_tokens(loaded, half: int = 25, seed: int = 0) -> list[int]:
    """``half`` distinct tokens of real Shakespeare in random order, then the same tokens again."""
    text = (models_dir() / "shakespeare" / "heldout_sample.txt").read_text(encoding="utf-8")
    vocab = sorted(set(loaded.tokenizer.encode(text)))
    first = np.random.default_rng(seed).choice(vocab, size=half, replace=False).tolist()
    return first + first


def named_heads() -> tuple[tuple[int, int], tuple[int, int]]:
    """(previous-token head, induction head) as (layer, head), as the model card names them."""
    heads = json.loads((models_dir() / "induction" / "config.json").read_text())["heads"]
    return tuple(heads["previous_token_head"]), tuple(heads["induction_head"])


def test_induction_heads(induction) -> None:
    (prev_layer, prev_head), (ind_layer, ind_head) = named_heads()
    assert prev_layer == 0 and ind_layer == 1
    scores_prev, scores_ind = [], []
    for seed in range(3):
        trace = induction.trace_ids(repeated_tokens(induction, seed=seed))
        scores_prev.append(head_statistics(trace, "previous_token"))
        scores_ind.append(head_statistics(trace, "induction"))
    prev, ind = np.mean(scores_prev, axis=0), np.mean(scores_ind, axis=0)
    # measured on this probe: induction head 1.2 scores 0.98 (every layer-1 head 0.97-0.99, every layer-0
    # head 0.00); previous-token head 0.1 scores 0.77 (head 0.2 0.58, every other head <= 0.07)
    assert ind[ind_layer, ind_head] > 0.9, ind
    assert ind[ind_layer, ind_head] > ind[0].max() + 0.8, ind
    assert prev[prev_layer, prev_head] > 0.6, prev
    assert prev[prev_layer, prev_head] == prev.max(), prev


def test_induction_model_copies(induction) -> None:
    """On the second copy of a random sequence the model predicts the next token: low loss there."""
    ids = repeated_tokens(induction, seed=7)
    half = len(ids) // 2
    with torch.no_grad():
        logits = induction.model(torch.tensor([ids]))[0]
    losses = F.cross_entropy(logits[:-1], torch.tensor(ids[1:]), reduction="none")
    first, second = losses[: half - 1].mean().item(), losses[half:].mean().item()
    # measured: 8.05 nats on the first copy (unpredictable), 0.15 on the second
    assert second < 0.5 and first > 7.0, (first, second)


@pytest.mark.parametrize("phrase", [" the cat sat on the mat.", " O Romeo, Romeo, wherefore art thou Romeo?"])
def test_induction_head_on_typed_text(induction, phrase) -> None:
    """What a student sees: type a phrase twice, and from each token of the second copy the
    induction head looks at the token that followed the same token in the first copy, while the
    previous-token head looks one token back."""
    (prev_layer, prev_head), (ind_layer, ind_head) = named_heads()
    once = induction.tokenizer.encode(phrase)
    ids = induction.tokenizer.encode(phrase * 2)
    assert ids == once + once  # the two copies tokenize alike
    n = len(once)
    trace = induction.trace_ids(ids)
    induction_rows = trace.head(ind_layer, ind_head, "pattern")
    previous_rows = trace.head(prev_layer, prev_head, "pattern")
    # query n + j is token j of the second copy; its target is j + 1, the token after its first
    # occurrence (j < n - 1 so that token is still in the first copy; tokens that occur twice in the
    # phrase are skipped, their "earlier occurrence" is ambiguous)
    unique = [j for j in range(n - 1) if once.count(once[j]) == 1]
    targets = {n + j: j + 1 for j in unique}
    hits = [int(np.argmax(induction_rows[q])) == t for q, t in targets.items()]
    weights = [induction_rows[q, t] for q, t in targets.items()]
    assert all(hits), (hits, np.round(weights, 2))
    assert np.mean(weights) > 0.5, np.round(weights, 2)
    back = [int(np.argmax(previous_rows[q])) == q - 1 for q in range(1, len(ids))]
    assert np.mean(back) > 0.8, back
