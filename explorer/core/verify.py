"""Verify a checkpoint against the reference: ``transformers``' eager model run from the same files.

``verify_checkpoint(source, prompt)`` opens the directory twice, with our loader and with
``transformers`` (``local_files_only``, never ``trust_remote_code``: nothing is downloaded and no code
from the directory runs), feeds both the same token ids, and compares, layer by layer, the residual
stream leaving each block and each layer's attention patterns, then the logits and the token ids
(the prompt's tokenization where transformers reads the tokenizer; each position's most likely next
token). Where transformers' outputs sit among our Trace keys is the family's ``ReferenceMap``
(``checkpoint/reference.py``). The result is a ``VerifyReport`` the command line prints and the
window can show. Checkpoints the reference cannot read are refused with one line (``VerifyRefused``).
Our loader opens the directory first, with its checks of every file (``checkpoint/validate.py``,
``pickles.py``, ``hf_files.py``), so a hostile checkpoint is refused before transformers reads it.
A GGUF file is checked against transformers' own GGUF loading of it (``verify_gguf``: the same
per-layer lines and tolerances), its header read by our reader first.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from explorer.core.cancel import CancelLike, checker
from explorer.core.errors import CheckpointError, VerifyRefused

LOGITS_TOL = 1e-3
PATTERN_TOL = 1e-4
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json", "vocab.json", "vocab.txt",
                   "merges.txt", "spiece.model")
RESID_RTOL = 1e-4   # of the largest |value| of the reference's residual stream at that layer (at least 1)
INSTALL = ("the reference check needs transformers, which is not installed: "
           "pip install 'transformer-explorer[verify]'")


@dataclass(frozen=True)
class LayerCheck:
    """One row: the residual stream leaving a block (or the embeddings) and that block's patterns."""

    label: str               # "embeddings" or "layer 3"
    layer: int | None        # None for the embeddings
    resid: float             # max |ours - reference| of the residual stream after it
    resid_scale: float       # the largest |reference value| there (the residual tolerance is relative to it)
    pattern: float | None    # max |ours - reference| of the attention patterns (None: not compared)
    cosine: float | None = None  # the lowest cosine, over the positions, of our residual vector with the reference's

    @property
    def resid_tol(self) -> float:
        return RESID_RTOL * max(1.0, self.resid_scale)

    @property
    def resid_ok(self) -> bool:
        return bool(self.resid <= self.resid_tol)

    @property
    def pattern_ok(self) -> bool:
        return self.pattern is None or bool(self.pattern <= PATTERN_TOL)

    @property
    def passed(self) -> bool:
        return self.resid_ok and self.pattern_ok

    def line(self) -> str:
        text = f"{self.label:<12} resid {self.resid:.2e} (tol {self.resid_tol:.1e}{'' if self.resid_ok else ' FAIL'})"
        if self.cosine is not None:
            text += f"  cos {format_cosine(self.cosine)}"
        if self.layer is not None:
            text += ("  pattern not compared" if self.pattern is None else
                     f"  pattern {self.pattern:.2e} (tol {PATTERN_TOL:.0e}{'' if self.pattern_ok else ' FAIL'})")
        return text


