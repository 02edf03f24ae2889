"""Tracing through nnsight: locally on a Hugging Face directory, or remotely on an NDIF server.

One forward pass saves the compact set in execution order (nnsight refuses saves out of order):
for each block its input (``resid_pre``) and the q, k, v entering the eager attention call, then
the final norm's input (``resid_final``) and the last position's logits, reduced on the server to
one row of V numbers. From these a model-less ``Trace`` is built, the kind File > Open trace
shows: patterns and scores are derived from q and k by this project's own functions and the
family's ModelConfig; what needs weights says so.

Locally (``remote=False``) it is a second, independent way to trace any model nnsight can load.
Remotely (``remote=True``) nnsight ships the traced block to the NDIF host named by the settings
or ``NDIF_HOST``/``NDIF_API_KEY``; the model is named by its Hugging Face id and never downloaded
(only its config.json, to know the shapes).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import attrgetter
from pathlib import Path
from typing import Any

import numpy as np

from explorer.core.errors import ExplorerError
from explorer.core.remote import require_nnsight
from explorer.core.remote.tables import FAMILIES, PINNED_TRANSFORMERS, Family, our_config
from explorer.core.trace import Trace, TraceMeta

DEFAULT_HOST = "https://api.ndif.us"


class RemoteTraceError(ExplorerError):
    """A remote trace was refused, timed out or failed on the server (one line)."""


@dataclass(frozen=True)
class RemoteSettings:
    """Where remote traces go: the NDIF host and the API key (settings first, then the environment)."""

    host: str = DEFAULT_HOST
    api_key: str = ""

    @classmethod
    def resolve(cls, host: str | None = None, api_key: str | None = None) -> RemoteSettings:
        host = host or os.environ.get("NDIF_HOST") or DEFAULT_HOST
        if not host.startswith(("http://", "https://")):
            raise ExplorerError(f"the NDIF host {host!r} must start with http:// or https://")
        return cls(host.rstrip("/"), api_key or os.environ.get("NDIF_API_KEY") or "")


def family_of(model_type: str) -> Family:
    if model_type not in FAMILIES:
        raise ExplorerError(f"the nnsight backend has no table for model_type {model_type!r}; it knows "
                            + ", ".join(sorted(FAMILIES)))
    return FAMILIES[model_type]


def _stand_in_tokenizer(vocab_size: int):
    """nnsight's pipeline wants a tokenizer; we give it token ids, so a word-level one over the ids does."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    vocab = {str(i): i for i in range(vocab_size)}
    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer(WordLevel(vocab, unk_token="0")), eos_token="0",
                                   pad_token="0")


def open_model(source: str | Path, hf: dict[str, Any], remote: bool = False) -> Any:
    """An nnsight model: the directory's weights in float32 (local), or a meta model named by a Hub id (remote).
    No code from the checkpoint runs (``trust_remote_code=False``); eager attention, so q, k, v are visible."""
    require_nnsight()
    import torch
    from nnsight import TransformersModel

    kwargs: dict[str, Any] = dict(task="text-generation", tokenizer=_stand_in_tokenizer(int(hf["vocab_size"])),
                                  attn_implementation="eager", trust_remote_code=False)
    if remote:
        return TransformersModel(str(source), dispatch=False, **kwargs)
    return TransformersModel(str(source), dispatch=True, dtype=torch.float32, **kwargs)


def _saves(lm: Any, ids: Any, family: Family, n_layers: int, first: int = 0, last: int | None = None,
           moe_layers: tuple[int, ...] = (), **trace_kwargs: Any) -> list[Any]:
    """One forward pass; the compact set of blocks ``first`` .. ``last - 1`` in execution order (with gpt-oss's
    sinks, and each MoE layer's routing), and after the last block resid_final and the logits; a pass that ends
    before the last block stops there (the server runs no further). The body of the ``with`` block is what
    nnsight ships to a server: it refers only to builtins, ``attrgetter`` and nnsight."""
    import nnsight

    last = n_layers if last is None else last
    with lm.trace(ids, **trace_kwargs) as tracer:
        saved = nnsight.save([])
        blocks = attrgetter(family.layers)(lm)
        for layer in range(first, last):
            block = blocks[layer]
            saved.append(block.input[0])                                       # resid_pre [n, d]
            inputs = getattr(getattr(block, family.attention).source, family.attention_op).inputs
            call = inputs[0]
            saved.append(call[1][0])                                           # q [H, n, dh] (after rotary)
            saved.append(call[2][0])                                           # k [Hkv, n, dh]
            saved.append(call[3][0])                                           # v [Hkv, n, dh]
            if family.sinks:
                saved.append(inputs[1]["s_aux"])                               # each head's sink logit [H]
            if layer in moe_layers:
                routed = attrgetter(family.router)(block).output
                saved.extend([routed[0], routed[1], routed[2]])                # logits [n, E], weights, experts [n, k]
        if last < n_layers:
            tracer.stop()
        saved.append(attrgetter(family.final_norm)(lm).input[0])                # resid_final [n, d]
        saved.append(lm.output.logits[0, -1])                                  # last position's logits [V]
    return list(saved)


