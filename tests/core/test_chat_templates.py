"""Chat templates against transformers' ``apply_chat_template``, on the families' real templates (tests/chat_files.py)
in tiny tokenizers written here; the spans of each token; a GGUF file's template; hostile and broken templates."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from chat_files import FAMILIES, conversation, real_template, write_family  # noqa: E402

from explorer.core.chat.encode import encode_chat  # noqa: E402
from explorer.core.chat.messages import ChatError, checked_messages, read_chat_file  # noqa: E402
from explorer.core.chat.sandbox import ChatTemplateError  # noqa: E402
from explorer.core.chat.template import template_from_directory, template_from_gguf  # noqa: E402
from explorer.core.tokenize.huggingface import read_directory_tokenizer  # noqa: E402

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()



def family_cases():
    """Each family's conversations (tests/chat_files.py): its turns x its thinking, then each option variant
    on turns 1 and 3."""
    for family, spec in FAMILIES.items():
        for options in [{}, *spec.get("variants", [])]:
            label = ",".join(f"{k}={v}" for k, v in options.items()) or "default"
            for turns in (1, 3) if options else spec.get("turns", (1, 2, 3, 4)):
                for thinking in spec.get("thinking", ("none", "tags", "field")):
                    # a reply's reasoning as a field: the reference copies it to the names a template reads
                    # (reasoning_content, thinking) only since a newer transformers than the floors' 5.12
                    marks = [pytest.mark.recent_reference] if thinking == "field" else []
                    yield pytest.param(family, turns, thinking, options, id=f"{family}-{turns}-{thinking}-{label}",
                                       marks=marks)


CASES = list(family_cases())


@pytest.fixture(scope="module")
def family_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("chat")
    return {f: write_family(f, root / f) for f in FAMILIES}


def ours_and_theirs(directory: Path, messages, **options):
    from transformers import AutoTokenizer

    ours = encode_chat(read_directory_tokenizer(directory, "t"), template_from_directory(directory), messages,
                       True, **options)
    ref = AutoTokenizer.from_pretrained(str(directory))
    theirs = ref.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, **options)
    text = ref.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, **options)
    return ours, list(theirs["input_ids"]), text  # transformers 5 returns a BatchEncoding


@pytest.mark.parametrize("family,turns,thinking,variant", CASES)
def test_ids_equal_transformers(family_dirs, family, turns, thinking, variant):
    options = {**FAMILIES[family].get("options", {}), **variant}
    ours, theirs, text = ours_and_theirs(family_dirs[family], conversation(turns, thinking=thinking), **options)
    assert ours.text == text
    assert list(ours.ids) == theirs
    assert ours.spans.n_tokens == len(theirs)


def test_qwen3_thinking_switch_changes_the_generation_prompt(family_dirs):
    on, _, _ = ours_and_theirs(family_dirs["qwen3"], conversation(1))
    off, theirs, text = ours_and_theirs(family_dirs["qwen3"], conversation(1), enable_thinking=False)
    assert text.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n") and list(off.ids) == theirs
    assert on.text.endswith("<|im_start|>assistant\n")
    assert "enable_thinking" in template_from_directory(family_dirs["qwen3"]).options()
    # the empty reasoning block the switch writes is the assistant's, and its tags are markup
    tail = off.spans.segments()[-3:]
    assert all(s.role == "assistant" for s in tail)


def labels(encoding) -> list[tuple[str, str, str]]:
    """(role, kind, text) of each run of tokens."""
    out = []
    for s in encoding.spans.segments():
        a, b = encoding.offsets[s.start][0], encoding.offsets[s.stop - 1][1]
        out.append((s.role, s.kind, encoding.text[a:b]))
    return out


def test_spans_name_each_message_and_the_markup(family_dirs):
    messages = conversation(2)
    enc, _, _ = ours_and_theirs(family_dirs["llama3"], messages, date_string="26 Jul 2024")
    runs = labels(enc)
    contents = [(r, t.strip()) for r, k, t in runs if k == "content"]
    assert contents == [(m["role"], m["content"]) for m in messages]
    assert runs[-1][:2] == ("assistant", "markup") and runs[-1][2].startswith("<|start_header_id|>assistant")
    # each turn's end marker closes that turn, the next header opens the next
    user_end = next(t for r, k, t in runs if r == "user" and k == "markup" and "<|eot_id|>" in t)
    assert user_end.startswith("<|eot_id|>")


@pytest.mark.parametrize("family,end", [("gemma4", "<turn|>"), ("qwen3_5", "<|im_end|>")])
def test_spans_of_the_reasoning_families(family_dirs, family, end):
    """Gemma 4 and Qwen3.5: each message's text is its own, the last reply's reasoning is thinking, and each
    turn's end marker closes that turn (the next turn's header opens the next)."""
    messages = conversation(2) + [{"role": "assistant", "content": "Paris.", "thinking": "Paris is in France."}]
    enc = encode_chat(read_directory_tokenizer(family_dirs[family], "t"), template_from_directory(family_dirs[family]),
                      messages, add_generation_prompt=False)
    runs = labels(enc)
    assert [(r, t) for r, k, t in runs if k == "content"] == [(m["role"], m["content"]) for m in messages]
    assert [(r, t.strip()) for r, k, t in runs if k == "thinking"] == [("assistant", "Paris is in France.")]
    assert runs[0][0] == "system"
    ends = [(r, t) for r, k, t in runs if k == "markup" and end in t]
    assert len(ends) == len(messages) and all(t.startswith(end) for r, t in ends)
    assert [r for r, t in ends] == [m["role"] for m in messages]


def test_a_cut_reply_keeps_its_own_text(family_dirs):
    """Qwen3.5 drops an earlier reply's <think> block and the newlines after it: the reply's text is exactly
    what is left, the header's newline stays markup."""
    enc, _, _ = ours_and_theirs(family_dirs["qwen3_5"], conversation(2, thinking="tags"))
    runs = labels(enc)
    assert ("assistant", "content", "The capital of France is Paris.") in runs
    assert ("assistant", "markup", "<|im_start|>assistant\n") in runs