@dataclass(frozen=True)
class VerifyReport:
    """What ``verify_checkpoint`` found; ``lines()`` is what ``transformer-explorer verify`` prints."""

    checkpoint: str
    reference: str                    # the transformers class that ran
    ids: tuple[int, ...]              # the token ids both models read
    layers: tuple[LayerCheck, ...]    # the embeddings, then one row per block
    logits: float | None              # max |ours - reference| (None: the reference has no logits)
    next_ids_differ: int              # positions whose top token (an encoder's: its fill) differs beyond tolerance
    prompt_ids_equal: bool | None     # our tokenization == transformers' (None: not compared)
    notes: tuple[str, ...] = ()
    reference_ids: tuple[int, ...] | None = None  # transformers' tokenization of the prompt, where compared
    runtime: Any = None               # a GGUF file run in llama.cpp beside ours (verify_llamacpp.RuntimeComparison)

    @property
    def logits_ok(self) -> bool:
        return self.logits is None or bool(self.logits <= LOGITS_TOL)

    @property
    def ids_ok(self) -> bool:
        return self.next_ids_differ == 0 and self.prompt_ids_equal is not False

    @property
    def first_failure(self) -> LayerCheck | None:
        return next((row for row in self.layers if not row.passed), None)

    @property
    def passed(self) -> bool:
        return self.first_failure is None and self.logits_ok and self.ids_ok

    def verdict(self) -> str:
        if self.passed:
            return "within tolerance"
        row = self.first_failure
        if row is None:
            return "FAILED: " + ("the logits differ" if not self.logits_ok else "the token ids differ")
        what = [f"resid {row.resid:.2e} > {row.resid_tol:.1e}"] if not row.resid_ok else []
        what += [f"pattern {row.pattern:.2e} > {PATTERN_TOL:.0e}"] if not row.pattern_ok else []
        return f"FAILED: first difference at {row.label} ({', '.join(what)})"

    def last_line(self) -> str:
        logits = "logits not compared" if self.logits is None else \
            f"logits {self.logits:.2e} (tol {LOGITS_TOL:.0e}{'' if self.logits_ok else ' FAIL'})"
        prompt = {None: "prompt ids not compared", True: "prompt ids equal", False: "prompt ids DIFFER"}[
            self.prompt_ids_equal]
        if self.prompt_ids_equal is False and self.reference_ids is not None:
            theirs = self.reference_ids
            first = next((i for i, (a, b) in enumerate(zip(self.ids, theirs)) if a != b),
                         min(len(self.ids), len(theirs)))
            prompt += f" ({len(self.ids)} tokens here, {len(theirs)} in transformers; first at token {first})"
        nxt = ("top-token ids not compared" if self.logits is None else
               f"top-token ids {self.next_ids_differ} of {len(self.ids)} differ")
        return f"{logits}  {prompt}  {nxt}: {self.verdict()}"

    def lines(self) -> list[str]:
        head = f"{self.checkpoint}: against transformers' {self.reference} on {len(self.ids)} tokens"
        runtime = self.runtime.lines() if self.runtime is not None else []
        return [head, *(f"note: {n}" for n in self.notes), *(row.line() for row in self.layers), *runtime,
                self.last_line()]


# --- what the reference can read -----------------------------------------------------------------

@dataclass(frozen=True)
class Reference:
    """What the reference reads: a Hugging Face directory, or a GGUF file in ``directory`` (``gguf_file``)."""

    directory: Path
    config: dict[str, Any]            # config.json, or the GGUF file's metadata read as one
    gguf_file: str | None = None      # the file's name inside ``directory``

    @property
    def ours(self) -> Path:
        """What our loader opens."""
        return self.directory / self.gguf_file if self.gguf_file else self.directory

    def kwargs(self) -> dict[str, Any]:
        return {"gguf_file": self.gguf_file} if self.gguf_file else {}


def reference_source(source: str | Path) -> Reference:
    """What transformers reads for ``source`` (a Hugging Face directory or a GGUF file), or ``VerifyRefused``."""
    from explorer.core.checkpoint import MAX_CONFIG_BYTES, builtin_names, hub_cache, nanogpt
    from explorer.core.checkpoint.families import FAMILIES
    from explorer.core.checkpoint.native import NATIVE_FORMAT
    from explorer.core.checkpoint.safe_io import read_json
    from explorer.core.verify_gguf import gguf_reference, gguf_target

    text = str(source)
    if text.startswith("memory:"):
        raise VerifyRefused("an in-memory model has no files for the reference to read; "
                            "save it and verify the directory")
    if text in builtin_names():
        raise VerifyRefused(f"{text} is a built-in model in the app's own format, which transformers does not read")
    path = Path(text).expanduser()
    cached = hub_cache.resolve(path if path.exists() else text)
    if cached is not None:
        path = cached.path
    found = gguf_target(text, path)
    if found is not None:
        return Reference(found.parent, gguf_reference(found, _transformers()), found.name)
    if not path.exists():
        raise VerifyRefused(f"no checkpoint at {path}")
    if path.is_file() and path.suffix in nanogpt.SUFFIXES:
        raise VerifyRefused(f"{path}: a nanoGPT checkpoint, which transformers does not read")
    directory = path.parent if path.is_file() else path
    if not (directory / "config.json").is_file():
        if (directory / "ckpt.pt").is_file():
            raise VerifyRefused(f"{directory}: a nanoGPT checkpoint, which transformers does not read")
        raise VerifyRefused(f"{directory} has no config.json, so transformers cannot read it")
    try:
        config = read_json(directory / "config.json", MAX_CONFIG_BYTES)
    except CheckpointError as exc:
        raise VerifyRefused(str(exc)) from None
    if config.get("format") == NATIVE_FORMAT:
        raise VerifyRefused(f"{directory}: the app's own format, which transformers does not read")
    model_type = config.get("model_type")
    if model_type not in FAMILIES:
        raise VerifyRefused(f"{directory / 'config.json'}: model_type {model_type!r:.80} is not one this app opens")
    return Reference(directory, config)


