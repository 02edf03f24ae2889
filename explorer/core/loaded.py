"""``LoadedModel``: a model ready to run, with its tokenizer and where it came from.

Every checkpoint loader returns one; the UI, the CLI and a notebook user hold one. It encodes
text (cut to the context), traces text or ids into a :class:`~explorer.core.trace.Trace`, and
describes itself for ``transformer-explorer info`` and the window's title.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
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
        return self.model.num_parameters()

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
                  cancel: CancelLike = None, interventions: Sequence[Any] = ()) -> Trace:
        """``cancel``: a callable asked at every layer boundary (see ``capture``); ``interventions``
        (explorer/core/interventions/) are applied to the run."""
        ids = checked_ids(ids, self.config.vocab_size, self.config.n_ctx)
        interventions = self._checked_run(spec, interventions, truncated_from)
        trace, _ = capture(self.model, ids, self.tokenizer.displays(ids), spec, self.name, truncated_from, cancel,
                           interventions, host_logits=False)
        return trace

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
                "dtype": str(self.dtype).replace("torch.", ""), **({"notes": " ".join(self.notes)} if self.notes else {})}