@pytest.mark.parametrize("family,names", [
    ("gemma4", ["enable_thinking", "preserve_thinking"]), ("qwen3_6", ["add_vision_id", "enable_thinking",
                                                                        "preserve_thinking"]),
    ("nemotron3_nano", ["enable_thinking", "truncate_history_thinking"]), ("lfm2_5", ["preserve_thinking"]),
    ("qwen3_8", ["add_vision_id", "enable_thinking", "preserve_thinking", "reasoning_effort"]),
    ("nemotron3_super", ["enable_thinking", "low_effort", "truncate_history_thinking"]),
    ("llama3", ["custom_tools", "date_string", "tools_in_user_message"]),
    ("gptoss", ["builtin_tools", "model_identity", "reasoning_effort"]), ("gemma3", [])])
def test_template_options_are_what_a_caller_can_give(family_dirs, family, names):
    """The names a template reads before setting them (the chat editor's option boxes), not its own variables
    (Gemma 4 sets captured_content, ns_args, ... inside its loops)."""
    assert template_from_directory(family_dirs[family]).options() == names


def test_thinking_spans(family_dirs):
    messages = conversation(2) + [{"role": "assistant", "content": "<think>\nParis is in France.\n</think>\n\nParis."}]
    enc = encode_chat(read_directory_tokenizer(family_dirs["qwen3"], "t"), template_from_directory(family_dirs["qwen3"]),
                      messages, add_generation_prompt=False)
    runs = labels(enc)
    thinking = [t for r, k, t in runs if k == "thinking"]
    assert thinking and "Paris is in France." in "".join(thinking) and all(r == "assistant" for r, k, t in runs
                                                                          if k == "thinking")
    assert ("assistant", "content", "Paris.") in [(r, k, t.strip()) for r, k, t in runs]


def test_harmony_channels(family_dirs):
    messages = conversation(1) + [{"role": "assistant", "content": "Paris.", "thinking": "The user asks a capital."}]
    enc = encode_chat(read_directory_tokenizer(family_dirs["gptoss"], "t"), template_from_directory(family_dirs["gptoss"]),
                      messages, add_generation_prompt=False)
    kinds = {(r, k): t for r, k, t in labels(enc)}
    assert kinds[("assistant", "analysis")].strip() == "The user asks a capital."
    assert kinds[("assistant", "final")].strip() == "Paris."
    assert "Answer briefly" in kinds[("system", "content")]