def _transformers():
    try:
        import transformers
    except ImportError:
        raise VerifyRefused(INSTALL) from None
    return transformers


def _reference_model(transformers: Any, ref: Reference, encoder: bool, attn: str):
    """transformers' model class the config names (a class transformers itself defines), else the Auto class."""
    cls, directory = None, ref.directory
    for name in ref.config.get("architectures") or []:
        candidate = getattr(transformers, name, None) if isinstance(name, str) and name.isidentifier() else None
        if isinstance(candidate, type) and issubclass(candidate, transformers.PreTrainedModel):
            cls = candidate
            break
    if cls is None:
        cls = transformers.AutoModelForMaskedLM if encoder else transformers.AutoModelForCausalLM
    major, minor = (int(p) for p in transformers.__version__.split(".")[:2])
    dtype_key = "dtype" if (major, minor) >= (4, 56) else "torch_dtype"
    try:
        model = cls.from_pretrained(str(directory), local_files_only=True, trust_remote_code=False,
                                    attn_implementation=attn, **{dtype_key: torch.float32}, **ref.kwargs())
    except Exception as exc:  # noqa: BLE001 - whatever transformers says becomes one line
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise VerifyRefused(f"transformers cannot read {ref.ours}: {first:.300}") from None
    return model.eval()


def _reference_ids(transformers: Any, ref: Reference, prompt: str, n_ctx: int) -> list[int] | None:
    """transformers' tokenization of the prompt from the checkpoint's own files (None: it reads none)."""
    try:
        tok = transformers.AutoTokenizer.from_pretrained(str(ref.directory), local_files_only=True,
                                                         trust_remote_code=False, **ref.kwargs())
        ids = list(tok(prompt)["input_ids"])[:n_ctx]
    except Exception:  # noqa: BLE001 - no tokenizer transformers reads: the ids are not compared
        return None
    if not ids and ref.gguf_file is None and not any((ref.directory / name).is_file() for name in TOKENIZER_FILES):
        return None  # no tokenizer files at all: transformers made up an empty one (and said nothing)
    return ids


def _max_diff(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)).max())


def min_cosine(ours: np.ndarray, theirs: np.ndarray) -> float:
    """The lowest cosine similarity, over the positions (rows), of our vector with the reference's, in
    float64: 1 where both are zero, 0 where only one is. Beside max |diff| it says whether a difference is
    a rounding (cosine 1.0000000) or another direction (a conversion bug: 0.9 or less)."""
    a = np.asarray(ours, dtype=np.float64).reshape(-1, np.shape(ours)[-1])
    b = np.asarray(theirs, dtype=np.float64).reshape(-1, np.shape(theirs)[-1])
    na, nb = np.linalg.norm(a, axis=-1), np.linalg.norm(b, axis=-1)
    both = (na > 0) & (nb > 0)
    cos = np.where(both, (a * b).sum(-1) / np.where(both, na * nb, 1.0), np.where((na == 0) & (nb == 0), 1.0, 0.0))
    return float(np.clip(cos, -1.0, 1.0).min()) if cos.size else 1.0


def format_cosine(value: float) -> str:
    """Seven decimals: a float32 rounding difference shows as 1.0000000 or 0.9999999, a wrong weight far below."""
    return f"{value:.7f}"


def next_ids_differ(ours: np.ndarray, theirs: np.ndarray, tol: float = LOGITS_TOL) -> int:
    """Positions where our most likely next token is worse than the reference's by more than ``tol``
    in the reference's own logits (a tie within the tolerance is not a difference)."""
    mine, best = ours.argmax(-1), theirs.argmax(-1)
    rows = np.arange(len(mine))
    return int(((mine != best) & (theirs[rows, best] - theirs[rows, mine] > tol)).sum())


# --- the check -----------------------------------------------------------------------------------

