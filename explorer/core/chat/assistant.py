"""Generation as the assistant: continue the assistant's turn, stop at the template's end of turn, keep the reply.

The end-of-turn tokens (``end_of_turn_ids``) are what transformers' ``generate`` stops at for the
checkpoint, its ``generation_config.json`` (else ``config.json``) ``eos_token_id``, one id or a list,
together with the end markers the template itself writes (``<|eot_id|>``, ``<|im_end|>``,
``<end_of_turn>``, ``<|end|>``, ``</s>``, ...) and the tokenizer's end of text. A Harmony template
(gpt-oss) ends a turn at ``<|return|>`` or ``<|call|>`` only: its ``<|end|>`` closes a channel's
message, after which the same turn goes on in another channel.

``split_reply`` parts a reply into its reasoning and its answer (``<think>…</think>`` or Gemma 4's
``<|channel>thought…<channel|>``, where the prompt may already have opened the block as DeepSeek-R1's
does; Harmony's analysis and final channels), and ``with_reply`` appends it as an assistant turn with the reasoning under ``thinking``,
so that the template renders it (or drops it from earlier turns) as it does for any conversation.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from explorer.core.chat.encode import ChatEncoding
from explorer.core.chat.messages import checked_messages
from explorer.core.chat.spans import END_MARKERS, REASONING_BLOCKS, ChatSpans

if TYPE_CHECKING:
    from explorer.core.generation.generate import GenerationResult, Step
    from explorer.core.generation.sampling import SamplingParams
    from explorer.core.loaded import LoadedModel

_HARMONY_ENDS = ("<|return|>", "<|call|>")
_CHANNEL = re.compile(r"<\|channel\|>(\w+)[^<]*(?:<\|constrain\|>[^<]*)?<\|message\|>(.*?)"
                      r"(?:<\|end\|>|<\|return\|>|<\|call\|>|$)", re.S)


def _ids(value: Any) -> list[int]:
    values = value if isinstance(value, list) else [value]
    return [v for v in values if isinstance(v, int) and not isinstance(v, bool) and v >= 0]


def config_eos_ids(source: str) -> list[int]:
    """``eos_token_id`` of the checkpoint directory's generation_config.json, else its config.json."""
    path = Path(source)
    directory = path.parent if path.is_file() else path
    for name in ("generation_config.json", "config.json"):
        file = directory / name
        try:
            if file.is_file() and file.stat().st_size < 4 * 2**20:
                data = json.loads(file.read_text(encoding="utf-8"))
                if isinstance(data, dict) and "eos_token_id" in data:
                    return _ids(data["eos_token_id"])
        except (OSError, ValueError):
            continue
    return []


def end_of_turn_ids(loaded: LoadedModel) -> tuple[int, ...]:
    """The ids that end the assistant's turn for this checkpoint (see the module doc), sorted."""
    ids = set(config_eos_ids(loaded.source))
    tokenizer, template = loaded.tokenizer, loaded.chat_template
    if tokenizer.eos_id is not None:
        ids.add(int(tokenizer.eos_id))
    text = template.text if template is not None else ""
    harmony = "<|channel|>" in text
    markers = _HARMONY_ENDS if harmony else [m for m in END_MARKERS if m in text]
    backend = getattr(tokenizer, "backend", None)
    for marker in markers:
        token_id = backend.token_to_id(marker) if backend is not None else None
        if token_id is not None:
            ids.add(int(token_id))
    if harmony and backend is not None:
        end = backend.token_to_id("<|end|>")
        ids.discard(end)
    return tuple(sorted(i for i in ids if 0 <= i < loaded.config.vocab_size))


def split_reply(text: str, open_thinking: bool = False, harmony: bool = False) -> tuple[str, str]:
    """(reasoning, answer) of a reply's text (reasoning "" when there is none)."""
    if harmony and "<|channel|>" in text:
        parts = _CHANNEL.findall(text)
        thinking = "\n".join(body.strip() for channel, body in parts if channel == "analysis")
        final = [body for channel, body in parts if channel == "final"]
        return thinking, (final[-1].strip() if final else "")
    opening, closing = next(((a, b) for a, b in REASONING_BLOCKS if a in text or b in text), REASONING_BLOCKS[0])
    full = (opening + text) if open_thinking and opening not in text.split(closing)[0] else text
    if closing in full:
        head, answer = full.split(closing, 1)
        return head.split(opening)[-1].strip(), answer.strip()
    if open_thinking:  # the reasoning never closed: it is all reasoning
        return full.split(opening, 1)[-1].strip(), ""
    return "", text.strip()


