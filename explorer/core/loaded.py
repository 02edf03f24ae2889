"""``LoadedModel``: a model ready to run, with its tokenizer and where it came from.

Every checkpoint loader returns one; the UI, the CLI and a notebook user hold one. It encodes
text (cut to the context), traces text or ids into a :class:`~explorer.core.trace.Trace`, and
describes itself for ``transformer-explorer info`` and the window's title.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from explorer.core import arguments
from explorer.core.arguments import checked_ids  # noqa: F401  (the one rule for token ids; re-exported)
from explorer.core.cancel import CancelLike
from explorer.core.config import ModelConfig
from explorer.core.errors import PromptError
from explorer.core.text import shown
from explorer.core.model import Transformer
from explorer.core.placement import describe, input_device, model_dtype
from explorer.core.tokenize.base import Tokenizer
from explorer.core.trace import CaptureSpec, Trace, capture


ENCODERS = ("bert", "roberta", "distilbert")
NOTE_LIMIT = 2_000  # one note about a model (a line of `info`, a tooltip)
ENCODER_REASON = "this model is an encoder: it fills in masked tokens rather than continuing text"


@dataclass
class LoadedModel:
    """A model ready to run, with its tokenizer and where it came from."""

    model: Transformer
    tokenizer: Tokenizer
    name: str
    source: str
    arch: str
    notes: list[str] = field(default_factory=list)  # what the user should know: caps, stand-ins
    repo_id: str | None = None  # "org/name" when it was opened from the Hugging Face cache
    tensor_types: list[tuple[str, str]] = field(default_factory=list)  # a GGUF file's tensors and their types
    chat_template: Any = None  # the checkpoint's ChatTemplate (explorer/core/chat/), None when it has none

    def __post_init__(self) -> None:
        # the name comes from the file (a config's "name", a GGUF's general.name): one line, escaped and capped
        # before any widget or terminal shows it (a 50 MB name froze a label); each note capped likewise
        name = self.name if isinstance(self.name, str) else str(self.name)
        self.name = shown(name)
        self.notes = [note if len(note) <= NOTE_LIMIT else shown(note, NOTE_LIMIT) for note in map(str, self.notes)]

    @property
    def config(self) -> ModelConfig:
        return self.model.cfg

    @property
    def generation_blocked(self) -> str | None:
        """Why this model cannot continue text (an encoder), or None when it can."""
        return ENCODER_REASON if self.arch in ENCODERS else None

    @property
    def n_params(self) -> int:
        from explorer.core.quant.packed import packed_weights

        return self.model.num_parameters() + sum(p.numel() for p in packed_weights(self.model))  # packed: no Parameters

    @property
    def device(self) -> torch.device:
        """Where token ids go (core/placement.py; a placed model's other blocks may compute elsewhere)."""
        return input_device(self.model)

    @property
    def dtype(self) -> torch.dtype:
        return model_dtype(self.model)

    @property
    def placement(self) -> str:
        """Where the layers are: 'all layers cpu', 'layers 0–17 cuda:0, 18–31 cpu'."""
        return describe(self.model)

    def encode(self, text: str) -> tuple[list[int], int | None]:
        """Token ids of ``text``, cut to the context length; the second value is the uncut count if cut."""
        arguments.text(text)
        if not text:
            raise PromptError("the prompt is empty: type some text to analyse")
        ids = self.tokenizer.encode(text)
        if not ids:
            raise PromptError("the prompt has no tokens in this model's vocabulary")
        if len(ids) > self.config.n_ctx:
            return ids[: self.config.n_ctx], len(ids)
        return ids, None

    def trace(self, text: str, spec: CaptureSpec | None = None, interventions: Sequence[Any] = ()) -> Trace:
        """Run ``text`` through the model and capture what ``spec`` selects (default:
        ``CaptureSpec.default_for`` the device: full on the CPU, compact and kept on an accelerator),
        with ``interventions`` (explorer/core/interventions/) applied if any."""
        ids, truncated_from = self.encode(text)
        return self.trace_ids(ids, spec, truncated_from, interventions=interventions)

    @staticmethod
    def _checked_run(spec: Any, interventions: Any, truncated_from: Any) -> tuple:
        from explorer.core.interventions.spec import Intervention

        arguments.instance(spec, CaptureSpec, "spec", "a CaptureSpec", none=True)
        ivs = arguments.sequence_of(interventions, Intervention, "interventions", "Intervention")
        arguments.whole(truncated_from, "truncated_from", 1, none=True)
        return ivs

    def trace_ids(self, ids: list[int], spec: CaptureSpec | None = None, truncated_from: int | None = None,
                  cancel: CancelLike = None, interventions: Sequence[Any] = (), chat: Any = None) -> Trace:
        """``cancel``: a callable asked at every layer boundary (see ``capture``); ``interventions``
        (explorer/core/interventions/) are applied to the run; ``chat``: the ids' ``ChatSpans``, kept with the trace."""
        ids = checked_ids(ids, self.config.vocab_size, self.config.n_ctx)
        interventions = self._checked_run(spec, interventions, truncated_from)
        trace, _ = capture(self.model, ids, self.tokenizer.displays(ids), spec, self.name, truncated_from, cancel,
                           interventions, host_logits=False)
        trace.meta.extra["weights"] = self.weights  # what the weights were stored in (meta.dtype: computed in)
        if chat is not None:  # the trace is not shared yet: its record of turns is set once, here
            trace.meta = replace(trace.meta, chat=chat.cut(len(ids)))
        return trace

    def encode_chat(self, messages: Any, add_generation_prompt: bool = True, **template_options: Any) -> Any:
        """A conversation (``[{"role", "content"}, ...]``) through the checkpoint's chat template: a
        ``ChatEncoding`` with ``ids`` (as transformers' ``apply_chat_template(..., tokenize=True)``), the
        rendered ``text`` and the ``spans`` (each token's turn, role and kind). ``template_options``: what the
        template reads (``enable_thinking=False``, ``reasoning_effort="low"``, ``date_string=...``)."""
        from explorer.core.chat.encode import encode_chat

        return encode_chat(self.tokenizer, self.chat_template, messages, add_generation_prompt, **template_options)

    def trace_chat(self, messages: Any, spec: CaptureSpec | None = None, interventions: Sequence[Any] = (),
                   add_generation_prompt: bool = True, **template_options: Any) -> Trace:
        """``encode_chat`` then ``trace_ids``: the trace knows each token's turn, role and kind (``trace.meta.chat``)."""
        encoded = self.encode_chat(messages, add_generation_prompt, **template_options)
        ids, n = list(encoded.ids), len(encoded.ids)
        cut = n if n <= self.config.n_ctx else None
        return self.trace_ids(ids[: self.config.n_ctx], spec, None if cut else n, interventions=interventions,
                              chat=encoded.spans)

    def close(self) -> None:
        """Let go of what the model keeps outside memory now: its offloaded blocks on disk (their subfolder of
        ``--offload-dir``, core/offload_dir.py). The model cannot run offloaded blocks after this."""
        from explorer.core.offload_dir import release_offload

        release_offload(self.model)

    def info(self) -> dict[str, Any]:
        cfg = self.config
        return {"name": self.name, "source": self.source, "architecture": self.arch, "description": cfg.describe(),
                "parameters": self.n_params, "vocabulary": f"{self.tokenizer.vocab_size} ({self.tokenizer.name})",
                "context_length": cfg.n_ctx, "device": str(self.device), "layers": self.placement,
                "dtype": str(self.dtype).replace("torch.", ""), "weights": self.weights, "stored": self.stored,
                **({"notes": " ".join(self.notes)} if self.notes else {})}

    @property
    def weights(self) -> str:
        """What the weights are stored in ('float32', or 'matrices kept as in the file: Q4_K (112) ...');
        ``dtype`` is what the numbers are computed in (core/quant/packed.py)."""
        from explorer.core.quant.packed import storage

        return storage(self.model)

    @property
    def stored(self) -> str:
        """The weights' storage in a word or two: 'float32', 'Q4_K', 'Q4_K+Q6_K', 'BF16'."""
        from explorer.core.quant.packed import storage_short

        return storage_short(self.model)
