"""Two models on the same tokens: where their residual streams, attention and predictions part (no Qt).

Given a trace of model A and one of model B on the same token ids (``compare_traces``), or two
models and a prompt (``compare_models``, which first checks that both tokenize it the same):

* ``resid_cos`` [L + 1, n]: cosine of the two residual streams at each boundary (entering each block,
  then after the last one, as ``residual.residual_stack``) and position; ``resid_rel`` the relative norm
  difference ``|a - b| / |a|`` there;
* ``head_js`` [L, H]: each head's Jensen-Shannon divergence of the two attention patterns (natural log,
  so at most ln 2), averaged over query positions;
* ``logit_kl`` [n]: KL(A || B) of the two next-token distributions at each position (natural log);
* where they first diverge: the first boundary, block and position past a small tolerance;
* ``nonfinite``: which model produced NaN or infinity in its residual stream, patterns or logits. Those
  parts are "not compared" in the summary, never "agree" (a NaN passes no tolerance test).

Models of different depth are compared by relative depth (A's boundary i against B's nearest
``i * L_B / L_A``), with a note; different head counts compare each layer's head-averaged pattern
(``head_js`` [L, 1]); different widths leave the cosines undefined (NaN). Rows follow model A.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from explorer.core.errors import ExplorerError

if TYPE_CHECKING:
    from explorer.core.trace import Trace

COS_TOL = 1e-5   # a boundary diverges where some position's cosine is below 1 - COS_TOL
JS_TOL = 1e-6    # a block diverges where some head's mean JS divergence is above this
KL_TOL = 1e-6    # a position diverges where KL(A || B) is above this


class TokenizerMismatch(ExplorerError):
    """The two models do not read the prompt as the same token ids."""


def _floats(a: np.ndarray) -> np.ndarray:
    """float64 stays float64 (exact small examples), anything else is float32 (half the memory traffic
    over [H, n, n] patterns and [n, V] logits)."""
    a = np.asarray(a)
    return a if a.dtype in (np.float32, np.float64) else a.astype(np.float32)


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Stable log-softmax over the last axis."""
    x = _floats(logits)
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def _plogp_over(p: np.ndarray, r: np.ndarray) -> np.ndarray:
    """p ln(p / r) elementwise, 0 where p = 0 (inf where r = 0 < p)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(p > 0, p * np.log(p / r), 0.0).astype(p.dtype, copy=False)


def kl_divergence(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """KL(p || q) over the last axis (natural log; 0 log 0 = 0; inf where q = 0 < p)."""
    p, q = _floats(p), _floats(q)
    return _plogp_over(p, q).sum(-1)


def js_divergence(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Jensen-Shannon divergence over the last axis (natural log: 0 .. ln 2)."""
    p, q = _floats(p), _floats(q)
    m = (p + q) / 2
    return np.maximum((_plogp_over(p, m) + _plogp_over(q, m)).sum(-1) / 2, 0.0)


def logit_kl(logits_a: np.ndarray, logits_b: np.ndarray) -> np.ndarray:
    """KL(A || B) of the next-token distributions at each position, from logits [n, V].  [n]"""
    la, lb = log_softmax(logits_a), log_softmax(logits_b)
    return np.maximum((np.exp(la) * (la - lb)).sum(-1), 0.0)


def head_js(pattern_a: np.ndarray, pattern_b: np.ndarray) -> np.ndarray:
    """Per head, the JS divergence of the two patterns [H, n, n] averaged over query rows.  [H]"""
    return js_divergence(pattern_a, pattern_b).mean(-1)


def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine along the last axis (float64; 0 where either vector is zero)."""
    from explorer.core.analysis.residual import cosine_rows

    return cosine_rows(a, b)


def relative_difference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """|a - b| / |a| along the last axis (float64; |a - b| where a is zero)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    norm = np.linalg.norm(a, axis=-1)
    diff = np.linalg.norm(a - b, axis=-1)
    return np.divide(diff, norm, out=diff.copy(), where=norm > 0)


def depth_map(n_a: int, n_b: int) -> np.ndarray:
    """For each of A's boundaries 0..n_a, B's at the same relative depth (ends map to ends).  int64 [n_a + 1]"""
    if n_a == 0:
        return np.zeros(1, dtype=np.int64)
    return np.rint(np.arange(n_a + 1) * (n_b / n_a)).astype(np.int64)


def first_over(values: np.ndarray, tol: float) -> int | None:
    """The first row (axis 0) where any value is above ``tol`` (NaN ignored), or None."""
    rows = np.flatnonzero(np.nan_to_num(np.asarray(values, dtype=np.float64), nan=0.0).reshape(len(values), -1)
                          .max(-1, initial=0.0) > tol)
    return int(rows[0]) if rows.size else None


