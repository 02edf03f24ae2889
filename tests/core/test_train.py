"""The training loop on tiny models: it learns, it is reproducible, and what it saves reloads."""

from __future__ import annotations

import io
import math

import numpy as np
import pytest
import torch

from explorer.core.tokenize.bpe import make_encoding, train_byte_bpe
from explorer.core.checkpoint import load_checkpoint, save_native
from explorer.core.config import ModelConfig
from explorer.core.tokenize.base import TiktokenTokenizer
from explorer.core.training.loop import (
    Progress,
    TrainSettings,
    consecutive_windows,
    evaluate,
    evaluator,
    lr_at,
    new_model,
    random_windows,
    spread_windows,
    train,
)
from explorer.core.training.data import repeated_random_tokens, repeated_segment_batch, token_distribution

TEXT = ("ROMEO.\nBut soft, what light through yonder window breaks?\nIt is the east, and Juliet is the sun.\n\n"
        "JULIET.\nO Romeo, Romeo, wherefore art thou Romeo?\nDeny thy father and refuse thy name.\n\n") * 6


@pytest.fixture(scope="module")
def tokenizer() -> TiktokenTokenizer:
    encoding = make_encoding(train_byte_bpe(TEXT, 300), "tiny-bpe")
    return TiktokenTokenizer(encoding, {"type": "tiktoken", "name": "tiny-bpe"})


@pytest.fixture(scope="module")
def tokens(tokenizer) -> np.ndarray:
    return np.asarray(tokenizer.encode(TEXT), dtype=np.int64)


def tiny_config(vocab_size: int) -> ModelConfig:
    return ModelConfig(vocab_size=vocab_size, n_ctx=16, d_model=32, n_layers=2, n_heads=2, d_head=16, d_ff=64)


SETTINGS = TrainSettings(steps=40, batch_size=8, lr=3e-3, min_lr=3e-4, warmup_steps=5, eval_every=20, seed=3,
                         threads=1)


def run(tokens: np.ndarray, vocab_size: int, seed: int = 3):
    model = new_model(tiny_config(vocab_size), seed)
    held_out = consecutive_windows(tokens, 17, 8, max_windows=8)
    before = evaluate(model, held_out)
    summary = train(model, lambda rng, b: random_windows(tokens, 17, b, rng),
                    TrainSettings(**{**SETTINGS.__dict__, "seed": seed}), evaluator({"held_out": held_out}), quiet=True)
    return model, before, summary


def test_training_lowers_the_loss(tokens, tokenizer) -> None:
    model, before, summary = run(tokens, tokenizer.vocab_size)
    assert before == pytest.approx(math.log(tokenizer.vocab_size), abs=0.3)  # small init: near-uniform
    assert summary["held_out_loss"] < before - 1.5
    assert summary["steps"] == 40 and summary["params"] == model.num_parameters()
    assert [p["step"] for p in summary["curve"]] == [20, 40]
    assert summary["curve"][-1]["held_out_loss"] < summary["curve"][0]["held_out_loss"] + 0.5
    assert not model.training


def test_training_is_reproducible(tokens, tokenizer) -> None:
    a, _, sa = run(tokens, tokenizer.vocab_size, seed=5)
    b, _, sb = run(tokens, tokenizer.vocab_size, seed=5)
    c, _, _ = run(tokens, tokenizer.vocab_size, seed=6)
    for (name, pa), pb in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(pa, pb), name
    assert sa["held_out_loss"] == sb["held_out_loss"]
    assert not torch.equal(a.state_dict()["embed.weight"], c.state_dict()["embed.weight"])


def test_saved_checkpoint_reloads_with_identical_logits(tokens, tokenizer, tmp_path) -> None:
    model, _, _ = run(tokens, tokenizer.vocab_size)
    save_native(model, tokenizer, tmp_path / "tiny", "tiny", extra={"training": {"steps": 40}})
    loaded = load_checkpoint(tmp_path / "tiny", device="cpu")
    text = "JULIET.\nO Romeo, Romeo!"
    assert loaded.tokenizer.encode(text) == tokenizer.encode(text)
    assert loaded.tokenizer.decode(tokenizer.encode(text)) == text
    ids = torch.tensor([tokenizer.encode(text)])
    with torch.no_grad():
        assert torch.equal(model(ids), loaded.model(ids))


def test_learning_rate_schedule() -> None:
    s = TrainSettings(steps=100, lr=1e-3, min_lr=1e-4, warmup_steps=10)
    assert lr_at(0, s) == pytest.approx(1e-4)
    assert lr_at(9, s) == pytest.approx(1e-3)
    assert lr_at(10, s) == pytest.approx(1e-3)
    assert lr_at(55, s) == pytest.approx(5.5e-4)  # halfway through the cosine
    assert lr_at(99, s) == pytest.approx(1e-4, rel=0.01)
    lrs = [lr_at(i, s) for i in range(10, 100)]
    assert all(x >= y for x, y in zip(lrs, lrs[1:]))


def test_windows() -> None:
    tokens = np.arange(100)
    rng = np.random.default_rng(0)
    batch = random_windows(tokens, 10, 4, rng)
    assert batch.shape == (4, 10) and batch.dtype == torch.int64
    assert torch.all(batch[:, 1:] - batch[:, :-1] == 1)  # contiguous
    batches = consecutive_windows(tokens, 10, 4)
    assert sum(len(b) for b in batches) == 11  # windows overlap by one token: 99 // 9
    assert batches[0][1, 0] == 9
    spread = spread_windows(tokens, 10, 5, batch_size=2)
    assert [len(b) for b in spread] == [2, 2, 1] and spread[0][0, 0] == 0 and spread[-1][-1, -1] == 99


