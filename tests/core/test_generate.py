"""Tests for explorer.core.generation.generate (the generation loop) and the ``generate`` subcommand."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from explorer.core.loaded import LoadedModel
from explorer.core.config import ModelConfig
from explorer.core.errors import PromptError
from explorer.core.generation.generate import (
    STOP_REASONS,
    GenerationResult,
    IncrementalText,
    PreallocatedKVCache,
    continuation_text,
    generate,
    generate_steps,
)
from explorer.core.model import KVCache, Transformer
from explorer.core.generation.sampling import SamplingParams
from explorer.core.tokenize.base import VocabTokenizer

GREEDY = SamplingParams(temperature=0.0, max_new_tokens=20, stop_at_eos=False)
HELLO = "Hello, my name is Ada and I like to"

# Small random models of the architectures the config can describe (none is the worked example).
VARIANTS = {
    "gpt2-like": {},
    "llama-like": dict(norm="rmsnorm", positions="rotary", activation="silu", gated_ffn=True, n_kv_heads=2,
                       attn_bias=False, mlp_bias=False, tie_embeddings=False),
    "neox-like": dict(positions="rotary", rotary_dim=4, parallel_residual=True, tie_embeddings=False),
    "post-norm-sinusoidal": dict(norm_placement="post", positions="sinusoidal", activation="relu"),
    "attn-only-no-norm": dict(attn_only=True, d_ff=0, norm="none", positions="learned"),
}


def tiny_model(n_ctx: int = 64, vocab: int = 30, model_vocab: int | None = None, seed: int = 0,
               **overrides) -> LoadedModel:
    torch.manual_seed(seed)
    shape = dict(arch="tiny", vocab_size=model_vocab or vocab, n_ctx=n_ctx, d_model=32, n_layers=2, n_heads=4,
                 d_head=8, d_ff=64)
    cfg = ModelConfig(**{**shape, **overrides})
    model = Transformer(cfg).eval()
    tokenizer = VocabTokenizer([f"w{i}" for i in range(vocab)], split="words", name="tiny words")
    return LoadedModel(model, tokenizer, "tiny", "test", "tiny")


def prompt_of(n: int, vocab: int = 30) -> list[int]:
    return [(7 * i + 3) % vocab for i in range(n)]


def ids_of(result: GenerationResult) -> list[int]:
    return result.token_ids


# --- cache vs no cache, and against transformers ------------------------------------------------

def test_cache_and_no_cache_agree_on_tiny_gpt2(tiny_gpt2):
    loaded, _ = tiny_gpt2
    prompt = loaded.tokenizer.encode(HELLO)
    cached = generate(loaded, prompt, GREEDY, use_cache=True)
    full = generate(loaded, prompt, GREEDY, use_cache=False)
    assert cached.n_new == 20
    assert ids_of(cached) == ids_of(full)
    for a, b in zip(cached.steps, full.steps):
        np.testing.assert_allclose(a.scores.logits, b.scores.logits, atol=1e-4, rtol=1e-4)
    assert cached.text == full.text


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_cache_and_no_cache_agree_on_tiny_models(variant):
    loaded = tiny_model(**VARIANTS[variant])
    prompt = prompt_of(6)
    cached = generate(loaded, prompt, GREEDY.replace(max_new_tokens=24))
    full = generate(loaded, prompt, GREEDY.replace(max_new_tokens=24), use_cache=False)
    assert ids_of(cached) == ids_of(full)
    for a, b in zip(cached.steps, full.steps):
        np.testing.assert_allclose(a.scores.logits, b.scores.logits, atol=1e-4, rtol=1e-4)
    sampled = GREEDY.replace(temperature=1.0, seed=3, max_new_tokens=24)
    assert ids_of(generate(loaded, prompt, sampled)) == ids_of(generate(loaded, prompt, sampled, use_cache=False))


def test_bidirectional_model_never_uses_the_cache():
    loaded = tiny_model(causal=False)
    prompt = prompt_of(5)
    assert ids_of(generate(loaded, prompt, GREEDY)) == ids_of(generate(loaded, prompt, GREEDY, use_cache=False))


def test_greedy_matches_transformers_generate(tiny_gpt2):
    loaded, reference = tiny_gpt2
    prompt = loaded.tokenizer.encode(HELLO)
    input_ids = torch.tensor([prompt])
    with torch.no_grad():
        expected = reference.generate(input_ids, attention_mask=torch.ones_like(input_ids), max_new_tokens=20,
                                      do_sample=False, pad_token_id=loaded.tokenizer.eos_id)
    expected_new = expected[0, len(prompt):].tolist()
    ours = generate(loaded, prompt, SamplingParams(temperature=0.0, max_new_tokens=20))
    assert ids_of(ours) == expected_new
    assert ours.text == loaded.tokenizer.decode(expected_new)


def test_preallocated_cache_equals_the_plain_cache(tiny_gpt2):
    loaded, _ = tiny_gpt2
    model = loaded.model
    ids = torch.tensor([loaded.tokenizer.encode(HELLO)])
    plain, pre = KVCache(model.cfg.n_layers), PreallocatedKVCache(model.cfg.n_layers, capacity=4)  # must grow
    with torch.inference_mode():
        for cache in (plain, pre):
            model(ids[:, :5], cache=cache)
            for j in range(5, ids.shape[1]):
                model(ids[:, j:j + 1], cache=cache)
    assert pre.length == plain.length == ids.shape[1]
    for layer in range(model.cfg.n_layers):
        torch.testing.assert_close(pre.keys[layer], plain.keys[layer], rtol=0, atol=0)
        torch.testing.assert_close(pre.values[layer], plain.values[layer], rtol=0, atol=0)


# --- sampling -----------------------------------------------------------------------------------

def test_temperature_zero_is_greedy(tiny_gpt2):
    loaded, _ = tiny_gpt2
    prompt = loaded.tokenizer.encode(HELLO)
    result = generate(loaded, prompt, GREEDY.replace(max_new_tokens=10))
    for step in result.steps:
        assert step.token_id == int(np.argmax(step.scores.logits))
        assert (step.rank, step.prob) == (0, 1.0)
    # top-k 1 at temperature 1 leaves the same single token whatever the seed draws
    top1 = generate(loaded, prompt, GREEDY.replace(max_new_tokens=10, temperature=1.0, top_k=1, seed=5))
    assert ids_of(top1) == ids_of(result)


def test_seed_reproduces_a_sampled_run_and_another_seed_differs(tiny_gpt2):
    loaded, _ = tiny_gpt2
    prompt = loaded.tokenizer.encode(HELLO)
    params = SamplingParams(temperature=1.0, top_p=0.95, max_new_tokens=12, seed=1234, stop_at_eos=False)
    first, again = generate(loaded, prompt, params), generate(loaded, prompt, params)
    other = generate(loaded, prompt, params.replace(seed=4321))
    assert ids_of(first) == ids_of(again)
    assert first.text == again.text
    assert ids_of(first) != ids_of(other)
    assert generate(loaded, prompt, params.replace(seed=None)).n_new == 12


def test_step_records_context_and_controls(tiny_gpt2):
    loaded, _ = tiny_gpt2
    prompt = loaded.tokenizer.encode(HELLO)
    params = SamplingParams(temperature=0.8, top_k=40, repetition_penalty=1.3, max_new_tokens=6, seed=7,
                            stop_at_eos=False)
    result = generate(loaded, prompt, params)
    for i, step in enumerate(result.steps):
        assert step.index == i
        assert step.scores.previous_ids == tuple(prompt + result.token_ids[:i])  # the penalty's context
        assert step.position == len(prompt) + i
        assert step.scores.chosen_id == step.token_id
        assert step.scores.params == params
        assert step.text == loaded.tokenizer.display(step.token_id)
        assert step.scores.logits.dtype == np.float32 and step.scores.logits.shape == (loaded.config.vocab_size,)
        rank, prob = step.scores.rank_and_prob(step.token_id)
        assert step.rank == rank and step.prob == pytest.approx(prob, rel=1e-9)
        assert step.after.chosen_rank == rank and step.after.chosen_prob == pytest.approx(prob, rel=1e-9)
        assert len(step.before) == len(step.after) == 20 and step.after.num_possible <= 40
        assert step.elapsed >= 0
    assert result.elapsed > 0 and result.tokens_per_second > 0


def test_rescoring_a_recorded_step_does_not_run_the_model(tiny_gpt2, monkeypatch):
    loaded, _ = tiny_gpt2
    params = SamplingParams(temperature=0.7, max_new_tokens=5, seed=0, stop_at_eos=False)
    result = generate(loaded, loaded.tokenizer.encode(HELLO), params)

    def no_forward(*args, **kwargs):
        raise AssertionError("the model ran")

    monkeypatch.setattr(loaded.model, "forward", no_forward)
    step = result.steps[2]
    before, after = step.scores.rescore(params.replace(temperature=0.0))
    assert after.num_possible == 1 and after.ids[0] == before.ids[0]
    before2, after2 = step.distributions(10, params.replace(top_k=3, temperature=1.5))
    assert len(before2) == 10 and after2.num_possible == 3
    assert step.scores.rank_and_prob(int(before.ids[0]), params.replace(temperature=0.0)) == (0, 1.0)
    with pytest.raises(AssertionError, match="the model ran"):
        generate(loaded, [1, 2], params)


def test_vocabulary_padding_is_never_chosen():
    loaded = tiny_model(vocab=30, model_vocab=40, tie_embeddings=False)
    with torch.no_grad():  # make the padding ids by far the most likely ones
        loaded.model.ln_final.weight.zero_()
        loaded.model.ln_final.bias.fill_(1.0)
        loaded.model.unembed.weight[30:] = 1.0
        loaded.model.unembed.weight[:30] *= 0.1
    params = SamplingParams(temperature=2.0, max_new_tokens=30, seed=0)
    for use_cache in (True, False):
        result = generate(loaded, prompt_of(4), params, use_cache=use_cache)
        assert result.n_new == 30 and all(t < 30 for t in result.token_ids)
        for step in result.steps:
            assert np.isneginf(step.scores.logits[30:]).all()
            assert np.isfinite(step.scores.logits[:30]).all()
            assert step.before.num_possible == 30


# --- stopping -----------------------------------------------------------------------------------

def test_max_new_tokens_and_generator_return_value(tiny_gpt2):
    loaded, _ = tiny_gpt2
    gen = generate_steps(loaded, loaded.tokenizer.encode(HELLO), GREEDY.replace(max_new_tokens=3))
    steps = []
    with pytest.raises(StopIteration) as done:
        while True:
            steps.append(next(gen))
            # torch's inference mode is only on during each forward pass, never between steps
            assert not torch.is_inference_mode_enabled() and torch.is_grad_enabled()
    result = done.value.value
    assert isinstance(result, GenerationResult)
    assert result.stop_reason == "max_new_tokens" and result.steps == tuple(steps) and len(steps) == 3
    assert result.stop_reason in STOP_REASONS


def test_cancel_between_steps(tiny_gpt2):
    loaded, _ = tiny_gpt2
    prompt = loaded.tokenizer.encode(HELLO)
    seen = []
    result = generate(loaded, prompt, GREEDY, cancel=lambda: len(seen) >= 4, on_step=seen.append)
    assert result.stop_reason == "cancelled" and result.n_new == 4 == len(seen)
    assert ids_of(result) == ids_of(generate(loaded, prompt, GREEDY))[:4]

    event = threading.Event()

    def set_after_two(step):
        if step.index == 1:
            event.set()

    result = generate(loaded, prompt, GREEDY, cancel=event, on_step=set_after_two)
    assert result.stop_reason == "cancelled" and result.n_new == 2
    event.set()
    assert generate(loaded, prompt, GREEDY, cancel=event).steps == ()


@pytest.mark.parametrize("use_cache", [True, False])
def test_context_full_stops_with_a_reason(use_cache):
    loaded = tiny_model(n_ctx=16)
    result = generate(loaded, prompt_of(12), GREEDY.replace(max_new_tokens=64), use_cache=use_cache)
    assert result.stop_reason == "context_full"
    assert result.n_new == 4
    assert result.steps[-1].position == 15  # the last position the model has
    # max_new_tokens wins when both are reached at the same step
    assert generate(loaded, prompt_of(12), GREEDY.replace(max_new_tokens=4)).stop_reason == "max_new_tokens"
    full = generate(loaded, prompt_of(16), GREEDY)
    assert full.stop_reason == "context_full" and full.steps == () and full.text == ""
    with pytest.raises(PromptError, match="17 tokens"):
        generate(loaded, prompt_of(17), GREEDY)
    with pytest.raises(ValueError, match="on_overflow"):
        generate(loaded, prompt_of(12), GREEDY, on_overflow="slide")


def test_bad_prompts():
    loaded = tiny_model()
    with pytest.raises(PromptError, match="empty"):
        generate(loaded, [], GREEDY)
    with pytest.raises(PromptError, match="empty"):
        generate(loaded, "", GREEDY)
    with pytest.raises(PromptError, match="outside"):
        generate(loaded, [3, 30], GREEDY)


def test_eos_stops_and_is_left_out_of_the_text():
    loaded = tiny_model()
    prompt = prompt_of(5)
    free = generate(loaded, prompt, GREEDY.replace(max_new_tokens=12))
    eos = free.token_ids[3]
    first = free.token_ids.index(eos)
    loaded.tokenizer.eos_id = eos
    result = generate(loaded, prompt, GREEDY.replace(max_new_tokens=12, stop_at_eos=True))
    assert result.stop_reason == "eos"
    assert result.token_ids == free.token_ids[:first + 1]
    assert result.text == continuation_text(loaded.tokenizer, prompt, free.token_ids[:first])
    ignoring = generate(loaded, prompt, GREEDY.replace(max_new_tokens=12, stop_at_eos=False))
    assert ignoring.stop_reason == "max_new_tokens" and ignoring.n_new == 12


def test_stop_string(tiny_gpt2):
    loaded, _ = tiny_gpt2
    prompt = loaded.tokenizer.encode(HELLO)
    free = generate(loaded, prompt, GREEDY)
    # a stop string that ends inside the k-th new token and starts in the one before (the first k >= 5
    # where it does not occur earlier: the random weights' continuation depends on transformers' init)
    for k in range(5, len(free.token_ids) + 1):
        before = continuation_text(loaded.tokenizer, prompt, free.token_ids[:k - 1])
        upto = continuation_text(loaded.tokenizer, prompt, free.token_ids[:k])
        stop = upto[len(before) - 2: len(before) + 1]
        if len(before) >= 2 and len(upto) > len(before) and stop not in before:
            break
    else:
        raise AssertionError("pick another prompt: no stop string fits the continuation")
    result = generate(loaded, prompt, GREEDY.replace(stop_strings=(stop, "never appears \u2603")))
    assert result.stop_reason == "stop_string"
    assert result.token_ids == free.token_ids[:k]
    assert result.text == upto and stop in result.text


def test_continuation_text_joins_words():
    tok = VocabTokenizer(["a", "b", "c"], split="words")
    assert continuation_text(tok, [0, 1], [2, 0]) == " c a"
    stream = IncrementalText(tok, [0, 1])
    assert stream.push(2) + stream.push(0) + stream.flush() == " c a"


def test_incremental_text_holds_back_partial_characters():
    from explorer.core.tokenize.base import gpt2_tokenizer

    tok = gpt2_tokenizer()
    prompt = tok.encode("Snow:")
    new = tok.encode(" \u2603\u2603 ok")  # the snowman is more than one byte-level token
    stream = IncrementalText(tok, prompt)
    pieces = [stream.push(t) for t in new] + [stream.flush()]
    assert "".join(pieces) == " \u2603\u2603 ok"
    assert all("\ufffd" not in p for p in pieces)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu(tiny_gpt2_dir):
    from explorer.core.checkpoint import load_checkpoint

    cpu, gpu = load_checkpoint(tiny_gpt2_dir, device="cpu"), load_checkpoint(tiny_gpt2_dir, device="cuda")
    prompt = cpu.tokenizer.encode(HELLO)
    expected = ids_of(generate(cpu, prompt, GREEDY))
    assert ids_of(generate(gpu, prompt, GREEDY)) == expected
    assert ids_of(generate(gpu, prompt, GREEDY, use_cache=False)) == expected


# --- the CLI ------------------------------------------------------------------------------------

def test_cli_prints_the_continuation(tiny_gpt2_dir, tiny_gpt2, capsys):
    from explorer.cli import main

    loaded, _ = tiny_gpt2
    code = main(["generate", "--checkpoint", str(tiny_gpt2_dir), "--device", "cpu", "--prompt", HELLO,
                 "--max-new-tokens", "8", "--temperature", "0"])
    out, err = capsys.readouterr()
    assert code == 0
    expected = generate(loaded, HELLO, SamplingParams(temperature=0.0, max_new_tokens=8))
    assert out == expected.text + "\n"
    assert "max_new_tokens" in err or "eos" in err


def test_cli_show_steps_and_sampling_options(tiny_gpt2_dir, capsys):
    from explorer.cli import main

    argv = ["generate", "-c", str(tiny_gpt2_dir), "--device", "cpu", "-p", HELLO, "-n", "3", "--temperature",
            "0.9", "--top-k", "50", "--top-p", "0.9", "--min-p", "0.01", "--repetition-penalty", "1.2",
            "--seed", "11", "--no-cache", "--show-steps"]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert out.count("before:") == 3 and out.count("after:") == 3
    assert "[0] " in out and "[2] " in out and "rank" in out
    assert main(argv) == 0
    assert capsys.readouterr().out == out  # the seed reproduces the run


@pytest.mark.parametrize("bad", [["--temperature", "-1"], ["--top-p", "1.5"], ["--max-new-tokens", "0"],
                                 ["--repetition-penalty", "0"], ["--min-p", "1"], ["--seed", "-3"]])
def test_cli_rejects_bad_sampling_params(tiny_gpt2_dir, capsys, bad):
    from explorer.cli import main

    code = main(["generate", "--checkpoint", str(tiny_gpt2_dir), "--prompt", "Hi", *bad])
    out, err = capsys.readouterr()
    assert code == 2
    assert out == ""
    assert err.startswith("error: ") and err.count("\n") == 1