@dataclass(frozen=True, eq=False)
class Comparison:
    """Model A against model B on the same tokens (arrays as in the module docstring; rows follow A)."""

    token_ids: tuple[int, ...]
    resid_cos: np.ndarray     # [L_A + 1, n]
    resid_rel: np.ndarray     # [L_A + 1, n]
    head_js: np.ndarray       # [L_A, H_A] (or [L_A, 1]: head-averaged patterns when head counts differ)
    logit_kl: np.ndarray      # [n]
    layer_map: np.ndarray     # [L_A + 1]: B's boundary compared with each of A's
    notes: tuple[str, ...] = ()
    nonfinite: tuple[tuple[str, str], ...] = ()  # ("A" or "B", one of PARTS) where a model produced NaN or inf

    @property
    def first_boundary(self) -> int | None:
        """The first boundary (0: the embeddings, l: entering block l, L: after the last) whose cosine drops."""
        return first_over(1.0 - self.resid_cos, COS_TOL)

    @property
    def first_block(self) -> int | None:
        """The first block with a head whose patterns differ."""
        return first_over(self.head_js, JS_TOL)

    @property
    def first_position(self) -> int | None:
        """The first position whose next-token distributions differ."""
        return first_over(self.logit_kl[:, None], KL_TOL)

    def broken(self, part: str) -> list[str]:
        """Which models ("A", "B") produced non-finite values in ``part`` (one of ``PARTS``)."""
        return [who for who, where in self.nonfinite if where == part]

    def nonfinite_line(self, names: tuple[str, str] = ("A", "B")) -> str | None:
        """Which model produced NaN or infinity, and where; None when both are finite everywhere."""
        said = []
        for who, name in zip(("A", "B"), names):
            where = [part for part in PARTS if who in self.broken(part)]
            if where:
                said.append(f"{name} produced non-finite values (NaN or infinity) in its {_and(where)}")
        return "; ".join(said) + ": those are not compared" if said else None

    def summary(self, names: tuple[str, str] = ("A", "B")) -> str:
        """What agrees and where they first differ; a part where a model produced NaN or infinity is said to be
        not compared (never "agree": NaN compares as nothing)."""
        parts = [line for line in (self.nonfinite_line(names),) if line]
        block, boundary, position = self.first_block, self.first_boundary, self.first_position
        if self.broken("attention patterns"):
            parts.append("attention patterns not compared")
        else:
            parts.append("attention patterns agree in every layer" if block is None
                         else f"attention first differs in layer {block}")
        where = "at the embeddings" if boundary == 0 else f"after layer {(boundary or 0) - 1}"
        if self.broken("residual stream"):
            parts.append("residual streams not compared")
        else:
            parts.append("residual streams agree everywhere" if boundary is None
                         else f"residual streams first differ {where}")
        if self.broken("logits"):
            parts.append("next-token distributions not compared")
        else:
            parts.append("next-token distributions agree at every position" if position is None
                         else f"next-token distributions first differ at position {position}")
        return "; ".join(parts)

    def arrays(self) -> dict[str, np.ndarray]:
        """What compare.npz holds."""
        missing = -1
        return {"resid_cos": self.resid_cos.astype(np.float32), "resid_rel": self.resid_rel.astype(np.float32),
                "head_js": self.head_js.astype(np.float32), "logit_kl": self.logit_kl.astype(np.float32),
                "layer_map": self.layer_map, "token_ids": np.asarray(self.token_ids, dtype=np.int64),
                "first_diverge": np.array([missing if v is None else v for v in
                                           (self.first_boundary, self.first_block, self.first_position)],
                                          dtype=np.int64),
                "nonfinite": np.array([[part in self.broken(p) for p in PARTS] for part in ("A", "B")], dtype=bool)}


PARTS = ("residual stream", "attention patterns", "logits")  # where non-finite values are looked for


