"""Generation as the assistant against transformers' ``generate`` on the templated ids, the trace's spans (and
their export), the per-span summaries, and ``--chat`` on the commands; a tiny random Llama with Qwen3's and
DeepSeek-R1's real templates (tests/chat_files.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from chat_files import conversation, write_family  # noqa: E402

from explorer.cli import main  # noqa: E402
from explorer.core.chat.assistant import end_of_turn_ids, generate_reply, reply_kinds, split_reply  # noqa: E402
from explorer.core.chat.summaries import (  # noqa: E402
    answer_positions,
    answer_top_token_layers,
    attention_to_spans,
    span_groups,
)
from explorer.core.checkpoint import load_checkpoint  # noqa: E402
from explorer.core.generation.sampling import SamplingParams  # noqa: E402

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()
GREEDY = SamplingParams(temperature=0.0, max_new_tokens=12)


def tiny_chat_model(directory: Path, family: str = "qwen3", ends_after: int = 3):
    """A random Llama over the family's tiny tokenizer whose greedy reply to ``conversation(2)`` ends its turn
    with the end-of-turn token after ``ends_after - 1`` tokens (two output rows swapped so that it does)."""
    from transformers import AutoTokenizer, GenerationConfig, LlamaConfig, LlamaForCausalLM

    write_family(family, directory)
    tok = AutoTokenizer.from_pretrained(str(directory))
    end = tok.convert_tokens_to_ids(tok.eos_token)
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64,
                                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                         max_position_embeddings=512, tie_word_embeddings=False,
                                         attn_implementation="eager", eos_token_id=end)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.5 if p.dim() > 1 else 0.1).add_(1.0 if p.dim() == 1 else 0.0)
    ids = tok.apply_chat_template(conversation(2), add_generation_prompt=True, tokenize=True)["input_ids"]
    out = model.generate(torch.tensor([ids]), max_new_tokens=8, do_sample=False, eos_token_id=None)[0, len(ids):]
    step = ends_after - 1
    chosen = out[step].item()
    assert end not in out[:step].tolist() and chosen not in out[:step].tolist()
    with torch.no_grad():  # the end-of-turn token takes the place of the token chosen at that step
        w = model.lm_head.weight
        w[[end, chosen]] = w[[chosen, end]]
    model.generation_config = GenerationConfig(eos_token_id=[end], do_sample=False)
    model.save_pretrained(str(directory))
    return model, tok, ids, end


@pytest.fixture(scope="module")
def chat_model(tmp_path_factory):
    directory = tmp_path_factory.mktemp("chatmodel") / "qwen3-tiny"
    model, tok, ids, end = tiny_chat_model(directory)
    return directory, model, tok, ids, end


def test_greedy_reply_equals_transformers_generate_and_stops_at_end_of_turn(chat_model):
    directory, model, tok, ids, end = chat_model
    loaded = load_checkpoint(str(directory))
    assert end in end_of_turn_ids(loaded)
    reply = generate_reply(loaded, conversation(2), GREEDY)
    theirs = model.generate(torch.tensor([ids]), max_new_tokens=12, do_sample=False)[0, len(ids):].tolist()
    assert list(reply.encoding.ids) == ids
    assert reply.result.token_ids == theirs and theirs[-1] == end and len(theirs) == 3
    assert reply.ended_turn and reply.result.stop_reason == "eos"
    # the reply kept as a turn renders as transformers renders the same conversation
    kept = reply.messages()
    assert kept[-1]["role"] == "assistant" and kept[:-1] == conversation(2)
    again = loaded.encode_chat(kept, add_generation_prompt=False)
    assert list(again.ids) == tok.apply_chat_template(kept, tokenize=True)["input_ids"]


def test_generate_command_with_chat_saves_the_turn(chat_model, tmp_path, capsys):
    directory, model, tok, ids, end = chat_model
    chat = tmp_path / "chat.json"
    chat.write_text(json.dumps(conversation(2)))
    saved = tmp_path / "after.json"
    assert main(["generate", "-c", str(directory), "--chat", str(chat), "-t", "0", "-n", "12",
                 "--save-chat", str(saved)]) == 0
    err = capsys.readouterr().err
    assert "stopped: eos" in err and "3 tokens" in err
    assert json.loads(saved.read_text())[-1]["role"] == "assistant"


def test_chat_trace_carries_spans_into_exports(chat_model, tmp_path, capsys):
    directory = chat_model[0]
    chat = tmp_path / "chat.json"
    chat.write_text(json.dumps(conversation(3)))
    out = tmp_path / "export"
    assert main(["export", "-c", str(directory), "--chat", str(chat), "-o", str(out)]) == 0
    loaded = load_checkpoint(str(directory))
    trace = loaded.trace_chat(conversation(3))
    spans = trace.meta.chat
    assert spans is not None and spans.n_tokens == trace.n_tokens
    from explorer.core.interop import read_trace_safetensors

    back = read_trace_safetensors(out / "trace.safetensors")
    assert back.meta.chat == spans and list(back.token_ids) == list(trace.token_ids)
    with np.load(out / "trace.npz") as npz:
        assert json.loads(str(npz["chat"]))["kinds"] == list(spans.kinds)


def test_old_trace_files_still_open(chat_model, tmp_path):
    from explorer.core.interop import read_trace_safetensors, write_trace_safetensors

    loaded = load_checkpoint(str(chat_model[0]))
    write_trace_safetensors(loaded.trace("plain text"), tmp_path / "t.safetensors", "plain text")
    assert read_trace_safetensors(tmp_path / "t.safetensors").meta.chat is None


def test_attention_to_spans_sums_to_one_and_matches_the_pattern(chat_model):
    loaded = load_checkpoint(str(chat_model[0]))
    messages = conversation(2) + [{"role": "assistant", "content": "The capital of France is Paris."}]
    trace = loaded.trace_chat(messages, add_generation_prompt=False)
    spans = trace.meta.chat
    answer = answer_positions(spans)
    assert all(spans.role_of(int(p)) == "assistant" and spans.kinds[int(p)] == "content" for p in answer)
    summary = attention_to_spans(trace)
    assert summary.labels[0] == "markup" and "system" in summary.labels and "user 1" in summary.labels
    assert np.allclose(summary.values.sum(axis=-1), 1.0, atol=1e-5)
    # one head by hand: the mean over the answer rows of the pattern's mass on the system prompt's columns
    system = next(g.positions for g in span_groups(spans) if g.label == "system")
    pattern = trace.head(1, 2, "pattern")
    expected = pattern[answer][:, system].sum(axis=1).mean()
    assert summary.values[1, 2, summary.labels.index("system")] == pytest.approx(expected, abs=1e-6)


def test_answer_top_token_layers_agree_with_the_logit_lens(chat_model):
    from explorer.core.analysis.residual import logit_lens

    loaded = load_checkpoint(str(chat_model[0]))
    trace = loaded.trace_chat(conversation(1))
    (found,) = answer_top_token_layers(trace)
    lens = logit_lens(trace)
    tops = lens.ids[:, found.position, 0]
    assert found.position == trace.n_tokens - 1 and found.token_id == int(np.argmax(trace["logits"][-1]))
    assert (tops[found.boundary:] == found.token_id).all()
    assert found.boundary == 0 or tops[found.boundary - 1] != found.token_id


def test_patch_two_conversations_of_the_same_length(chat_model, tmp_path, capsys):
    directory = chat_model[0]
    clean, corrupt, longer = tmp_path / "clean.json", tmp_path / "corrupt.json", tmp_path / "longer.json"
    clean.write_text(json.dumps([{"role": "user", "content": "What is the capital of France?"}]))
    corrupt.write_text(json.dumps([{"role": "user", "content": "What is the capital of Paris?"}]))
    longer.write_text(json.dumps([{"role": "user", "content": "What is the capital of France, of course?"}]))
    out = tmp_path / "patch"
    assert main(["patch", "-c", str(directory), "--chat", str(clean), "--corrupt-chat", str(corrupt),
                 "--target", " Paris", "-o", str(out)]) == 0
    summary = json.loads((out / "patch.json").read_text())
    assert summary["clean"][0]["content"].endswith("France?") and len(summary["tokens"]) == \
        len(summary["corrupt_tokens"])
    assert np.load(out / "resid_patch.npy").shape[1] == len(summary["tokens"])
    capsys.readouterr()
    assert main(["patch", "-c", str(directory), "--chat", str(clean), "--corrupt-chat", str(longer),
                 "--target", " Paris", "-o", str(tmp_path / "p2")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "same length" in err[-1]


def test_bad_chat_file_is_one_line(chat_model, tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"role": "wizard", "content": "hi"}]))
    assert main(["export", "-c", str(chat_model[0]), "--chat", str(bad), "-o", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "wizard" in err[0]


def test_split_reply_and_generated_kinds():
    assert split_reply("Let me see.</think>\n\nParis.", open_thinking=True) == ("Let me see.", "Paris.")
    assert split_reply("<think>\nhm\n</think>\n\nParis.") == ("hm", "Paris.")
    assert split_reply("Paris.") == ("", "Paris.")
    harmony = "<|channel|>analysis<|message|>Capital?<|end|><|start|>assistant<|channel|>final<|message|>Paris."
    assert split_reply(harmony, harmony=True) == ("Capital?", "Paris.")
    assert reply_kinds(["<|channel|>", "analysis", "<|message|>", "Cap", "<|end|>", "<|start|>", "assistant",
                        "<|channel|>", "final", "<|message|>", "Paris"]) == \
        ["markup"] * 3 + ["analysis"] + ["markup"] * 6 + ["final"]
    assert reply_kinds(["hm", "</think>", "Paris"], open_thinking=True) == ["thinking", "markup", "content"]
    gemma4 = "<|channel>thought\nThe capital of France.<channel|>Paris."  # Gemma 4's thought channel
    assert split_reply(gemma4) == ("The capital of France.", "Paris.")
    assert split_reply("hm\n<channel|>Paris.", open_thinking=True) == ("hm", "Paris.")
    assert split_reply("<|channel>thought\nhm", open_thinking=True) == ("hm", "")
    assert reply_kinds(["<|channel>", "thought", "\n", "hm", "<channel|>", "Paris"]) == \
        ["markup"] * 3 + ["thinking", "markup", "content"]


def test_gemma4_reply_ends_at_its_turn_marker(tmp_path):
    """Gemma 4 (the current template): the reply's ids equal transformers' generate, it stops at <turn|>, and
    kept as a turn it renders as that turn."""
    directory = tmp_path / "g4"
    model, tok, ids, end = tiny_chat_model(directory, "gemma4", ends_after=3)
    loaded = load_checkpoint(str(directory))
    assert tok.convert_tokens_to_ids("<turn|>") in end_of_turn_ids(loaded)
    reply = generate_reply(loaded, conversation(2), GREEDY)
    theirs = model.generate(torch.tensor([ids]), max_new_tokens=12, do_sample=False)[0, len(ids):].tolist()
    assert reply.result.token_ids == theirs and reply.ended_turn and theirs[-1] == end
    kept = loaded.encode_chat(reply.messages(), False)
    assert kept.text.endswith("<turn|>\n") and kept.spans.roles[-1] == "assistant"


def test_deepseek_reply_starts_inside_the_reasoning(tmp_path):
    directory = tmp_path / "r1"
    model, tok, ids, end = tiny_chat_model(directory, "deepseek_r1", ends_after=4)
    loaded = load_checkpoint(str(directory))
    reply = generate_reply(loaded, conversation(2), GREEDY)
    theirs = model.generate(torch.tensor([ids]), max_new_tokens=12, do_sample=False)[0, len(ids):].tolist()
    assert reply.result.token_ids == theirs and reply.ended_turn
    assert reply.encoding.open_thinking and reply.answer == "" and reply.thinking  # no </think>: all reasoning
