"""A checkpoint's chat template: where it is found, as ``transformers`` finds it, and what it reads.

A Hugging Face directory: ``chat_template.jinja`` (it wins over the configuration's), else
``tokenizer_config.json``'s ``chat_template``, a string or a list of ``{"name", "template"}``; named
extra templates in ``additional_chat_templates/NAME.jinja``. When there are several, ``"default"`` is
used unless a name is asked for (as ``tokenizer.get_chat_template``). A GGUF file: its
``tokenizer.chat_template`` (and ``tokenizer.chat_template.NAME``) metadata.

The template is rendered with the variables transformers gives it: ``messages``, ``tools`` and
``documents`` (None), ``add_generation_prompt``, the special tokens (``bos_token``, ``eos_token``, ...
as text) and whatever options the caller adds (``enable_thinking``, ``reasoning_effort``, ``date_string``,
...). Rendering happens in ``sandbox.render_many``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from explorer.core.chat.sandbox import MAX_TEMPLATE_CHARS, ChatTemplateError, render_many
from explorer.core.errors import TokenizerError

SPECIAL_KEYS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
# what every template is given; the rest of the names it reads are its options
STANDARD_NAMES = frozenset({"messages", "tools", "documents", "add_generation_prompt", "raise_exception",
                            "strftime_now", "namespace", "dict", "range", "lipsum", "cycler", "joiner",
                            *SPECIAL_KEYS})


@dataclass(frozen=True)
class ChatTemplate:
    """One chat template and where it came from; ``others`` names the checkpoint's other templates."""

    text: str
    source: str  # "chat_template.jinja", "tokenizer_config.json", "GGUF metadata tokenizer.chat_template", ...
    name: str = "default"
    special_tokens: dict[str, str] = field(default_factory=dict)
    others: tuple[str, ...] = ()

    def describe(self) -> str:
        named = f" '{self.name}'" if self.name != "default" or self.others else ""
        return f"chat template{named} from {self.source}"

    def render(self, contexts: list[dict[str, Any]]) -> list[str]:
        """The template rendered with each context (special tokens added), in the sandbox."""
        full = [{**self.special_tokens, "tools": None, "documents": None, **c} for c in contexts]
        return render_many(self.text, full)[0]

    def options(self) -> list[str]:
        """The names the template reads beyond the standard ones (``enable_thinking``, ``date_string``, ...)."""
        names = render_many(self.text, [])[1]
        return sorted(n for n in names if n not in STANDARD_NAMES)


def _choose(templates: dict[str, tuple[str, str]], name: str | None, special: dict[str, str]) -> ChatTemplate:
    if name is None:
        if len(templates) == 1:
            name = next(iter(templates))
        elif "default" in templates:
            name = "default"
        else:
            raise ChatTemplateError(f"this checkpoint has several chat templates and none is the default: "
                                    f"choose one of {', '.join(sorted(templates))}")
    if name not in templates:
        raise ChatTemplateError(f"there is no chat template named {name!r:.60}; this checkpoint has "
                                f"{', '.join(sorted(templates)) or 'none'}")
    text, source = templates[name]
    if not isinstance(text, str) or not text.strip():
        raise ChatTemplateError(f"the chat template in {source} is empty")
    if len(text) > MAX_TEMPLATE_CHARS:
        raise ChatTemplateError(f"the chat template in {source} has {len(text):,} characters, more than the "
                                f"{MAX_TEMPLATE_CHARS:,} a template may have")
    return ChatTemplate(text, source, name, dict(special), tuple(sorted(n for n in templates if n != name)))


def _config_templates(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if isinstance(value, str):
        return {"default": value}
    if isinstance(value, list) and all(isinstance(t, dict) and isinstance(t.get("name"), str)
                                       and isinstance(t.get("template"), str) for t in value):
        return {t["name"]: t["template"] for t in value}
    raise ChatTemplateError("tokenizer_config.json: chat_template should be a string or a list of "
                            '{"name": ..., "template": ...}')


def special_tokens_of(config: dict[str, Any]) -> dict[str, str]:
    """The special tokens a template is given, as text (transformers' ``special_tokens_map``)."""
    from explorer.core.tokenize.hf_tokenizer import token_text

    out = {}
    for key in SPECIAL_KEYS:
        text = token_text(config.get(key))
        if text is not None:
            out[key] = text
    return out


def template_from_directory(directory: str | Path, name: str | None = None) -> ChatTemplate | None:
    """The directory's chat template (None when it has none); a broken one is a ``ChatTemplateError``."""
    from explorer.core.tokenize.hf_files import read_text
    from explorer.core.tokenize.huggingface import read_tokenizer_config

    directory = Path(directory)
    try:
        config = read_tokenizer_config(directory)
        templates = {k: (v, "tokenizer_config.json") for k, v in
                     _config_templates(config.get("chat_template")).items()}
        jinja = directory / "chat_template.jinja"
        if jinja.is_file():
            templates["default"] = (read_text(jinja, MAX_TEMPLATE_CHARS * 4), "chat_template.jinja")
        extra = directory / "additional_chat_templates"
        if extra.is_dir():
            for path in sorted(extra.glob("*.jinja"))[:64]:
                templates[path.stem] = (read_text(path, MAX_TEMPLATE_CHARS * 4), f"additional_chat_templates/{path.name}")
    except TokenizerError as exc:
        raise ChatTemplateError(f"the chat template cannot be read: {exc}") from None
    if not templates:
        return None
    return _choose(templates, name, special_tokens_of(config))


def template_from_gguf(metadata: dict[str, Any], name: str | None = None) -> ChatTemplate | None:
    """A GGUF file's ``tokenizer.chat_template`` (None when it has none); the special tokens from its ids."""
    templates: dict[str, tuple[str, str]] = {}
    for key, value in metadata.items():
        if key == "tokenizer.chat_template" or key.startswith("tokenizer.chat_template."):
            label = "default" if key == "tokenizer.chat_template" else key.removeprefix("tokenizer.chat_template.")
            if not isinstance(value, str):
                raise ChatTemplateError(f"the GGUF metadata {key} is not text")
            templates[label] = (value, f"GGUF metadata {key}")
    if not templates:
        return None
    tokens = metadata.get("tokenizer.ggml.tokens")
    special = {}
    for key, field_name in (("bos_token", "bos_token_id"), ("eos_token", "eos_token_id"),
                            ("unk_token", "unknown_token_id"), ("pad_token", "padding_token_id")):
        token_id = metadata.get(f"tokenizer.ggml.{field_name}")
        if isinstance(tokens, list) and isinstance(token_id, int) and not isinstance(token_id, bool) \
                and 0 <= token_id < len(tokens) and isinstance(tokens[token_id], str):
            special[key] = tokens[token_id]
    return _choose(templates, name, special)


def found(find: Any, *args: Any) -> tuple[ChatTemplate | None, str | None]:
    """``find(*args)`` for a loader: (the template, None), (None, None) when there is none, or (None, the
    one line saying why a broken one cannot be used): a bad template never stops a model from loading."""
    try:
        return find(*args), None
    except ChatTemplateError as exc:
        return None, f"Its chat template cannot be used ({exc}); the raw prompt still works."