def _and(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _finite(tensors: Any) -> bool:
    import torch

    return all(bool(torch.isfinite(t).all()) for t in tensors)


def _streams(trace: Trace) -> list[str]:
    L = trace.config.n_layers
    return [f"blocks.{layer}.resid_pre" for layer in range(L)] + ["resid_final"]


CHUNK_ELEMENTS = 1 << 23  # the largest temporary (floats) of the JS and KL computations: 32 MB in float32


def _tensor(trace: Trace, key: str) -> Any:
    """``key`` as a float tensor where the trace keeps it (float64 stays float64: exact small examples)."""
    import torch

    t = trace.tensor(key)
    return t if t.dtype in (torch.float32, torch.float64) else t.float()


def _stream_rows(a: Any, b: Any) -> tuple[np.ndarray, np.ndarray]:
    """Cosine and |a - b| / |a| of corresponding rows [n, d] (float64, as ``cosine`` / ``relative_difference``)."""
    import torch

    a, b = a.double(), b.to(a.device).double()
    aa, bb, ab = (a * a).sum(-1), (b * b).sum(-1), (a * b).sum(-1)
    denom = torch.sqrt(aa * bb)
    cos = torch.where(denom > 0, ab / torch.where(denom > 0, denom, 1.0), 0.0).clamp(-1.0, 1.0)
    diff, norm = torch.linalg.vector_norm(a - b, dim=-1), torch.sqrt(aa)
    rel = torch.where(norm > 0, diff / torch.where(norm > 0, norm, 1.0), diff)
    return cos.cpu().numpy(), rel.cpu().numpy()


def head_js_tensor(pattern_a: Any, pattern_b: Any) -> np.ndarray:
    """``head_js`` on torch tensors [H, n, n] where they are, a few heads at a time.  float64 [H]

    Each term is p ln(p / m) as ``xlogy(p, p / m)`` (0 where p = 0; m is kept off 0 where both are 0,
    so 0 / m stays 0), in place to keep the passes over the n x n rows few."""
    import torch

    H, n = pattern_a.shape[0], pattern_a.shape[-2]
    step = max(1, CHUNK_ELEMENTS // max(1, n * pattern_a.shape[-1]))
    pattern_b = pattern_b.to(pattern_a.device, pattern_a.dtype)
    tiny = torch.finfo(pattern_a.dtype).tiny
    out = []
    for lo in range(0, H, step):
        p, q = pattern_a[lo:lo + step], pattern_b[lo:lo + step]
        m = torch.add(p, q).mul_(0.5).clamp_min_(tiny)
        term = torch.special.xlogy(p, torch.div(p, m))
        term.add_(torch.special.xlogy(q, torch.div(q, m, out=m), out=m))
        out.append((term.sum(-1) / 2).clamp_min_(0.0).mean(-1))
    return torch.cat(out).cpu().numpy() if out else np.zeros(0)


def logit_kl_tensor(logits_a: Any, logits_b: Any) -> np.ndarray:
    """``logit_kl`` on torch tensors [n, V] where they are, a few positions at a time.  [n]"""
    import torch

    n, V = logits_a.shape
    step = max(1, CHUNK_ELEMENTS // max(1, V))
    logits_b = logits_b.to(logits_a.device, logits_a.dtype)
    out = []
    for lo in range(0, n, step):
        la = torch.log_softmax(logits_a[lo:lo + step], dim=-1)
        lb = torch.log_softmax(logits_b[lo:lo + step], dim=-1)
        out.append((la.exp() * (la - lb)).sum(-1).clamp_min(0.0))
    return torch.cat(out).cpu().numpy() if out else np.zeros(0)


def compare_traces(a: Trace, b: Trace) -> Comparison:
    """Compare two traces of the same token ids (see the module docstring). The arithmetic runs in torch
    where the traces keep their tensors (no copies to numpy of the streams, patterns or logits): the
    streams boundary by boundary, the patterns layer by layer, the logits a few positions at a time."""
    import torch

    if list(a.token_ids) != list(b.token_ids):
        raise TokenizerMismatch("the two traces are not of the same token ids")
    ca, cb = a.config, b.config
    notes: list[str] = []
    layer_map = depth_map(ca.n_layers, cb.n_layers)
    if ca.n_layers != cb.n_layers:
        notes.append(f"A has {ca.n_layers} layers, B {cb.n_layers}: layers are compared by relative depth")
    keys_a, keys_b = _streams(a), _streams(b)
    n = a.n_tokens
    nonfinite: list[tuple[str, str]] = []
    with torch.inference_mode():
        for who, trace, keys in (("A", a, keys_a), ("B", b, keys_b)):
            if not _finite(_tensor(trace, key) for key in keys):
                nonfinite.append((who, "residual stream"))
        if ca.d_model == cb.d_model:
            rows = [_stream_rows(_tensor(a, keys_a[i]), _tensor(b, keys_b[j])) for i, j in enumerate(layer_map)]
            cos, rel = np.stack([r[0] for r in rows]), np.stack([r[1] for r in rows])
        else:
            notes.append(f"A's residual stream has {ca.d_model} dimensions, B's {cb.d_model}: no cosine between them")
            cos = rel = np.full((ca.n_layers + 1, n), np.nan)
        same_heads = ca.n_heads == cb.n_heads
        if not same_heads:
            notes.append(f"A has {ca.n_heads} heads per layer, B {cb.n_heads}: each layer's head-averaged "
                         "pattern is compared")
        js = []
        for i in range(ca.n_layers):
            j = min(int(layer_map[i]), cb.n_layers - 1)
            pa, pb = _tensor(a, f"blocks.{i}.attn.pattern"), _tensor(b, f"blocks.{j}.attn.pattern")
            for who, pattern in (("A", pa), ("B", pb)):
                if (who, "attention patterns") not in nonfinite and not _finite([pattern]):
                    nonfinite.append((who, "attention patterns"))
            js.append(head_js_tensor(pa, pb) if same_heads
                      else head_js_tensor(pa.mean(0, keepdim=True), pb.mean(0, keepdim=True)))
        head = np.stack(js) if js else np.zeros((0, ca.n_heads))
        la, lb = _tensor(a, "logits"), _tensor(b, "logits")
        vocab = min(la.shape[-1], lb.shape[-1])
        if la.shape[-1] != lb.shape[-1]:
            notes.append(f"A has {la.shape[-1]} logits, B {lb.shape[-1]}: the first {vocab} are compared")
        kl = logit_kl_tensor(la[:, :vocab], lb[:, :vocab])
        nonfinite += [(who, "logits") for who, logits in (("A", la), ("B", lb)) if not _finite([logits])]
    return Comparison(tuple(int(t) for t in a.token_ids), cos, rel, head, kl, layer_map, tuple(notes),
                      tuple(sorted(nonfinite)))


def compare_spec(storage: str = "host") -> Any:
    """What model B's trace needs to be compared (``compare_traces``): the residual stream, the logits,
    q and k (each layer's patterns are derived from them). No pattern is recorded, so B's forward pass
    takes the same attention path as A's (a model compared with itself agrees to the last bit)."""
    from explorer.core.trace import CaptureSpec

    return CaptureSpec(kinds=frozenset({"resid", "logits", "qkv"}), storage=storage)


def lens_only(trace: Trace) -> Trace:
    """``trace`` keeping only its residual stream and logits (once compared, B's lens and next-token
    distribution are all that is read again): q, k and the patterns derived from them are let go."""
    from explorer.core.trace import Trace

    keys = trace.stored_keys()
    kept = [k for k in keys if k == "logits" or k.rsplit(".", 1)[-1].startswith("resid")]
    if len(kept) == len(keys):
        return trace
    return Trace(trace.token_ids, trace.tokens, trace.config, {k: trace._arrays[k] for k in kept}, trace.meta,
                 trace._model, trace.interventions, trace.budget)


def lens_at(trace: Trace, position: int, top: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """The logit lens of every boundary at one ``position``: the top ``top`` ids and probabilities
    (int64 and float32 [L + 1, top]; the same numbers as ``residual.lens_columns`` there, without its
    entropy and next-token ranks: what the compare view's side-by-side table shows)."""
    import torch

    from explorer.core.analysis.ranking import top_k_rows
    from explorer.core.placement import model_dtype, tail_device

    model = trace._model
    device, dtype = tail_device(model), model_dtype(model)
    top = max(1, min(int(top), int(model.unembed.weight.shape[0])))
    with torch.inference_mode():
        stream = torch.stack([trace.tensor(key)[position] for key in _streams(trace)]).to(device, dtype)
        raw = model.final_logits(stream[None])[0].float()                 # [L + 1, V]
        ids = top_k_rows(raw, top)
        probs = torch.softmax(raw, dim=-1).gather(-1, ids)
    return ids.cpu().numpy().astype(np.int64), probs.cpu().numpy().astype(np.float32)


def same_tokens(a: Any, b: Any, prompt: str) -> list[int]:
    """The prompt's token ids when both models (LoadedModel) read it the same, else ``TokenizerMismatch``."""
    ids_a, _ = a.encode(prompt)
    ids_b, _ = b.encode(prompt)
    if ids_a != ids_b:
        where = next((i for i, (x, y) in enumerate(zip(ids_a, ids_b)) if x != y), min(len(ids_a), len(ids_b)))
        raise TokenizerMismatch(f"the two models tokenize the prompt differently ({len(ids_a)} and {len(ids_b)} "
                                f"tokens, first difference at token {where}): comparing them needs the same tokenizer")
    if a.tokenizer.vocab_size != b.tokenizer.vocab_size:
        raise TokenizerMismatch(f"the two tokenizers differ ({a.tokenizer.vocab_size} and {b.tokenizer.vocab_size} "
                                "tokens): comparing them needs the same tokenizer")
    return ids_a


def compare_models(a: Any, b: Any, prompt: str) -> Comparison:
    """Trace both models (LoadedModel) on the prompt's tokens and compare them."""
    from explorer.core.trace import CaptureSpec

    ids = same_tokens(a, b, prompt)
    spec = CaptureSpec(kinds=frozenset({"embed", "resid", "norm", "qkv", "logits"}))
    return compare_traces(a.trace_ids(ids, spec), b.trace_ids(ids, spec))