def stream_compact(lm: Any, model_type: str, cfg: Any, ids: Sequence[int], layers_per_request: int = 4,
                   backend_for: Callable[[], Any] | None = None, remote: bool = False,
                   settings: RemoteSettings | None = None) -> Any:
    """The compact set a few layers at a time, one request each, so the first panels can draw while later
    layers arrive: yields ``(first, last, arrays)`` (``arrays`` under Trace keys; the last request adds
    resid_final and last_logits). ``backend_for()`` makes each request's backend (the tests' stand-in)."""
    import torch

    family = family_of(model_type)
    L, step, moe = cfg.n_layers, max(1, int(layers_per_request)), tuple(cfg.moe_layers)
    batch = torch.tensor([list(ids)], dtype=torch.long)
    for first in range(0, L, step):
        last = min(L, first + step)
        kwargs: dict[str, Any] = {}
        if backend_for is not None:
            kwargs["backend"] = backend_for()
        elif remote:
            kwargs["backend"] = remote_backend(lm, settings or RemoteSettings.resolve())
        try:
            with torch.inference_mode():
                values = _saves(lm, batch, family, L, first, last, moe, **kwargs)
        except ExplorerError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise _one_line(exc, model_type) from exc
        keys = [k for k in saved_keys(L, family, moe) if k.startswith(tuple(f"blocks.{i}." for i in range(first, last)))]
        keys += ["resid_final", "last_logits"] if last == L else []
        yield first, last, {key: _array(key, v) for key, v in zip(keys, values)}


def _array(key: str, value: Any) -> np.ndarray:
    """A saved value as a numpy array: float32, the chosen experts as integers."""
    import torch

    t = torch.as_tensor(value).detach().cpu()
    return np.ascontiguousarray(t.long().numpy() if key.endswith("moe.experts") else t.float().numpy())


def _details(lm: Any, ids: Any, family: Family, layer: int, position: int, k: int, **trace_kwargs: Any) -> list[Any]:
    """What a panel asks for at one layer and position, reduced on the server: the lens's top k at block
    ``layer``'s input, the FFN's neurons there, and the model's top k. Saved in execution order."""
    import nnsight

    with lm.trace(ids, **trace_kwargs):
        saved = nnsight.save([])
        block = attrgetter(family.layers)(lm)[layer]
        stream = block.input[0, position]                                      # resid_pre at the position [d]
        lens = attrgetter(family.unembed)(lm)(attrgetter(family.final_norm)(lm)(stream))  # [V]
        saved.extend(lens.topk(k))                                             # values, ids
        if family.mlp_out is not None:                                         # (experts: no single FFN)
            saved.append(attrgetter(family.mlp_out)(block).input[0, position])  # mlp.post [d_ff]
        saved.extend(lm.output.logits[0, position].topk(k))                   # values, ids
    return list(saved)


def fetch_details(lm: Any, model_type: str, cfg: Any, ids: Sequence[int], layer: int, position: int, k: int = 10,
                  backend: Any = None, remote: bool = False, settings: RemoteSettings | None = None) -> dict:
    """On demand, for the selected layer and position: ``lens_ids``/``lens_logits`` (top k of the logit lens at
    block ``layer``'s input), ``mlp.post`` there (not for mixtures of experts: ``Family.unavailable``), and
    ``top_ids``/``top_logits`` of the model's output."""
    import torch

    from explorer.core.model import output_logits

    family = family_of(model_type)
    if not (0 <= layer < cfg.n_layers and -len(ids) <= position < len(ids)):
        raise ExplorerError(f"layer {layer} or position {position} is outside this trace")
    kwargs: dict[str, Any] = {"backend": backend} if backend is not None else {}
    if remote and backend is None:
        kwargs["backend"] = remote_backend(lm, settings or RemoteSettings.resolve())
    try:
        with torch.inference_mode():
            values = _details(lm, torch.tensor([list(ids)], dtype=torch.long), family, layer, position, k, **kwargs)
    except ExplorerError:
        raise
    except Exception as exc:  # noqa: BLE001
        raise _one_line(exc, model_type) from exc
    values = [torch.as_tensor(v).detach().float().cpu() for v in values]
    lens_values, lens_ids, top_values, top_ids = values[0], values[1], values[-2], values[-1]
    out = {"lens_ids": lens_ids.long().numpy(), "lens_logits": output_logits(cfg, lens_values).numpy(),
           "top_ids": top_ids.long().numpy(), "top_logits": top_values.numpy()}
    if family.mlp_out is not None:
        out["mlp.post"] = values[2].numpy()
    return out


