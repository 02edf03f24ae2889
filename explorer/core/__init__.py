"""Transformer Explorer's engine, without Qt: what a notebook user imports.

>>> from explorer.core import load_checkpoint, SamplingParams, generate
>>> model = load_checkpoint("shakespeare")            # a built-in name or a checkpoint path
>>> trace = model.trace("To be, or not to be")        # every activation of one forward pass
>>> trace["blocks.0.attn.pattern"].shape              # [heads, tokens, tokens], numpy
>>> generate(model, "To be", SamplingParams(temperature=0, max_new_tokens=5)).text

Names are imported lazily, so ``import explorer.core.config`` does not pull in the rest.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# public name -> the module that defines it
_EXPORTS = {
    "load_checkpoint": "explorer.core.checkpoint",
    "builtin_names": "explorer.core.checkpoint",
    "save_native": "explorer.core.checkpoint.native",
    "LoadedModel": "explorer.core.loaded",
    "from_transformers": "explorer.core.checkpoint.in_memory",
    "write_trace_safetensors": "explorer.core.interop",
    "read_trace_safetensors": "explorer.core.interop",
    "ModelConfig": "explorer.core.config",
    "Placement": "explorer.core.placement",
    "Transformer": "explorer.core.model",
    "Trace": "explorer.core.trace",
    "CaptureSpec": "explorer.core.trace",
    "SamplingParams": "explorer.core.generation.sampling",
    "generate": "explorer.core.generation.generate",
    "generate_steps": "explorer.core.generation.generate",
    "Step": "explorer.core.generation.generate",
    "GenerationResult": "explorer.core.generation.generate",
    "Intervention": "explorer.core.interventions.spec",
    "activation_patching": "explorer.core.interventions.patching",
    "attribution_patching": "explorer.core.interventions.attribution",
    "direct_logit_attribution": "explorer.core.analysis.dla",
    "qk_split": "explorer.core.analysis.qk",
    "ov_split": "explorer.core.analysis.ov",
    "ov_circuit": "explorer.core.analysis.ov",
    "what_it_moves": "explorer.core.analysis.ov",
    "SplitError": "explorer.core.analysis.stream_parts",
    "open_sae": "explorer.core.features.sae",
    "feature_intervention": "explorer.core.features.edits",
    "steer": "explorer.core.features.steering",
    "run_corpus": "explorer.core.corpus.run",
    "merge_runs": "explorer.core.corpus.merge",
    "open_run": "explorer.core.corpus.read",
    "CorpusRun": "explorer.core.corpus.read",
    "ExplorerError": "explorer.core.errors",
    "CheckpointError": "explorer.core.errors",
    "TokenizerError": "explorer.core.errors",
    "PromptError": "explorer.core.errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'explorer.core' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:  # for type checkers and IDEs: the same names, eagerly
    from explorer.core.checkpoint import builtin_names, load_checkpoint
    from explorer.core.checkpoint.in_memory import from_transformers
    from explorer.core.interop import read_trace_safetensors, write_trace_safetensors
    from explorer.core.checkpoint.native import save_native
    from explorer.core.config import ModelConfig
    from explorer.core.corpus.merge import merge_runs
    from explorer.core.corpus.read import CorpusRun, open_run
    from explorer.core.corpus.run import run_corpus
    from explorer.core.errors import CheckpointError, ExplorerError, PromptError, TokenizerError
    from explorer.core.generation.generate import GenerationResult, Step, generate, generate_steps
    from explorer.core.generation.sampling import SamplingParams
    from explorer.core.analysis.dla import direct_logit_attribution
    from explorer.core.analysis.ov import ov_circuit, ov_split, what_it_moves
    from explorer.core.analysis.qk import qk_split
    from explorer.core.analysis.stream_parts import SplitError
    from explorer.core.features.edits import feature_intervention
    from explorer.core.features.sae import open_sae
    from explorer.core.features.steering import steer
    from explorer.core.interventions.attribution import attribution_patching
    from explorer.core.interventions.patching import activation_patching
    from explorer.core.interventions.spec import Intervention
    from explorer.core.loaded import LoadedModel
    from explorer.core.model import Transformer
    from explorer.core.placement import Placement
    from explorer.core.trace import CaptureSpec, Trace