def test_repeated_segment_batch_marks_the_predictable_tokens() -> None:
    probs = token_distribution(np.arange(50).repeat(3), 64)
    assert probs[50:].sum() == 0 and probs.sum() == pytest.approx(1.0)
    rng = np.random.default_rng(1)
    ids, mask = repeated_segment_batch(rng, 16, 65, probs)
    assert ids.shape == (16, 65) and mask.shape == (16, 64)
    assert int(ids.max()) < 50
    for seq, m in zip(ids.numpy(), mask.numpy()):
        targets = np.flatnonzero(m) + 1  # positions of the tokens whose prediction is marked
        assert targets.size >= 4
        for t in targets:  # each marked token follows a token that also occurred earlier, followed by it
            prev, here = seq[t - 1], seq[t]
            assert any(seq[j] == prev and seq[j + 1] == here for j in range(t - 1))
    ids, mask = repeated_segment_batch(rng, 16, 65, probs, segment=(5, 12), copies=(2, 3), segments=(2, 3))
    for seq, m in zip(ids.numpy(), mask.numpy()):
        assert m.sum() >= 2 * 4  # at least two segments repeated, each with at least 4 predictable tokens
        for t in np.flatnonzero(m) + 1:
            assert any(seq[j] == seq[t - 1] and seq[j + 1] == seq[t] for j in range(t - 1))
    probe = repeated_random_tokens(probs, seed=0, half=10)
    assert probe[:10] == probe[10:] and len(set(probe[:10])) == 10


def test_progress_bar_writes_lines_to_a_log() -> None:
    stream = io.StringIO()
    bar = Progress(100, stream)
    for step in range(1, 101):
        bar.update(step, 3.0, 1234.0, step * 0.5)
    bar.close()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 50
    assert "step 100/100" in lines[-1] and "1,234 tok/s" in lines[-1] and "ETA 0:00" in lines[-1]
    assert "#" * 24 in lines[-1]


def test_train_command_is_registered() -> None:
    from explorer.cli import _command_parser

    args = _command_parser().parse_args(["train", "induction", "--steps", "5", "--seed", "2", "--threads", "1"])
    assert (args.recipe, args.steps, args.seed, args.threads) == ("induction", 5, 2, 1)
    assert args.out is None and args.cache is None


def test_train_writes_to_the_user_directories_never_into_the_package(monkeypatch, tmp_path) -> None:
    import sys

    from explorer.cli import _command_parser
    from explorer.core.paths import models_dir
    from explorer.core.training import recipes

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    seen = {}
    monkeypatch.setitem(recipes.TRAINERS, "induction",
                        lambda out, **kw: seen.update(out=out, cache=kw["cache"]) or {"loss": 1.0})
    args = _command_parser().parse_args(["train", "induction"])
    assert args.run(args) == 0
    if sys.platform.startswith("linux"):  # platformdirs follows XDG there
        assert seen["out"] == tmp_path / "data" / "transformer-explorer" / "models" / "induction"
        assert seen["cache"] == tmp_path / "cache" / "transformer-explorer"
    assert models_dir() not in seen["out"].parents and models_dir() not in seen["cache"].parents


# --- issue 34: train writes only where it may, and checks its seed first ----------------------------

@pytest.fixture(scope="module")
def corpus_cache(tmp_path_factory):
    """A prepared corpus in a cache folder (nothing is downloaded): random words in four 'plays'."""
    import random

    rng = random.Random(0)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 8))) for _ in range(300)]
    plays = ["\n".join(" ".join(rng.choice(words) for _ in range(12)) for _ in range(60)) for _ in range(4)]
    cache = tmp_path_factory.mktemp("corpus-cache")
    (cache / "shakespeare.txt").write_text("\n\n\n".join(plays), encoding="utf-8")
    return cache


def _train(out, cache, *flags) -> tuple[int, str]:
    import contextlib

    from explorer.cli import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["train", "induction", "--steps", "1", "--threads", "1", "--cache", str(cache),
                     "--out", str(out), *flags])
    return code, err.getvalue()


def test_train_over_a_downloaded_model_folder_is_refused_and_leaves_it_byte_identical(tiny_gpt2_dir, tmp_path,
                                                                                      corpus_cache) -> None:
    import shutil

    model = tmp_path / "gpt2-from-the-hub"
    shutil.copytree(tiny_gpt2_dir, model)
    before = {p.name: p.read_bytes() for p in model.iterdir()}
    code, err = _train(model, corpus_cache)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "--out" in lines[0] and "not empty" in lines[0], err
    assert {p.name: p.read_bytes() for p in model.iterdir()} == before  # nothing replaced, nothing added


def test_train_writes_a_new_folder_and_may_write_its_own_output_again(tmp_path, corpus_cache) -> None:
    out = tmp_path / "mine"
    assert _train(out, corpus_cache)[0] == 0
    (out / "my-notes.md").write_text("kept")
    first = (out / "model.safetensors").read_bytes()
    code, err = _train(out, corpus_cache, "--seed", "1")
    assert code == 0, err
    assert (out / "model.safetensors").read_bytes() != first and (out / "my-notes.md").read_text() == "kept"
    assert load_checkpoint(out, device="cpu").config.n_layers == 2


@pytest.mark.parametrize("seed", ["-1", str(2**70)])
def test_an_impossible_seed_is_one_line_before_any_training(tmp_path, seed, corpus_cache) -> None:
    code, err = _train(tmp_path / "out", corpus_cache, "--seed", seed)
    lines = [line for line in err.splitlines() if line.strip()]  # no corpus line, no progress: nothing trained
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: --seed must be between 0 and"), err
    assert not (tmp_path / "out").exists()