def saved_keys(n_layers: int, family: Family | None = None, moe_layers: tuple[int, ...] = ()) -> list[str]:
    """The Trace keys of ``_saves``' values, in execution order."""
    keys = []
    for layer in range(n_layers):
        keys += [f"blocks.{layer}.{site}" for site in ("resid_pre", "attn.q", "attn.k", "attn.v")]
        if family is not None and family.sinks:
            keys.append(f"blocks.{layer}.attn.sinks")
        if layer in moe_layers:
            keys += [f"blocks.{layer}.moe.{site}" for site in ("router_logits", "weights", "experts")]
    return keys + ["resid_final", "last_logits"]


def compact_nbytes(cfg: Any, n: int, bytes_per_value: int = 2) -> int:
    """What a compact trace of n tokens transfers (bf16 on a server: 2 bytes a value)."""
    per_layer = n * cfg.d_model + (cfg.n_heads + 2 * cfg.kv_heads) * n * cfg.d_head
    return (cfg.n_layers * per_layer + n * cfg.d_model + cfg.vocab_size) * bytes_per_value


def human_bytes(n: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def trace_nnsight(lm: Any, model_type: str, cfg: Any, ids: Sequence[int], tokens: Sequence[str], name: str = "",
                  remote: bool | str = False, settings: RemoteSettings | None = None, backend: Any = None,
                  progress: Callable[[str], None] | None = None) -> Trace:
    """Trace ``ids`` through ``lm`` and build the model-less Trace of the compact set.

    ``remote=True`` sends it to ``settings``' NDIF host (``backend``, if given, replaces nnsight's remote
    backend: the tests' stand-in for the network); a refusal, a timeout or a server error is a
    ``RemoteTraceError`` with one line."""
    import torch

    family = family_of(model_type)
    kwargs: dict[str, Any] = {}
    if backend is not None:
        kwargs["backend"] = backend
    elif remote:
        kwargs["backend"] = remote_backend(lm, settings or RemoteSettings.resolve())
    if progress is not None and (remote or backend is not None):
        progress(f"sending a trace of {len(ids)} tokens; about {human_bytes(compact_nbytes(cfg, len(ids)))} "
                 "will come back")
    t0 = time.perf_counter()
    try:
        with torch.inference_mode():
            values = _saves(lm, torch.tensor([list(ids)], dtype=torch.long), family, cfg.n_layers,
                            moe_layers=tuple(cfg.moe_layers), **kwargs)
    except ExplorerError:
        raise
    except Exception as exc:  # noqa: BLE001 - nnsight's and the server's failures become one line
        raise _one_line(exc, model_type) from exc
    seconds = time.perf_counter() - t0
    keys = saved_keys(cfg.n_layers, family, tuple(cfg.moe_layers))
    if len(values) != len(keys):
        raise RemoteTraceError(f"the trace brought back {len(values)} values, {len(keys)} were asked for")
    arrays = {key: _array(key, v) for key, v in zip(keys, values)}
    where = "remote" if (remote or backend is not None) else "nnsight"
    return compact_trace(arrays, cfg, ids, tokens, name, where, seconds, family.unavailable)


def remote_backend(lm: Any, settings: RemoteSettings) -> Any:
    """nnsight's own RemoteBackend for ``lm`` at ``settings``' host, with its key."""
    from nnsight.intervention.backends.remote import RemoteBackend

    return RemoteBackend(lm.to_model_key(), host=settings.host, api_key=settings.api_key,
                         env=lm._remoteable_get_env())


def _one_line(exc: Exception, model_type: str) -> RemoteTraceError:
    text = " ".join(str(exc).split()) or type(exc).__name__
    kind = type(exc).__name__
    if kind == "RemoteError":
        return RemoteTraceError(f"the NDIF server refused or failed the trace: {text[:300]}")
    if "timed out" in text.lower() or "timeout" in kind.lower():
        return RemoteTraceError(f"the NDIF server did not answer in time: {text[:300]}")
    if kind in ("ConnectError", "ConnectionError", "HTTPError", "InvalidURI") or "connect" in text.lower():
        return RemoteTraceError(f"cannot reach the NDIF server: {text[:300]}")
    import transformers

    return RemoteTraceError(f"the nnsight trace failed ({kind}: {text[:300]}); the {model_type} table is pinned to "
                            f"transformers {PINNED_TRANSFORMERS}, this is {transformers.__version__}")


def trace_directory(directory: str | Path, prompt: str | None = None, ids: Sequence[int] | None = None,
                    progress: Callable[[str], None] | None = None) -> Trace:
    """``export --backend nnsight``: a local Hugging Face directory traced through nnsight, tokenised
    by the same tokenizer the default backend uses."""
    from explorer.core.checkpoint import MAX_CONFIG_BYTES, validate
    from explorer.core.checkpoint.safe_io import read_json

    require_nnsight()
    directory = Path(directory).expanduser()
    if directory.is_file():
        directory = directory.parent
    hf = read_json(directory / "config.json", MAX_CONFIG_BYTES)
    model_type = str(hf.get("model_type"))
    family_of(model_type)
    with validate.loading(str(directory), "cpu"):  # the same fit check as the default backend
        cfg = our_config(model_type, hf)
    tokenizer = directory_tokenizer(directory, model_type, cfg, hf)
    if ids is None:
        if not prompt:
            raise ExplorerError("the prompt is empty: type some text to analyse")
        ids = tokenizer.encode(prompt)[: cfg.n_ctx]
    lm = open_model(directory, hf)
    return trace_nnsight(lm, model_type, cfg, list(ids), tokenizer.displays(list(ids)), directory.name,
                         progress=progress)


def directory_tokenizer(directory: Path, model_type: str, cfg: Any, hf: dict[str, Any]) -> Any:
    """The tokenizer the default backend uses for this directory (the ids then agree)."""
    if model_type == "gpt2":
        from explorer.core.checkpoint.gpt2 import hf_tokenizer

        return hf_tokenizer(directory, cfg.vocab_size)
    from explorer.core.tokenize.huggingface import tokenizer_for_checkpoint

    return tokenizer_for_checkpoint(directory, cfg.vocab_size, hf.get("eos_token_id"))[0]


def compact_trace(arrays: dict[str, np.ndarray], cfg: Any, ids: Sequence[int], tokens: Sequence[str], name: str,
                  where: str, seconds: float, unavailable: str = "") -> Trace:
    """The model-less Trace of the compact set (``arrays`` under Trace keys, with ``last_logits``); a mixture of
    experts' scores over every expert (``moe.probs``) from its router logits by the family's rule."""
    import torch

    from explorer.core.moe import router_scores

    arrays = dict(arrays)
    last_logits = arrays.pop("last_logits")
    for layer in cfg.moe_layers:
        logits = arrays.get(f"blocks.{layer}.moe.router_logits")
        if logits is not None and not cfg.moe_choice_bias:  # (a choice bias is a weight the trace does not have)
            arrays[f"blocks.{layer}.moe.probs"] = router_scores(cfg, torch.from_numpy(logits))[0].numpy()
    for a in arrays.values():
        a.flags.writeable = False
    extra = {"backend": where, "last_logits": last_logits}
    if unavailable:
        extra["not_available"] = unavailable
    meta = TraceMeta(model_name=name, device=where, dtype="float32", forward_seconds=seconds, extra=extra)
    return Trace(list(ids), list(tokens), cfg, arrays, meta, model=None)


def compact_arrays(trace: Trace) -> dict[str, np.ndarray]:
    """What ``export --backend nnsight`` writes to trace.npz, under Trace keys: every layer's resid_pre,
    q, k, v and pattern (derived), a mixture of experts' routing, resid_final, token ids and strings, the last
    position's logits."""
    out: dict[str, np.ndarray] = {"token_ids": trace.token_ids.astype(np.int64),
                                  "tokens": np.array(trace.tokens, dtype=str)}
    for layer in range(trace.config.n_layers):
        for site in ("resid_pre", "attn.q", "attn.k", "attn.v", "attn.pattern"):
            out[f"blocks.{layer}.{site}"] = np.asarray(trace[f"blocks.{layer}.{site}"], np.float32)
        if layer in trace.config.moe_layers:  # a mixture of experts' routing, where the trace has it
            for site in ("router_logits", "probs", "weights", "experts"):
                if f"blocks.{layer}.moe.{site}" in trace.stored_keys():
                    out[f"blocks.{layer}.moe.{site}"] = np.asarray(trace[f"blocks.{layer}.moe.{site}"])
    out["resid_final"] = np.asarray(trace["resid_final"], np.float32)
    out["last_logits"] = np.asarray(trace.meta.extra["last_logits"], np.float32)
    return out
