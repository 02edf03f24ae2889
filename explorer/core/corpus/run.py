"""A corpus run: the model reads a corpus in windows and batches, and every unit's evidence goes to a database.

``run_corpus(loaded, corpus, out)`` runs batch after batch on the device the model runs on. A probe
(the forward pass's recorder protocol, explorer/core/model.py) receives only what the sources and the
head statistics need (``mlp.post``, an SAE's hook point, each layer's pattern) and folds it into the
accumulators where it is computed (explorer/core/corpus/accumulate.py); nothing else is stored, and
the pass stops after the last layer anything needs (no logits). After each batch everything that
changed is committed in one transaction (state.py), so ``run_corpus`` on the same ``out`` resumes
where a stopped or crashed run left off. ``progress`` receives a ``Progress`` after each batch;
``cancel`` (explorer/core/cancel.py) is asked before each block: a cancelled run keeps every batch
it committed.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from explorer.core.analysis.head_sums import NAMES
from explorer.core.cancel import CancelLike, Cancelled, asker, checker
from explorer.core.corpus import store
from explorer.core.corpus.accumulate import BIN_EDGES
from explorer.core.corpus.reading import Corpus, CorpusError
from explorer.core.corpus.state import RunState, Writer, load_progress, save_progress
from explorer.core.corpus.units import UnitSource, unit_sources
from explorer.core.corpus.windows import Batch, Resume, batches
from explorer.core.text import shown

DEFAULT_K = 20
DEFAULT_WINDOW = 256


@dataclass(frozen=True)
class Progress:
    tokens: int                    # tokens the model has read in this run, resumed batches included
    target: int | None             # how many it will read in all, when known (or estimated from the bytes read)
    tokens_per_second: float       # in this session
    seconds_left: float | None
    batches: int
    estimated: bool = False        # the target is an estimate (no --tokens: the corpus's size in tokens is not known)

    def line(self) -> str:
        rate = f"{self.tokens_per_second:,.0f} tokens/s"
        left = "" if self.seconds_left is None else f", about {_duration(self.seconds_left)} left"
        of = f" of {'about ' if self.estimated else ''}{self.target:,}" if self.target else ""
        return f"{self.tokens:,}{of} tokens, {rate}{left}"


@dataclass(frozen=True)
class RunSummary:
    path: Path
    tokens: int
    windows: int
    complete: bool       # the corpus (or the asked-for tokens) is done
    cancelled: bool
    seconds: float


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


_WORDS = {"model_fingerprint": "model weights", "corpus_fingerprint": "corpus content", "sae_fingerprint": "SAE weights",
          "window": "--window", "k": "--top", "sources": "set of units (--units, --sae)", "heads": "--no-heads"}


class _Enough(Exception):
    """Raised by the probe once the last layer anything needs has run: the rest of the pass is not needed."""


class Probe:
    """The recorder of a corpus batch: hands each needed site to its source's accumulators, stores nothing."""

    def __init__(self, sources: list[UnitSource], state: RunState, n_layers: int, cancel: CancelLike) -> None:
        self.state = state
        self.wanted: dict[tuple[str, int | None], list[UnitSource]] = {}
        for source in sources:
            for site in source.sites():
                self.wanted.setdefault(site, []).append(source)
        layers = [n_layers if layer is None else layer for _, layer in self.wanted]
        if state.heads is not None:
            layers.append(n_layers - 1)
        self.last = max(layers, default=-1)
        self.g: torch.Tensor | None = None
        self._check = checker(cancel)

    def records(self, site: str, layer: int | None) -> bool:
        return site == "attn.pattern" and self.state.heads is not None

    def __call__(self, site: str, layer: int | None, tensor: torch.Tensor) -> torch.Tensor:
        if site == "resid_pre":
            self._check()
            if layer > self.last:
                raise _Enough
        elif site == "attn.pattern" and self.state.heads is not None:
            self.state.heads.add(layer, tensor)
        for source in self.wanted.get((site, layer), ()):
            for group_layer, acts in source.activations(site, layer, tensor):
                B, n, units = acts.shape
                stats = self.state.unit(source.name, group_layer, acts.device)
                stats.add(acts.reshape(B * n, units), self.g.to(acts.device))  # a no-op but on a placed model
        if site == "resid_final":
            raise _Enough
        return tensor


