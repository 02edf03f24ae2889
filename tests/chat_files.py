"""Tiny tokenizers written at test time with the families' real chat templates.

The templates are not copied into this repository: they are read from packages that ship them.

* TRL (``trl/chat_templates/*.jinja``, Apache-2.0) keeps each family's original template, byte for byte,
  to recognise models by it (its README: "Original templates ... used for identity comparison"):
  ``llama3_2.jinja`` (Llama 3.2 Instruct), ``qwen3.jinja`` (Qwen3), ``gemma3.jinja`` (google/gemma-3-*),
  ``gptoss.jinja`` (gpt-oss, Harmony), ``deepseek_r1_distill.jinja`` (every DeepSeek-R1-Distill checkpoint),
  ``gemma4_v5.jinja`` (google/gemma-4-*-it, the current revision) and ``gemma4.jinja`` (an earlier one),
  ``qwen3_5_think.jinja`` / ``qwen3_5_nothink.jinja`` (Qwen3.5 4B and up / 2B and down), ``qwen3_6.jinja``,
  ``qwen3_8.jinja``, ``lfm2.jinja`` (LFM2) and ``lfm2_2_5_v2.jinja`` (LFM2.5, current revision),
  ``nemotron_3_nano.jinja``, ``nemotron_3_super.jinja``, ``glm4moe.jinja`` (GLM-4.5), ``deepseekv3.jinja``
  (DeepSeek-V3), ``phi3_5.jinja`` (Phi-3.5-mini-instruct).
  The special tokens follow the checkpoints' tokenizer_config.json; at least every control token the
  template writes is one, so it stays one id as in the real vocabulary.
* ``mistral_common`` (Mistral AI's own package, which generates the templates its checkpoints ship):
  ``convert_tokenizer_to_chat_template`` of the v3 SentencePiece tokenizer it ships (Mistral-7B-Instruct-v0.3).

Besides its tokens, a family's record says which conversations the tests give it: ``thinking`` (how earlier
replies carry their reasoning: "none", "tags", "field"; all three unless it says), ``turns`` (1 to 4 unless it
says) and ``variants``, the template options tried again on turns 1 and 3 (``enable_thinking=False``, ...).

Each family gets a byte-level BPE (or a SentencePiece-style one for Gemma and Mistral) trained here on a
few sentences, with the family's special tokens, written as tokenizer.json + tokenizer_config.json.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

SENTENCES = ["You are a helpful assistant. Answer briefly and politely.", "What is the capital of France?",
             "The capital of France is Paris.", "And of Italy? Rome, of course.", "Think step by step first.",
             "Let me think: France is a country in Europe; its capital is Paris.", "Thanks! Goodbye.",
             "Cutting Knowledge Date: December 2023 Today Date: 26 Jul 2024 Reasoning: medium",
             "# Valid channels: analysis, commentary, final. Channel must be included for every message.",
             "Knowledge cutoff: 2024-06 Current date: 2025-01-01 You are ChatGPT, a large language model"
             " trained by OpenAI. # Instructions", "0123456789 !?.,:;'\"()[]{}<>|/\\-_=+*&^%$#@~`\n\t"]

GEMMA4_SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<|tool>", "<tool|>", "<|tool_call>", "<tool_call|>",
                   "<|tool_response>", "<tool_response|>", '<|"|>', "<|channel>", "<channel|>", "<|think|>", "<|turn>",
                   "<turn|>", "<|image|>", "<|audio|>", "<|video|>"]
QWEN_TOKENS = {"style": "byte", "bos": None, "eos": "<|im_end|>", "pad": "<|endoftext|>",
               "specials": ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
                            "<|image_pad|>", "<|video_pad|>"],
               "plain": ["<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]}
LFM_TOKENS = {"style": "byte", "bos": "<|startoftext|>", "eos": "<|im_end|>", "pad": "<|pad|>",
              "specials": ["<|pad|>", "<|startoftext|>", "<|endoftext|>", "<|im_start|>", "<|im_end|>",
                           "<|tool_list_start|>", "<|tool_list_end|>", "<|tool_call_start|>", "<|tool_call_end|>",
                           "<|tool_response_start|>", "<|tool_response_end|>"],
              "plain": ["<think>", "</think>"]}

FAMILIES: dict[str, dict[str, Any]] = {
    "llama3": {"trl": "llama3_2.jinja", "style": "byte", "bos": "<|begin_of_text|>", "eos": "<|eot_id|>",
               "specials": ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                            "<|eot_id|>", "<|eom_id|>", "<|python_tag|>"], "options": {"date_string": "26 Jul 2024"}},
    "qwen3": {"trl": "qwen3.jinja", "style": "byte", "bos": None, "eos": "<|im_end|>", "pad": "<|endoftext|>",
              "specials": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
              "plain": ["<think>", "</think>", "<tool_call>", "</tool_call>"], "variants": [{"enable_thinking": False}]},
    "gemma3": {"trl": "gemma3.jinja", "style": "spm", "bos": "<bos>", "eos": "<eos>", "pad": "<pad>",
               "specials": ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>", "<start_of_image>"]},
    "mistral": {"mistral": "mistral_instruct_tokenizer_240323.model.v3", "style": "spm", "bos": "<s>", "eos": "</s>",
                "specials": ["<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]",
                             "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]"]},
    "gptoss": {"trl": "gptoss.jinja", "style": "byte", "bos": "<|startoftext|>", "eos": "<|return|>",
               "pad": "<|endoftext|>", "specials": ["<|startoftext|>", "<|endoftext|>", "<|start|>", "<|end|>",
                                                    "<|message|>", "<|channel|>", "<|constrain|>", "<|return|>",
                                                    "<|call|>"]},
    "deepseek_r1": {"trl": "deepseek_r1_distill.jinja", "style": "byte", "bos": "<｜begin▁of▁sentence｜>",
                    "eos": "<｜end▁of▁sentence｜>", "specials": ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>",
                                                                "<｜User｜>", "<｜Assistant｜>"],
                    "plain": ["<think>", "</think>"]},
    # Gemma 4 (google/gemma-4-*-it): the current revision and the first one (they differ in the final turn's reasoning)
    "gemma4": {"trl": "gemma4_v5.jinja", "style": "spm", "bos": "<bos>", "eos": "<turn|>", "pad": "<pad>",
               "specials": GEMMA4_SPECIALS, "thinking": ("none", "tags", "field"),
               "variants": [{"enable_thinking": True}]},
    "gemma4_first": {"trl": "gemma4.jinja", "style": "spm", "bos": "<bos>", "eos": "<turn|>", "pad": "<pad>",
                     "specials": GEMMA4_SPECIALS, "thinking": ("none", "field"), "turns": (1, 3),
                     "variants": [{"enable_thinking": True}]},
    # Qwen3.5 (Qwen/Qwen3.5-*): 4B and larger think by default, 2B and smaller do not; Qwen3.6 adds preserve_thinking,
    # Qwen3.8 (Qwen/Qwen3.8-27B) a reasoning_effort that writes an instruction into the system prompt
    "qwen3_5": {"trl": "qwen3_5_think.jinja", **QWEN_TOKENS, "thinking": ("none", "tags", "field"),
                "variants": [{"enable_thinking": False}]},
    "qwen3_5_small": {"trl": "qwen3_5_nothink.jinja", **QWEN_TOKENS, "thinking": ("none", "field"), "turns": (1, 3),
                      "variants": [{"enable_thinking": True}]},
    "qwen3_6": {"trl": "qwen3_6.jinja", **QWEN_TOKENS, "thinking": ("none", "tags", "field"),
                "variants": [{"preserve_thinking": True}, {"enable_thinking": False}]},
    "qwen3_8": {"trl": "qwen3_8.jinja", **QWEN_TOKENS, "thinking": ("none", "tags", "field"),
                "variants": [{"reasoning_effort": "low"}, {"reasoning_effort": "medium", "preserve_thinking": False},
                             {"enable_thinking": False}]},
    # LFM2 and LFM2.5 (LiquidAI/LFM2-*, LFM2.5-*): ChatML with Liquid's tool tokens; LFM2.5 reads message.thinking
    "lfm2": {"trl": "lfm2.jinja", **LFM_TOKENS, "thinking": ("none",)},
    "lfm2_5": {"trl": "lfm2_2_5_v2.jinja", **LFM_TOKENS, "thinking": ("none", "tags", "field"),
               "variants": [{"preserve_thinking": True}]},
    # NVIDIA Nemotron 3 Nano (nvidia/NVIDIA-Nemotron-3-Nano-*): thinks by default, drops earlier turns' reasoning;
    # Nemotron 3 Super (nvidia/NVIDIA-Nemotron-3-Super-*) the same with a low_effort hint on the last question
    "nemotron3_nano": {"trl": "nemotron_3_nano.jinja", "style": "byte", "bos": "<s>", "eos": "<|im_end|>",
                       "specials": ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"],
                       "plain": ["<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>",
                                 "</tool_response>"], "thinking": ("none", "tags", "field"),
                       "variants": [{"enable_thinking": False}, {"truncate_history_thinking": False}]},
    "nemotron3_super": {"trl": "nemotron_3_super.jinja", "style": "byte", "bos": "<s>", "eos": "<|im_end|>",
                        "specials": ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"],
                        "plain": ["<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>",
                                  "</tool_response>"], "thinking": ("none", "field"), "turns": (1, 3),
                        "variants": [{"low_effort": True}]},
    # GLM-4.5 / 4.6 (zai-org/GLM-4.5*, the glm4_moe architecture)
    "glm4moe": {"trl": "glm4moe.jinja", "style": "byte", "bos": None, "eos": "<|endoftext|>", "pad": "<|endoftext|>",
                "specials": ["<|endoftext|>", "[MASK]", "[gMASK]", "[sMASK]", "<sop>", "<eop>", "<|system|>",
                             "<|user|>", "<|assistant|>", "<|observation|>", "<think>", "</think>", "<tool_call>",
                             "</tool_call>", "<tool_response>", "</tool_response>", "<arg_key>", "</arg_key>",
                             "<arg_value>", "</arg_value>", "/nothink"],
                "thinking": ("none", "tags", "field"), "variants": [{"enable_thinking": False}]},
    # DeepSeek-V3 (deepseek-ai/DeepSeek-V3*): the R1 template's turns, with tool calls; reasoning is not kept
    "deepseekv3": {"trl": "deepseekv3.jinja", "style": "byte", "bos": "<｜begin▁of▁sentence｜>",
                   "eos": "<｜end▁of▁sentence｜>",
                   "specials": ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>",
                                "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>",
                                "<｜tool▁call▁end｜>", "<｜tool▁outputs▁begin｜>", "<｜tool▁outputs▁end｜>",
                                "<｜tool▁output▁begin｜>", "<｜tool▁output▁end｜>", "<｜tool▁sep｜>"],
                   "plain": ["<think>", "</think>"], "thinking": ("none", "tags")},
    # Phi-3.5 (microsoft/Phi-3.5-mini-instruct): a Llama-style SentencePiece vocabulary
    "phi3_5": {"trl": "phi3_5.jinja", "style": "spm", "bos": "<s>", "eos": "<|endoftext|>", "pad": "<|endoftext|>",
               "specials": ["<unk>", "<s>", "</s>", "<|endoftext|>", "<|assistant|>", "<|system|>", "<|end|>",
                            "<|user|>"], "thinking": ("none",)},
}


def package_file(package: str, *parts: str) -> Path:
    """A data file of an installed package, found without importing the package."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"the package {package} is not installed")
    return Path(list(spec.submodule_search_locations)[0]).joinpath(*parts)