def test_deepseek_r1_opens_the_reasoning(family_dirs):
    enc, theirs, _ = ours_and_theirs(family_dirs["deepseek_r1"], conversation(2, thinking="tags"))
    assert enc.open_thinking and enc.text.endswith("<｜Assistant｜><think>\n")
    # the template drops the earlier reply's reasoning; its answer is still found
    assert ("assistant", "The capital of France is Paris.") in [(r, t.strip()) for r, k, t in labels(enc)
                                                                 if k == "content"]


def test_template_places(tmp_path):
    """chat_template.jinja wins over tokenizer_config.json; a list of named templates gives the default."""
    text = real_template("qwen3")
    a = write_family("qwen3", tmp_path / "jinja", template=text, where="jinja")
    assert template_from_directory(a).source == "chat_template.jinja"
    b = write_family("qwen3", tmp_path / "list", template=text, where="list")
    found = template_from_directory(b)
    assert found.text == text and found.others == ("other",)
    assert template_from_directory(b, "other").render([{"messages": []}]) == ["x"]
    with pytest.raises(ChatTemplateError, match="no chat template named"):
        template_from_directory(b, "nope")
    c = write_family("qwen3", tmp_path / "none", where="none")
    assert template_from_directory(c) is None
    with pytest.raises(ChatTemplateError, match="no chat template"):
        encode_chat(read_directory_tokenizer(c, "t"), None, conversation(1))


def test_gguf_metadata_template_gives_the_same_ids(family_dirs, tmp_path):
    """A GGUF file's tokenizer.chat_template and tokenizer.ggml.* (written from the same tiny tokenizer):
    the ids equal transformers' on the directory."""
    import gguf

    from explorer.core.checkpoint.gguf_format import read_header
    from explorer.core.tokenize.gguf_tokenizer import tokenizer_from_gguf

    directory = family_dirs["qwen3"]
    data = json.loads((directory / "tokenizer.json").read_text())
    vocab = dict(data["model"]["vocab"])
    for added in data["added_tokens"]:
        vocab[added["content"]] = added["id"]
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    specials = {a["content"] for a in data["added_tokens"] if a["special"]}
    plain = {a["content"] for a in data["added_tokens"] if not a["special"]}
    path = tmp_path / "tiny.gguf"
    w = gguf.GGUFWriter(str(path), "qwen2")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types([3 if t in specials else 4 if t in plain else 1 for t in tokens])
    w.add_token_merges([" ".join(m) if isinstance(m, list) else m for m in data["model"]["merges"]])
    w.add_eos_token_id(vocab["<|im_end|>"])
    w.add_add_bos_token(False)
    w.add_chat_template(real_template("qwen3"))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    header = read_header(path)
    template = template_from_gguf(header.metadata)
    assert template is not None and template.text == real_template("qwen3")
    tokenizer, notes = tokenizer_from_gguf(header, len(tokens))
    for turns in (1, 4):
        messages = conversation(turns, thinking="tags")
        ours = encode_chat(tokenizer, template, messages)
        _, theirs, _ = ours_and_theirs(directory, messages)
        assert list(ours.ids) == theirs