def with_reply(messages: Sequence[dict[str, str]], answer: str, thinking: str = "") -> list[dict[str, str]]:
    """The conversation with the reply appended as an assistant turn (reasoning under ``thinking``)."""
    reply = {"role": "assistant", "content": answer}
    if thinking:
        reply["thinking"] = thinking
    return checked_messages([*messages, reply])


@dataclass(frozen=True, eq=False)
class ChatReply:
    """A generated assistant turn: the prompt's encoding, the generation, and the reply split."""

    encoding: ChatEncoding
    result: GenerationResult
    thinking: str
    answer: str
    end_ids: tuple[int, ...]

    @property
    def ended_turn(self) -> bool:
        """The model closed its turn (an end-of-turn token), rather than running out of tokens."""
        return self.result.stop_reason == "eos"

    def messages(self) -> list[dict[str, str]]:
        """The conversation with this reply kept as its last turn."""
        return with_reply(self.encoding.messages, self.answer, self.thinking)

    def spans(self, kinds: Sequence[str]) -> ChatSpans:
        """The prompt's spans followed by the generated tokens' (``reply_kinds``)."""
        return self.encoding.spans.extended(kinds)


def reply_kinds(tokens: Sequence[str], open_thinking: bool = False) -> list[str]:
    """The kind of each generated token from the tokens' texts: ``<think>``/``</think>``, Gemma 4's
    ``<|channel>thought\n``/``<channel|>`` and Harmony's ``<|channel|>NAME<|message|>`` are markup and switch
    the kind of what follows."""
    kinds, state, pending = [], "thinking" if open_thinking else "content", None
    for text in tokens:
        if text in ("<think>", "</think>", "<channel|>"):
            kinds.append("markup")
            state = "thinking" if text == "<think>" else "content"
        elif text == "<|channel>":  # Gemma 4: the channel's name, up to its newline, is markup
            kinds.append("markup")
            state = "channel name"
        elif state == "channel name":
            kinds.append("markup")
            state = "thinking" if "\n" in text else state
        elif text == "<|channel|>":
            kinds.append("markup")
            pending = ""
        elif pending is not None:
            kinds.append("markup")
            if text == "<|message|>":
                name = pending.strip()
                state = name if name in ("analysis", "commentary", "final") else "content"
                pending = None
            else:
                pending += text
        elif text == "<|start|>":  # a new message's header: its role (markup) up to the channel or message
            kinds.append("markup")
            pending = None
            state = "header"
        elif text.startswith("<|") and text.endswith("|>"):
            kinds.append("markup")
            if text == "<|message|>" and state == "header":
                state = "content"
        elif state == "header":
            kinds.append("markup")
        else:
            kinds.append(state)
    return kinds


def generate_reply(loaded: LoadedModel, messages: Any, params: SamplingParams | None = None, *,
                   cancel: Any = None, on_step: Callable[[Step], None] | None = None,
                   interventions: Sequence[Any] = (), use_cache: bool = True, **template_options: Any) -> ChatReply:
    """The assistant's next turn: the conversation templated with the generation prompt, continued until an
    end-of-turn token (added to ``params.stop_token_ids``), then split into reasoning and answer."""
    from explorer.core.generation.generate import continuation_text, generate
    from explorer.core.generation.sampling import SamplingParams

    encoding = loaded.encode_chat(messages, True, **template_options)
    ends = end_of_turn_ids(loaded)
    params = params if params is not None else SamplingParams()
    params = params.replace(stop_token_ids=tuple(sorted(set(params.stop_token_ids) | set(ends))))
    result = generate(loaded, list(encoding.ids), params, cancel=cancel, use_cache=use_cache, on_step=on_step,
                      interventions=interventions)
    new = result.token_ids[:-1] if result.stop_reason == "eos" else result.token_ids
    text = continuation_text(loaded.tokenizer, list(encoding.ids), new)
    thinking, answer = split_reply(text, encoding.open_thinking, encoding.harmony)
    return ChatReply(encoding, result, thinking, answer, ends)