def real_template(family: str) -> str:
    spec = FAMILIES[family]
    if "trl" in spec:
        return package_file("trl", "chat_templates", spec["trl"]).read_text(encoding="utf-8")
    from mistral_common.integrations.chat_templates.chat_templates import convert_tokenizer_to_chat_template

    return convert_tokenizer_to_chat_template(str(package_file("mistral_common", "data", spec["mistral"])))


def tiny_backend(family: str, extra_text: list[str] = ()) -> Any:
    """A small trained tokenizer with the family's special tokens first (ids 0..k-1)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    spec = FAMILIES[family]
    specials = list(spec["specials"])
    if spec["style"] == "byte":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        alphabet = pre_tokenizers.ByteLevel.alphabet()
    else:  # SentencePiece-style: spaces as ▁, a ▁ before the text, byte fallback
        tok = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>" if "<unk>" in specials else None))
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
        tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                         decoders.Strip(content=" ", left=1)])
        alphabet = [f"<0x{b:02X}>" for b in range(256)]
        specials = specials + [a for a in alphabet]
        alphabet = []
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=specials, initial_alphabet=alphabet,
                                  show_progress=False)
    tok.train_from_iterator(SENTENCES + list(extra_text), trainer)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in spec["specials"]])
    if spec.get("plain"):
        tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in spec["plain"]])
    return tok


def write_family(family: str, directory: Path, template: str | None = None, where: str = "config",
                 extra_text: list[str] = ()) -> Path:
    """tokenizer.json + tokenizer_config.json with the family's template (``where``: "config", "jinja",
    "list": a list of named templates, or "none")."""
    spec = FAMILIES[family]
    directory.mkdir(parents=True, exist_ok=True)
    tiny_backend(family, extra_text).save(str(directory / "tokenizer.json"))
    config: dict[str, Any] = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": spec["bos"],
                              "eos_token": spec["eos"], "model_max_length": 4096}
    if spec.get("pad"):
        config["pad_token"] = spec["pad"]
    if spec["style"] == "spm":
        config["unk_token"] = "<unk>"
    text = real_template(family) if template is None else template
    if where == "config":
        config["chat_template"] = text
    elif where == "list":
        config["chat_template"] = [{"name": "default", "template": text}, {"name": "other", "template": "{{ 'x' }}"}]
    elif where == "jinja":
        (directory / "chat_template.jinja").write_text(text, encoding="utf-8")
    (directory / "tokenizer_config.json").write_text(json.dumps(config, ensure_ascii=False), encoding="utf-8")
    return directory


def conversation(turns: int, system: bool = True, thinking: str = "none") -> list[dict[str, str]]:
    """``turns`` user messages (the last one unanswered), assistant replies between, a system prompt first.
    ``thinking``: "none", "tags" (the reply's reasoning in <think> tags in its content) or "field"."""
    users = ["What is the capital of France?", "And of Italy?", "Think step by step first.", "Thanks! Goodbye."]
    replies = ["The capital of France is Paris.", "Rome, of course.", "France is in Europe; its capital is Paris."]
    messages = [{"role": "system", "content": "You are a helpful assistant. Answer briefly."}] if system else []
    for i in range(turns):
        messages.append({"role": "user", "content": users[i]})
        if i < turns - 1:
            reply = {"role": "assistant", "content": replies[i]}
            if thinking == "tags":
                reply["content"] = f"<think>\nLet me think: step {i}.\n</think>\n\n{replies[i]}"
            elif thinking == "field":
                reply["thinking"] = f"Let me think: step {i}."
            messages.append(reply)
    return messages
