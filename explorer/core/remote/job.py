"""A remote trace as the window runs it: first a plan that says what it will transfer, then the compact set
a few layers at a time (``stream_compact``), then the model-less Trace File > Open trace shows.

``plan_job`` reads the model's config.json and tokenizer (a local Hugging Face directory; for a remote
trace of a Hub id, those small files are fetched from the Hub into its cache, the weights never are),
tokenises the prompt and sizes the transfer (``compact_nbytes``). ``run_job`` is a generator: it yields
``(layers arrived, layers)`` after each request and returns the Trace. Every failure is one line.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from explorer.core.errors import ExplorerError
from explorer.core.remote import require_nnsight
from explorer.core.remote.backend import (RemoteSettings, RemoteTraceError, compact_nbytes, compact_trace,
                                          directory_tokenizer, family_of, human_bytes, open_model, stream_compact)
from explorer.core.remote.tables import our_config

# the small files of a Hub repository a remote trace reads (never the weights)
HUB_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
             "vocab.json", "merges.txt")


@dataclass(frozen=True)
class RemoteJob:
    """One trace to run: where (``source``: a Hub id or a local directory; ``remote``: on the NDIF server),
    the model's shapes and the prompt's tokens."""

    source: str
    remote: bool
    directory: Path  # where config.json and the tokenizer were read
    model_type: str
    hf: dict[str, Any]
    cfg: Any
    ids: tuple[int, ...]
    tokens: tuple[str, ...]
    settings: RemoteSettings | None = None

    @property
    def nbytes(self) -> int:
        """What comes back: bfloat16 from a server, float32 from this machine."""
        return compact_nbytes(self.cfg, len(self.ids), 2 if self.remote else 4)

    def summary(self) -> str:
        where = f"the NDIF server {self.settings.host}" if self.remote and self.settings else "this machine (nnsight)"
        return (f"{len(self.ids)} tokens through {self.cfg.n_layers} layers of {self.source} on {where}: about "
                f"{human_bytes(self.nbytes)} will come back (the residual stream, q, k and v of every layer, "
                f"then the final residual and the last position's logits)")


def hub_files(repo_id: str) -> Path:
    """The config.json and tokenizer files of a Hub repository, in the Hugging Face cache (fetched if absent)."""
    try:
        from huggingface_hub import hf_hub_download
        from huggingface_hub.errors import EntryNotFoundError
    except ImportError:
        raise ExplorerError("reading a Hub model's config needs huggingface_hub: pip install huggingface_hub") from None
    folder = None
    for name in HUB_FILES:
        try:
            folder = Path(hf_hub_download(repo_id, name)).parent
        except EntryNotFoundError:
            if name == "config.json":
                raise ExplorerError(f"{repo_id} has no config.json on the Hub") from None
        except Exception as exc:  # noqa: BLE001 - offline, gated, no such repository: one line
            if name == "config.json":
                text = " ".join(str(exc).split())[:200]
                raise ExplorerError(f"cannot read {repo_id}'s config.json from the Hub ({type(exc).__name__}: "
                                    f"{text})") from None
    return folder


def plan_job(source: str, prompt: str, remote: bool, settings: RemoteSettings | None = None) -> RemoteJob:
    """What a trace of ``prompt`` through ``source`` will do and transfer; nothing runs yet."""
    from explorer.core.checkpoint import MAX_CONFIG_BYTES, validate
    from explorer.core.checkpoint.safe_io import read_json

    require_nnsight()
    source = source.strip()
    if not source:
        raise ExplorerError("name a model: a Hugging Face id such as meta-llama/Llama-3.1-70B, or a local folder")
    if not prompt.strip():
        raise ExplorerError("the prompt is empty: type some text to analyse")
    path = Path(source).expanduser()
    if path.is_dir():
        directory = path
    elif remote:
        directory = hub_files(source)
    else:
        raise ExplorerError(f"{source} is not a folder here: a trace on this machine needs a Hugging Face folder "
                            "(tick 'on the NDIF server' to trace a Hub id remotely)")
    hf = read_json(directory / "config.json", MAX_CONFIG_BYTES)
    model_type = str(hf.get("model_type"))
    family_of(model_type)
    if remote:
        cfg = our_config(model_type, hf)
    else:
        with validate.loading(str(directory), "cpu"):  # it runs here: the same fit check as loading it
            cfg = our_config(model_type, hf)
    tokenizer = directory_tokenizer(directory, model_type, cfg, hf)
    ids = tokenizer.encode(prompt)[: cfg.n_ctx]
    if not ids:
        raise ExplorerError("the prompt has no tokens")
    return RemoteJob(source, remote, directory, model_type, hf, cfg, tuple(ids), tuple(tokenizer.displays(list(ids))),
                     (settings or RemoteSettings.resolve()) if remote else None)


def run_job(job: RemoteJob, layers_per_request: int = 4, backend_for: Callable[[Any], Any] | None = None,
            cancelled: Callable[[], bool] | None = None) -> Iterator[tuple[int, int]]:
    """The compact set, ``layers_per_request`` layers a request: yields (layers arrived, layers) after each,
    returns the model-less Trace. ``backend_for(lm)`` makes each request's backend for the nnsight model ``lm``
    (the tests' stand-in for the network)."""
    if job.remote and job.settings is not None and not job.settings.api_key and backend_for is None:
        raise RemoteTraceError("no NDIF API key: enter it in the dialog or set NDIF_API_KEY")
    lm = open_model(job.source if job.remote else job.directory, job.hf, remote=job.remote)
    arrays: dict[str, Any] = {}
    t0 = time.perf_counter()
    for _first, last, got in stream_compact(lm, job.model_type, job.cfg, job.ids, layers_per_request,
                                            backend_for=backend_for and (lambda: backend_for(lm)),
                                            remote=job.remote, settings=job.settings):
        arrays.update(got)
        yield last, job.cfg.n_layers
        if cancelled is not None and cancelled():
            raise RemoteTraceError("the remote trace was stopped")
    where = "remote" if job.remote or backend_for is not None else "nnsight"
    name = Path(job.source).name if not job.remote else job.source
    return compact_trace(arrays, job.cfg, job.ids, job.tokens, name, where, time.perf_counter() - t0,
                         family_of(job.model_type).unavailable)