HOSTILE = {
    "a loop that never ends": "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
    "a huge output": "{% for i in range(100000) %}{% for j in range(100000) %}xxxxxxxx{% endfor %}{% endfor %}",
    "a huge string at once": "{{ 'a' * 10 ** 10 }}",
    "a huge padding": "{{ 'x' | center(2000000000) }}",
    "attribute access": "{{ messages.__class__.__mro__ }}",
    "globals": "{{ cycler.__init__.__globals__ }}",
    "mutation": "{{ messages.append(1) }}",
    "an import": "{% import 'os' as os %}{{ os }}",
    "an include": "{% include '/etc/passwd' %}",
    "recursion": "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
    "a syntax error": "{% if %}",
    "raise_exception": "{{ raise_exception('only user and assistant roles are supported') }}",
    "an underscore on a namespace": "{% set ns = namespace(_x=1) %}",
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_template_is_one_line_in_bounded_time(tmp_path, name):
    directory = write_family("qwen3", tmp_path / "hostile", template=HOSTILE[name])
    start = time.perf_counter()
    with pytest.raises(ChatTemplateError) as caught:
        encode_chat(read_directory_tokenizer(directory, "t"), template_from_directory(directory), conversation(1))
    seconds = time.perf_counter() - start
    message = str(caught.value)
    assert "\n" not in message and len(message) < 400 and message.startswith("the chat template")
    assert seconds < 20


def test_broken_template_still_loads_the_model_and_says_why(tmp_path):
    from explorer.core.chat.template import found

    directory = write_family("qwen3", tmp_path / "bad", template="")
    template, note = found(template_from_directory, directory)
    assert template is None and "raw prompt still works" in note and "\n" not in note


@pytest.mark.parametrize("value,words", [
    ("not a list", "list of messages"), ([], "empty"), ([{"role": "robot", "content": "x"}], "role"),
    ([{"role": "user", "content": 3}], "text"), ([{"role": "user"}], "text"), (["hello"], "not an object"),
    ([{"role": "user", "content": "x", "tool_calls": []}], "not role, content or thinking"),
    ([{"role": "user", "content": "x", "thinking": "y"}], "only an assistant"),
    ([{"role": "user", "content": "x" * 5_000_000}], "characters"),
])
def test_bad_conversations_are_one_line(value, words):
    with pytest.raises(ChatError, match=words):
        checked_messages(value)


def test_chat_file(tmp_path):
    good = tmp_path / "chat.json"
    good.write_text(json.dumps(conversation(2)))
    assert read_chat_file(good) == conversation(2)
    bad = tmp_path / "bad.json"
    bad.write_text("[{'role': 'user'}]")
    with pytest.raises(ChatError, match="not valid JSON"):
        read_chat_file(bad)
    with pytest.raises(ChatError, match="no such file"):
        read_chat_file(tmp_path / "missing.json")


def test_spans_survive_a_json_round_trip(family_dirs):
    from explorer.core.chat.spans import ChatSpans

    enc, _, _ = ours_and_theirs(family_dirs["gemma3"], conversation(3))
    again = ChatSpans.from_json(enc.spans.to_json(), enc.spans.n_tokens)
    assert again == enc.spans
    assert np.array_equal(again.positions(role="system"), enc.spans.positions(role="system"))
    with pytest.raises(ValueError):
        ChatSpans.from_json(enc.spans.to_json(), enc.spans.n_tokens + 1)


def test_loaders_attach_the_template_or_a_note(tmp_path):
    """A GGUF file with tokenizer.chat_template loads with it; a broken one loads with a note, no template."""
    import gguf

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from gguf_files import write_model
    from transformers import LlamaConfig, LlamaForCausalLM

    from explorer.core.checkpoint import load_checkpoint

    text = "{{ bos_token }}{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
    model = LlamaForCausalLM(LlamaConfig(vocab_size=100, hidden_size=32, intermediate_size=48, num_hidden_layers=1,
                                         num_attention_heads=4, max_position_embeddings=64)).eval()
    good = write_model(model, tmp_path / "good.gguf", "llama",
                       extra={"tokenizer.chat_template": (text, gguf.GGUFValueType.STRING)})
    loaded = load_checkpoint(str(good))
    assert loaded.chat_template is not None and loaded.chat_template.text == text
    assert "GGUF metadata tokenizer.chat_template" in loaded.chat_template.source
    bad = write_model(model, tmp_path / "bad.gguf", "llama",
                      extra={"tokenizer.chat_template": ("   ", gguf.GGUFValueType.STRING)})
    loaded = load_checkpoint(str(bad))
    assert loaded.chat_template is None and any("chat template cannot be used" in n for n in loaded.notes)
    with pytest.raises(ChatTemplateError, match="no chat template"):
        loaded.encode_chat(conversation(1))