def verify_checkpoint(source: str | Path, prompt: str | None = None, ids: list[int] | None = None,
                      cancel: CancelLike = None, _loaded: Any = None) -> VerifyReport:
    """Compare our model with transformers' eager model from the same files (see the module docstring).

    ``ids``: token ids to run instead of the prompt. ``cancel`` is checked between the steps (our load,
    the reference's load, its forward pass, ours); it raises ``Cancelled`` there. ``_loaded`` (tests):
    our model to use instead of opening the directory, e.g. one whose conversion a test broke on purpose.
    """
    from explorer.core.checkpoint import load_checkpoint
    from explorer.core.checkpoint.reference import reference_map
    from explorer.core.tokenize.huggingface import TokenIdTokenizer
    from explorer.core.trace import CaptureSpec

    check = checker(cancel)
    ref = reference_source(source)
    transformers = _transformers()
    loaded = _loaded if _loaded is not None else load_checkpoint(ref.ours, device="cpu", dtype="float32",
                                                                 cancel=cancel)
    mapping = reference_map(ref.config["model_type"], ref.config)
    notes = [mapping.note] if mapping.note else []
    stand_in = isinstance(loaded.tokenizer, TokenIdTokenizer)
    prompt_equal, reference_ids = None, None
    if ids is None:
        if prompt is None and stand_in:
            ids = list(range(1, min(17, loaded.config.vocab_size)))
            notes.append("no tokenizer: token ids 1..16 were run (give --prompt as ids to choose)")
        else:
            text = prompt if prompt is not None else "The quick brown fox jumps over the lazy dog."
            ids, _ = loaded.encode(text)
            if not stand_in:
                theirs = _reference_ids(transformers, ref, text, loaded.config.n_ctx)
                prompt_equal = None if theirs is None else theirs == ids
                reference_ids = None if theirs is None else tuple(int(i) for i in theirs)
                if theirs is None:
                    notes.append("transformers reads no tokenizer here: prompt ids not compared")
    ids = [int(i) for i in ids]
    check()
    reference = _reference_model(transformers, ref, loaded.generation_blocked is not None, mapping.attn_implementation)
    check()
    batch = torch.tensor([ids])
    with torch.no_grad():
        out = reference(batch, attention_mask=torch.ones_like(batch), output_hidden_states=True,
                        output_attentions=mapping.patterns)
    kinds = {"resid", "logits"} | ({"pattern"} if mapping.patterns else set())
    check()
    trace = loaded.trace_ids(ids, CaptureSpec(kinds=frozenset(kinds)), cancel=cancel)
    L = loaded.config.n_layers
    hidden = [h[0].float().numpy() for h in out.hidden_states]
    if len(hidden) != L + 1:
        raise VerifyRefused(f"transformers reports {len(hidden) - 1} layers, this app {L}: not comparable")
    final = torch.from_numpy(np.array(trace["resid_final"]))
    with torch.no_grad():
        if mapping.final == "normed" and loaded.model.ln_final is not None:
            final = loaded.model.ln_final(final)
        if mapping.final == "normed" and loaded.model.project_out is not None:
            final = loaded.model.project_out(final)
    ours = [np.asarray(trace[f"blocks.{i}.resid_pre"]) for i in range(L)] + [final.numpy()]
    rows = [LayerCheck("embeddings", None, _max_diff(ours[0], hidden[0]), float(np.abs(hidden[0]).max()), None,
                       min_cosine(ours[0], hidden[0]))]
    # a hybrid's reference reports the attention layers' patterns only (its recurrent layers have none), in order
    attending = [p.layer for p in loaded.config.plan if p.is_attention]
    reported = [a for a in (out.attentions or ()) if a is not None] if mapping.patterns else []
    by_layer = dict(zip(range(L) if len(reported) == L else attending, reported))
    for i in range(L):
        pattern = None
        if i in by_layer and i in attending:
            pattern = _max_diff(trace[f"blocks.{i}.attn.pattern"], by_layer[i][0].float().numpy())
        rows.append(LayerCheck(f"layer {i}", i, _max_diff(ours[i + 1], hidden[i + 1]),
                               float(np.abs(hidden[i + 1]).max()), pattern, min_cosine(ours[i + 1], hidden[i + 1])))
    logits, differ = None, 0
    ref_logits = getattr(out, "logits", None)
    if ref_logits is not None and "logits" in trace:
        theirs = ref_logits[0].float().numpy()
        mine = np.asarray(trace["logits"])[:, : theirs.shape[-1]]
        logits, differ = _max_diff(mine, theirs), next_ids_differ(mine, theirs)
    else:
        notes.append("the reference has no output head: logits not compared")
    runtime = None
    if ref.gguf_file is not None and "logits" in trace:  # what the user's runtime computes (verify_llamacpp.py)
        from explorer.core.verify_llamacpp import compare_with_llamacpp

        check()
        found = compare_with_llamacpp(ref.ours, np.asarray(trace["logits"]), ids)
        runtime = None if isinstance(found, str) else found
        notes.append(found if isinstance(found, str) else found.summary())
    return VerifyReport(str(ref.ours), type(reference).__name__, tuple(ids), tuple(rows), logits, differ,
                        prompt_equal, tuple(notes), reference_ids, runtime)