def fingerprint_model(model: Any) -> str:
    """sha256 over the configuration and every parameter's name, shape, dtype and a strided sample of its
    values (a fingerprint, not a hash of every byte: cheap on a large model)."""
    h = hashlib.sha256(json.dumps(model.cfg.__dict__, sort_keys=True, default=str).encode())
    with torch.no_grad():
        for name, p in model.named_parameters():
            h.update(f"{name}{tuple(p.shape)}{p.dtype}".encode())
            if p.device.type != "meta" and p.numel():
                flat = p.detach().reshape(-1)
                h.update(flat[:: max(1, flat.numel() // 4096)].float().cpu().numpy().tobytes())
    return h.hexdigest()


def fingerprint_sae(sae: Any) -> str:
    h = hashlib.sha256(sae.hook.hook_name.encode())
    for name in sorted(sae.weights):
        t = sae.weights[name].reshape(-1)
        h.update(name.encode() + t[:: max(1, t.numel() // 4096)].numpy().tobytes())
    return h.hexdigest()


def default_batch(cfg: Any, window: int, device: torch.device) -> int:
    """Windows per batch: about 4k tokens on the CPU; on an accelerator about 32k, with one layer's patterns of a
    batch within 1/32 of its memory (2.5 GB on an 80 GB GPU: a commit per batch is then a small share of the time)."""
    from explorer.core.budget import device_memory

    if device.type == "cpu":
        tokens, room = 4096, 512 << 20
    else:
        tokens, room = 32768, max(256 << 20, device_memory(device) // 32)
    patterns = max(1, room // max(1, 4 * cfg.n_heads * window * window))
    return max(1, min(tokens // window, patterns))


def default_name(model_name: str, corpus: Corpus, sae: Any = None) -> str:
    parts = [model_name, corpus.name] + ([sae.path.name] if sae is not None else [])
    return "__".join("".join(c if c.isalnum() or c in "-_." else "-" for c in p) for p in parts) + ".corpus.db"


def run_corpus(loaded: Any, corpus: Corpus | str | Path, out: str | Path, sae: Any = None, tokens: int | None = None,
               skip: int = 0, window: int | None = None, batch: int | None = None, k: int = DEFAULT_K,
               heads: bool = True, units: set[str] | None = None, progress: Callable[[Progress], None] | None = None,
               cancel: CancelLike = None, timeout: float = store.BUSY_SECONDS) -> RunSummary:
    """Run ``loaded`` (a LoadedModel) over ``corpus`` into the database ``out`` (a new file, or a run of the same
    model, corpus, SAE and settings to resume; a folder gets ``default_name``). ``tokens``: how many to read
    (default all); ``skip``: tokens to leave out first (a whole number of windows: the second half of a run to
    merge); ``units``: the sources to keep (default every one the model and SAE offer)."""
    corpus = corpus if isinstance(corpus, Corpus) else Corpus(corpus)
    cfg, model = loaded.config, loaded.model
    window = int(window or min(cfg.n_ctx, DEFAULT_WINDOW))
    if not 2 <= window <= cfg.n_ctx:
        raise CorpusError(f"the window must be 2 to {cfg.n_ctx} tokens (this model's context), not {window}")
    if k < 1 or skip < 0 or (tokens is not None and tokens < 1):
        raise CorpusError("k and --tokens must be at least 1, --skip at least 0")
    if skip % window:
        raise CorpusError(f"--skip must be a whole number of windows of {window} tokens (got {skip:,})")
    device = loaded.device
    batch = int(batch or default_batch(cfg, window, device))
    sources = unit_sources(cfg, sae, units)
    out = Path(out)
    if out.is_dir():
        out = out / default_name(loaded.name, corpus, sae)
    meta = {"format": store.FORMAT, "model": loaded.name, "model_fingerprint": fingerprint_model(model),
            "corpus": corpus.name, "corpus_fingerprint": corpus.fingerprint(),
            "sae": None if sae is None else sae.name, "sae_fingerprint": None if sae is None else fingerprint_sae(sae),
            "window": window, "k": k, "vocab_size": cfg.vocab_size, "causal": bool(cfg.causal),
            "sources": [s.describe() for s in sources], "statistics": list(NAMES),
            "heads": [cfg.n_layers, cfg.n_heads] if heads else None, "bins": [float(e) for e in BIN_EDGES]}
    con = store.connect(out, timeout=timeout)
    try:
        with torch.inference_mode():  # the accumulators are made and updated in it, batch after batch
            return _run(con, out, meta, skip, loaded, corpus, sources, tokens, batch, progress, cancel)
    except sqlite3.Error as exc:
        raise store.database_error(exc, out) from None
    finally:
        con.close()


def _run(con: sqlite3.Connection, out: Path, meta: dict[str, Any], skip: int, loaded: Any, corpus: Corpus,
         sources: list[UnitSource], tokens: int | None, batch: int, progress: Callable | None,
         cancel: CancelLike) -> RunSummary:
    cfg, model = loaded.config, loaded.model
    old = store.read_meta(con)
    if old.get("merged_from"):
        raise CorpusError(f"{shown(str(out), 200)} is a merge of runs: it cannot be resumed; run into another --out")
    if old:
        differ = [_WORDS.get(key, key) for key in meta if old.get(key) != meta[key]]
        differ += ["--skip"] if old.get("skip") != skip else []
        if differ:
            raise CorpusError(f"{shown(str(out), 200)} holds a run with another {', '.join(differ)}: "
                              "give another --out to start a new run")
    else:
        con.execute("BEGIN IMMEDIATE")
        store.write_meta(con, {**meta, "skip": skip})
        store.write_vocab(con, loaded.tokenizer, cfg.vocab_size)
        con.execute("COMMIT")
    done = load_progress(con) or {"tokens": 0, "windows": 0, "batches": 0, "seconds": 0.0, "resume": None,
                                  "done": False}
    if tokens is not None and done["tokens"] >= tokens or tokens is None and done["done"]:
        return RunSummary(out, done["tokens"], done["windows"], True, False, done["seconds"])
    state = RunState([g for s in sources for g in s.groups()], meta["k"],
                     (cfg.n_layers, cfg.n_heads) if meta["heads"] else None, cfg.causal, con if old else None)
    probe = Probe(sources, state, cfg.n_layers, cancel)
    stop = asker(cancel)
    dtype = store.token_dtype(cfg.vocab_size)
    start = done["resume"] or Resume(tokens=0, window=0)
    t0, base, session = time.perf_counter(), done["seconds"], 0
    writer = Writer(con)  # a batch's commit overlaps the next batch's forward pass
    try:
        for b in batches(corpus, loaded.tokenizer, meta["window"], batch, start, skip, tokens):
            if stop():
                writer.wait()
                return RunSummary(out, done["tokens"], done["windows"], False, True, done["seconds"])
            try:
                _forward(model, b, probe, state, loaded.device)
            except Cancelled:
                writer.wait()
                return RunSummary(out, done["tokens"], done["windows"], False, True, done["seconds"])
            elapsed = time.perf_counter() - t0
            session += b.tokens
            done = {"tokens": done["tokens"] + b.tokens, "windows": done["windows"] + b.ids.shape[0],
                    "batches": done["batches"] + 1, "seconds": base + elapsed, "resume": b.resume, "done": False}
            writer.submit(state.snapshot(b, dtype, done))
            if progress is not None:
                progress(_progress(done, session, elapsed, tokens, b.fraction))
    finally:
        writer.wait()
    # the corpus is read to its end unless the asked-for tokens stopped it (a later run may ask for more)
    done = {**done, "resume": done["resume"] or start, "done": tokens is None or done["tokens"] < tokens}
    con.execute("BEGIN IMMEDIATE")
    save_progress(con, done)
    con.execute("COMMIT")
    return RunSummary(out, done["tokens"], done["windows"], True, False, done["seconds"])


def _forward(model: Any, b: Batch, probe: Probe, state: RunState, device: torch.device) -> None:
    ids = torch.as_tensor(b.ids, device=device)
    g = b.global_ids()
    probe.g = torch.as_tensor(g.reshape(-1), device=device)  # the tokens' numbers, where the model computes
    if state.heads is not None:
        state.heads.begin(b.ids, g, b.window, device)
    try:
        model(ids, probe)
    except _Enough:
        pass
    if state.heads is not None:
        state.heads.finish()


def _progress(done: dict[str, Any], session: int, elapsed: float, limit: int | None, fraction: float) -> Progress:
    rate = session / elapsed if elapsed > 0 else 0.0
    target = limit
    if target is None and fraction > 0:
        target = int(done["tokens"] / min(1.0, fraction))  # the tokens so far scaled by the bytes read
    left = (target - done["tokens"]) / rate if rate > 0 and target else None
    return Progress(done["tokens"], target, rate, max(0.0, left) if left is not None else None, done["batches"],
                    limit is None)
