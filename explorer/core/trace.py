"""Capture a forward pass into an immutable ``Trace`` of numpy arrays keyed by stable names.

Names (L layers, H heads, n tokens; documented in ARCHITECTURE.md):

==============================  ==================  =========================================
key                             shape               what
==============================  ==================  =========================================
``embed``                       [n, d]              token embedding rows
``pos_embed``                   [n, d]              positional vectors added to them
``type_embed``                  [n, d]              token-type (segment 0) vectors added to them (BERT)
``ln_embed.mean/var``           [n]                 statistics of the embedding norm (BERT)
``blocks.{l}.resid_pre``        [n, d]              residual stream entering block l
``blocks.{l}.ln1.mean/var``     [n]                 LayerNorm statistics (``mean_square`` for RMSNorm)
``blocks.{l}.attn.q/k/v``       [H or Hkv, n, dh]   per-head queries, keys, values (q, k after rotary)
``blocks.{l}.attn.q_norm.*``    [H, n] or [n]       statistics of the q (k: ``k_norm``) norm, where there is one
``blocks.{l}.attn.scores``      [H, n, n]           what enters the softmax: q.k * scale (1/sqrt(dh) unless the
                                                    config says) + ALiBi bias (BLOOM), soft-capped if capped; masked (causal,
                                                    sliding window) entries -inf
``blocks.{l}.attn.scores_precap`` [H, n, n]         the scores before the soft cap (soft-capped models only)
``blocks.{l}.attn.pattern``     [H, n, n]           softmax of the scores, rows sum to 1 (with sinks: 1 - sink)
``blocks.{l}.attn.sink``        [H, n]              gpt-oss: each row's weight on its head's sink
``blocks.{l}.attn.z``           [H, n, dh]          each head's output (pattern @ v)
``blocks.{l}.attn.out``         [n, d]              heads concatenated, times W_O (then output norm, residual
                                                    scale where the family has them): what is added
``blocks.{l}.resid_mid``        [n, d]              residual stream between attention and FFN
``blocks.{l}.ln2.mean/var``     [n]                 (``ln1_out``, ``ln2_out``: the sublayer output norms)
``blocks.{l}.mlp.pre/post``     [n, d_ff]           FFN neurons before / after the non-linearity
``blocks.{l}.mlp.out``          [n, d]              FFN output added to the residual stream (experts + shared)
``blocks.{l}.moe.router_logits`` [n, E]             a mixture of experts' router logits (core/moe.py)
``blocks.{l}.moe.probs/choice`` [n, E]              every expert's score; what the top-k is taken over
``blocks.{l}.moe.experts``      [n, k] int64        each token's chosen experts, best first
``blocks.{l}.moe.weights``      [n, k]              what multiplies each chosen expert's output
``blocks.{l}.moe.expert_out``   [n, k, d]           each chosen expert's weighted output (derived on demand)
``blocks.{l}.moe.shared_out``   [n, d]              the shared expert's output (after its gate)
``resid_final``                 [n, d]              after the last block, before the final norm
``ln_final.mean/var``           [n]
``logits``                      [n, V]
==============================  ==================  =========================================

What is stored is chosen by a ``CaptureSpec``. Whatever is not stored but can be derived stays
available: scores and patterns are computed from the stored q and k with the very functions the
forward pass used, and anything else inside block l is reproduced by running block l again on its
stored input ``blocks.{l}.resid_pre`` (the same code on the same numbers gives the same result).
Memory therefore does not have to grow as L x H x n^2 for every head to be viewable.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np

from explorer.core.arguments import names_in, numbers
from explorer.core.cancel import CancelLike, checker
from explorer.core.config import ModelConfig
from explorer.core.errors import ArgumentError, TraceKeyError
from explorer.core.text import shown
from explorer.core.trace_keys import EFFECTIVE, KINDS, ON_DEMAND, block_sites, estimate_nbytes, kind_of  # noqa: F401

if TYPE_CHECKING:  # torch stays out of the import path of code that only reads traces
    import torch

    from explorer.core.budget import MemoryBudget
    from explorer.core.chat.spans import ChatSpans
    from explorer.core.model import Transformer

STORAGE_DTYPES = ("float32", "float16")
STORAGES = ("host", "device")
_BLOCK_KEY = re.compile(r"^blocks\.(\d+)\.(.+)$")


@dataclass(frozen=True)
class CaptureSpec:
    """Which tensors a forward pass stores: kinds, layers (None = all), storage dtype, and where.

    ``storage="host"`` keeps numpy arrays in RAM (the CPU default); ``"device"`` keeps torch tensors
    where the model computes (the default on a GPU): derivations run there, and only what is read
    with ``trace[key]`` crosses to the host.
    """

    kinds: frozenset[str] = frozenset(k for k in KINDS if k not in ON_DEMAND)
    layers: frozenset[int] | None = None
    dtype: str = "float32"
    storage: str = "host"

    def __post_init__(self) -> None:
        object.__setattr__(self, "kinds", names_in(self.kinds, KINDS, "kinds"))
        object.__setattr__(self, "layers", None if self.layers is None else numbers(self.layers, "layers"))
        if self.dtype not in STORAGE_DTYPES:
            raise ArgumentError(f"storage dtype must be one of {STORAGE_DTYPES}")
        if self.storage not in STORAGES:
            raise ArgumentError(f"storage must be one of {STORAGES}")

    @classmethod
    def full(cls, dtype: str = "float32", storage: str = "host") -> CaptureSpec:
        """Everything except the n x n scores and patterns (derived per head on demand) and each chosen
        expert's own output (n x k x d per MoE layer, derived by re-running the block)."""
        return cls(dtype=dtype, storage=storage)

    @classmethod
    def everything(cls, dtype: str = "float32", storage: str = "host") -> CaptureSpec:
        """Everything, the n x n scores and patterns of every head included."""
        return cls(kinds=frozenset(KINDS), dtype=dtype, storage=storage)

    @classmethod
    def compact(cls, dtype: str = "float32", storage: str = "host") -> CaptureSpec:
        """The minimum from which everything else is derived: residual stream, q, k, norm statistics."""
        return cls(kinds=frozenset({"embed", "resid", "norm", "qkv"}), dtype=dtype, storage=storage)

    @classmethod
    def default_for(cls, device: Any) -> CaptureSpec:
        """What a trace stores when nobody says: the full capture on the host for the CPU, the compact
        capture kept on the device for an accelerator (copying every activation to the host would
        cost more than the forward pass there)."""
        kind = getattr(device, "type", str(device).split(":")[0])
        return cls.full() if kind == "cpu" else cls.compact(storage="device")

    def wants(self, kind: str, layer: int | None) -> bool:
        return kind in self.kinds and (layer is None or self.layers is None or layer in self.layers)


def _key(site: str, layer: int | None) -> str:
    return site if layer is None else f"blocks.{layer}.{site}"


def _readonly(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


def as_tensor(a: np.ndarray) -> torch.Tensor:
    """A tensor view of a (read-only) trace array; nothing writes through it."""
    import warnings

    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch warns that the array is read-only
        return torch.from_numpy(a)


def to_numpy(t: torch.Tensor, dtype: str = "float32") -> np.ndarray:
    """A CPU numpy copy of one tensor in the storage dtype (integers stay integers)."""
    import torch

    t = t.detach()
    if t.is_floating_point():
        t = t.to(device="cpu", dtype=getattr(torch, dtype))
    else:
        t = t.cpu()
    return np.ascontiguousarray(t.numpy())


def to_stored(t: torch.Tensor, dtype: str = "float32") -> torch.Tensor:
    """One tensor kept where it is, in the storage dtype (integers stay integers)."""
    import torch

    t = t.detach()
    return t.to(dtype=getattr(torch, dtype)) if t.is_floating_point() else t


def host_view(value: Any) -> np.ndarray:
    """A read-only numpy array of a stored value: itself, a zero-copy view of a CPU tensor, or a
    host copy of a device tensor."""
    if isinstance(value, np.ndarray):
        return value
    if value.device.type != "cpu":
        value = value.cpu()
    return _readonly(value.numpy())


class Recorder:
    """Collects the tensors a ``CaptureSpec`` asks for, as numpy arrays of batch element 0."""

    def __init__(self, spec: CaptureSpec, cancel: CancelLike = None) -> None:
        self.spec = spec
        self.arrays: dict[str, np.ndarray] = {}
        self._check = checker(cancel)  # consulted at every layer boundary: a stale forward pass stops there

    def records(self, site: str, layer: int | None) -> bool:
        """Whether ``site`` of ``layer`` is stored (the forward pass skips computing what nobody records)."""
        return self.spec.wants(kind_of(site), layer)

    def __call__(self, site: str, layer: int | None, tensor: torch.Tensor) -> torch.Tensor:
        if site == "resid_pre":
            self._check()
        if self.spec.wants(kind_of(site), layer):
            if self.spec.storage == "device":
                self.arrays[_key(site, layer)] = to_stored(tensor[0], self.spec.dtype)
            else:
                self.arrays[_key(site, layer)] = _readonly(to_numpy(tensor[0], self.spec.dtype))
        return tensor


@dataclass(frozen=True)
class TraceMeta:
    model_name: str = ""
    device: str = "cpu"
    dtype: str = "float32"
    forward_seconds: float = 0.0
    truncated_from: int | None = None  # the prompt's token count when it was cut to the context
    extra: dict[str, Any] = field(default_factory=dict)
    chat: ChatSpans | None = None  # each token's turn, role and kind when the text is a templated conversation


class Trace:
    """One forward pass, frozen: token ids and strings, and activations (read-only).

    ``trace[key]`` returns a stored array or derives it (see the module docstring) as a numpy array;
    ``trace.tensor(key)`` returns it as a torch tensor where it lives (on the model's device for a
    device-resident trace, ``storage == "device"``; a zero-copy view of the host array otherwise).
    ``keys()`` lists every key available either way; ``nbytes`` counts what is stored. Derived values
    (and host copies of device tensors) are cached within the memory budget (explorer/core/budget.py):
    evicted when it is short, recomputed when asked again.
    """

    def __init__(self, token_ids: Sequence[int], tokens: Sequence[str], config: ModelConfig,
                 arrays: dict[str, Any], meta: TraceMeta | None = None,
                 model: Transformer | None = None, interventions: tuple = (),
                 budget: MemoryBudget | None = None) -> None:
        from explorer.core.budget import LRUCache, global_budget

        self.token_ids = _readonly(np.asarray(token_ids, dtype=np.int64).copy())
        self.tokens: tuple[str, ...] = tuple(tokens)
        self.config = config
        self.meta = meta or TraceMeta()
        self._arrays = dict(arrays)
        self._on_device = any(not isinstance(a, np.ndarray) for a in self._arrays.values())
        self._model = model
        self.interventions = tuple(interventions)  # resolved Intervention objects this run was made with
        self.budget = budget or global_budget()
        self._cache = LRUCache(self.budget)  # derived values, host copies of device tensors
        self._held = self.budget.hold(self.nbytes)  # what is stored counts against the budget
        self._memo: dict[Any, Any] = {}
        self._lock = threading.RLock()

    # --- reading -----------------------------------------------------------------------------
    @property
    def n_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def storage(self) -> str:
        """``"device"`` when the arrays are torch tensors (where the model computes), else ``"host"``."""
        return "device" if self._on_device else "host"

    @property
    def nbytes(self) -> int:
        return sum(int(a.nbytes) for a in self._arrays.values()) + self.token_ids.nbytes

    @property
    def cached_nbytes(self) -> int:
        """Bytes of derived values (and host copies) this trace keeps now."""
        return self._cache.nbytes

    def stored_keys(self) -> list[str]:
        return list(self._arrays)

    def stored_dtype(self, key: str) -> str:
        """The storage dtype of a stored key ("float32", "float16", "int64")."""
        return str(self._arrays[key].dtype).replace("torch.", "")

    def keys(self) -> list[str]:
        keys = list(self._arrays)
        seen = set(keys)
        for key in self._derivable_keys():
            if key not in seen:
                keys.append(key)
                seen.add(key)
        return keys

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and (key in self._arrays or key in set(self._derivable_keys()))

    def __getitem__(self, key: str) -> np.ndarray:
        return self._host(key, self._value(key))

    def tensor(self, key: str) -> torch.Tensor:
        """``key`` as a torch tensor where it lives: nothing crosses to the host (do not write to it)."""
        return _as_t(self._value(key))

    def _value(self, key: str) -> Any:
        """A stored or derived value as it is kept: a numpy array or a torch tensor."""
        value = self._arrays.get(key)
        if value is not None:
            return value
        with self._lock:
            value = self._cache.get(key)
            if value is not None:
                return value
            if key not in self:
                raise TraceKeyError(self._missing(key))
            return self._derive(key)

    def _host(self, key: str, value: Any) -> np.ndarray:
        """What ``trace[key]`` returns: the array, a view of a CPU tensor, a (cached) copy of a device tensor."""
        if isinstance(value, np.ndarray) or value.device.type == "cpu":
            return host_view(value)
        with self._lock:
            copy = self._cache.get(("host", key))
            return copy if copy is not None else self._cache.put(("host", key), host_view(value))

    @property
    def has_model(self) -> bool:
        """False for a trace read from a file: what only the weights can give is not available."""
        return self._model is not None

    def _missing(self, key: str) -> str:
        if not isinstance(key, str):
            return f"a trace's keys are names like 'blocks.0.attn.pattern', not {shown(repr(key), 40)}"
        if self._model is None and (key == "logits" or _BLOCK_KEY.match(key)):
            return (f"{key!r} is not in this trace, and deriving it needs the model's weights, which this "
                    "trace does not have (it was opened from a file); open the model, or export it with the trace")
        return f"{key!r} is neither captured nor derivable in this trace"

    def get(self, key: str, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default

    def materialize(self, keys: Iterable[str]) -> None:
        """Compute derived keys now (call it in a worker thread so that the GUI later only reads)."""
        for key in keys:
            self[key]

    def memo(self, key: Any, compute: Callable[[], Any]) -> Any:
        """A value computed once from this trace and kept with it (e.g. a panel's downsampled view).

        A UI worker calls it first, so that the GUI thread later gets the value without waiting;
        the value must be derived from the trace alone, since the trace never changes.
        """
        try:
            return self._memo[key]
        except KeyError:
            pass
        value = compute()  # outside the lock: another thread reading a ready memo never waits on this
        with self._lock:
            return self._memo.setdefault(key, value)

    def memo_get(self, key: Any, default: Any = None) -> Any:
        """The memoised value if it is ready, else ``default`` (never computes, never waits)."""
        return self._memo.get(key, default)

    def head(self, layer: int, head: int, kind: str = "pattern") -> np.ndarray:
        """One head's ``scores`` or ``pattern`` [n, n], computed from q and k if not stored."""
        return self._host(f"blocks.{layer}.attn.head{head}.{kind}", self._head_value(layer, head, kind))

    def head_tensor(self, layer: int, head: int, kind: str = "pattern") -> torch.Tensor:
        """``head`` as a tensor where the trace computes (on the device for a device-resident trace)."""
        return _as_t(self._head_value(layer, head, kind))

    def _head_value(self, layer: int, head: int, kind: str) -> Any:
        if kind not in ("scores", "pattern"):
            raise ValueError("kind must be 'scores' or 'pattern'")
        stored = self._arrays.get(f"blocks.{layer}.attn.{kind}")
        if stored is not None:
            return stored[head]
        own = f"blocks.{layer}.attn.head{head}.{kind}"  # cache entries of single heads
        with self._lock:
            whole = self._cache.get(f"blocks.{layer}.attn.{kind}")
            if whole is not None:
                return whole[head]
            mine = self._cache.get(own)
            if mine is not None:
                return mine
        q = self._value(f"blocks.{layer}.attn.q")
        k = self._value(f"blocks.{layer}.attn.k")
        group = q.shape[0] // k.shape[0]
        views = self._score_views(layer, q[head:head + 1], k[head // group:head // group + 1], slice(head, head + 1))
        with self._lock:  # one computation serves both views: a user flips between them
            self._remember(f"blocks.{layer}.attn.head{head}.scores", views["scores"][0])
            self._remember(f"blocks.{layer}.attn.head{head}.pattern", views["pattern"][0])
        return views[kind][0]

    # --- deriving ----------------------------------------------------------------------------
    def _layers_with(self, key_suffix: str) -> list[int]:
        return [layer for layer in range(self.config.n_layers) if f"blocks.{layer}.{key_suffix}" in self._arrays]

    def _derivable_keys(self) -> list[str]:
        keys = []
        with_qk = set(self._layers_with("attn.q")) & set(self._layers_with("attn.k"))
        rerun = set(self._layers_with("resid_pre")) if self._model is not None else set()
        for layer in range(self.config.n_layers):
            if layer in rerun:
                keys += [f"blocks.{layer}.{site}" for site in block_sites(self.config, layer)]
            elif layer in with_qk:
                keys += [f"blocks.{layer}.attn.{kind}" for kind in _score_kinds(self.config)]
        if self._model is not None and "resid_final" in self._arrays:
            keys.append("logits")
        return keys

    def _native(self, t: torch.Tensor) -> Any:
        """A computed tensor as this trace keeps values: as is (device-resident) or as a numpy array."""
        return t if self._on_device else _readonly(t.detach().cpu().numpy())

    def _score_views(self, layer: int, q: Any, k: Any, heads: slice = slice(None)) -> dict[str, Any]:
        """scores, pattern (and scores_precap when soft-capped) of ``heads`` of ``layer`` from their q and k,
        the forward pass's recipe (``model.layer_scores``) with the layer's own mask (sliding window),
        computed where q and k are."""
        import torch

        from explorer.core.model import attention_pattern, layer_scores, pattern_and_sink

        cfg, n, m = self.config, q.shape[-2], k.shape[-2]
        q, k = _as_t(q), _as_t(k)
        mask = _layer_mask(cfg, layer, n, m, str(q.device))
        with torch.inference_mode():
            scores, precap = layer_scores(cfg, q, k, mask, heads)
            if cfg.attn_sinks:  # gpt-oss: the pattern shares each row with the head's sink
                pattern, sink = pattern_and_sink(scores, self.sink_logits(layer, q.device)[heads])
                views = {"scores": scores, "pattern": pattern, "sink": sink}
            else:
                views = {"scores": scores, "pattern": attention_pattern(scores)}
            if precap is not None:
                views["scores_precap"] = precap
        return {name: self._native(t) for name, t in views.items()}

    def sink_logits(self, layer: int, device: Any = "cpu") -> torch.Tensor:
        """gpt-oss's sink logits of a layer [H]: each head's extra column in its softmax (weights: only a trace
        with its model derives patterns there)."""
        import torch

        from explorer.core.placement import weights_of

        stored = self._arrays.get(f"blocks.{layer}.attn.sinks")  # brought back with the trace (nnsight)
        if stored is not None:
            return torch.as_tensor(np.asarray(stored), dtype=torch.float32, device=device)
        if self._model is None:
            raise KeyError(f"deriving layer {layer}'s attention pattern needs the sinks' weights, which this trace "
                           "does not have (it was opened from a file)")
        attn = self._model.blocks[layer].attn
        with weights_of(attn):
            return attn.sinks.detach().to(device=device, dtype=torch.float32)

    def _remember(self, key: str, value: Any) -> Any:
        return self._cache.put(key, _readonly(value) if isinstance(value, np.ndarray) else value)

    def _derive(self, key: str) -> Any:
        match = _BLOCK_KEY.match(key)
        if match and match.group(2) == EFFECTIVE:  # a recurrent layer's weights over earlier tokens (core/mixers/)
            from explorer.core.mixers.effective import effective_attention

            return self._remember(key, effective_attention(self, int(match.group(1))))
        if match and match.group(2) in tuple(f"attn.{kind}" for kind in _SCORE_KINDS) and \
                f"blocks.{match.group(1)}.attn.q" in self._arrays and f"blocks.{match.group(1)}.attn.k" in self._arrays:
            layer = match.group(1)
            q, k = self._arrays[f"blocks.{layer}.attn.q"], self._arrays[f"blocks.{layer}.attn.k"]
            return self._remember(key, self._score_views(int(layer), q, k)[match.group(2).split(".")[1]])
        if match:
            return self._rerun_block(int(match.group(1)), wanted=key)
        if key == "logits":
            return self._remember(key, self._final_logits())
        raise TraceKeyError(self._missing(key))

    def _model_input(self, array: Any, layer: int | None = None) -> torch.Tensor:
        """``array`` as a [1, ...] tensor where block ``layer`` computes (the tail's device for None)."""
        from explorer.core.placement import block_device, execution_device, model_dtype, tail_device

        model = self._model
        device = (block_device(model, layer) if layer is not None else tail_device(model)) or execution_device(model)
        return _as_t(array).to(device=device, dtype=model_dtype(model))[None]

    def _rerun_block(self, layer: int, wanted: str) -> Any:
        import torch

        from explorer.core.model import layer_mask

        model = self._model
        x = self._model_input(self._arrays[f"blocks.{layer}.resid_pre"], layer)
        n = x.shape[1]
        mask = layer_mask(self.config, layer, n, n, x.device)
        recorder = Recorder(CaptureSpec(kinds=frozenset(KINDS) - {"scores", "pattern"}, layers=frozenset({layer}),
                                        dtype="float32", storage=self.storage))
        rec = recorder
        if self.interventions:  # the block ran with them: re-run it with them
            from explorer.core.interventions.apply import Intervener

            rec = Intervener([self.interventions], self.config.n_layers, recorder,
                             skip=frozenset({("resid_pre", layer)}))  # the stored input is already changed
        from explorer.core.per_layer import rerun_side

        side = rerun_side(self, layer, lambda a: self._model_input(a, layer))  # Gemma 4's per-layer input, shared K/V
        with torch.inference_mode():
            model.block_forward(layer, x, mask, model.rotary_for(n, x.device, layer), rec, side=side)
        for key, value in recorder.arrays.items():
            if key not in self._arrays and key != f"blocks.{layer}.resid_pre":
                self._remember(key, value)
        if wanted in recorder.arrays:
            return recorder.arrays[wanted]
        if wanted.split(".")[-1] in _SCORE_KINDS:  # scores or pattern: from the q and k just recomputed
            q, k = recorder.arrays[f"blocks.{layer}.attn.q"], recorder.arrays[f"blocks.{layer}.attn.k"]
            return self._remember(wanted, self._score_views(layer, q, k)[wanted.split(".")[-1]])
        raise TraceKeyError(self._missing(wanted))

    def _final_logits(self) -> Any:
        import torch

        with torch.inference_mode():
            logits = self._model.final_logits(self._model_input(self._arrays["resid_final"]))
        return to_stored(logits[0]) if self._on_device else to_numpy(logits[0])


def _as_t(value: Any) -> torch.Tensor:
    return as_tensor(value) if isinstance(value, np.ndarray) else value


@lru_cache(maxsize=4)
def _layer_mask(cfg: ModelConfig, layer: int, n: int, m: int, device: str = "cpu") -> torch.Tensor | None:
    """The same mask as the forward pass's, kept for the per-head views (a trace asks for it often)."""
    from explorer.core.model import layer_mask

    return layer_mask(cfg, layer, n, m, device)


_SCORE_KINDS = ("scores", "pattern", "scores_precap", "sink")  # what q and k give (with the layer's recipe)


def _score_kinds(cfg: ModelConfig) -> list[str]:
    """The views of a layer q and k give: scores and pattern, the scores before a soft cap, the sinks' weights."""
    return [kind for kind in _SCORE_KINDS if (kind != "scores_precap" or cfg.attn_softcap is not None)
            and (kind != "sink" or cfg.attn_sinks)]


def capture(model: Transformer, token_ids: Sequence[int], tokens: Sequence[str],
            spec: CaptureSpec | None = None, model_name: str = "",
            truncated_from: int | None = None, cancel: CancelLike = None,
            interventions: Sequence[Any] = (), host_logits: bool = True) -> tuple[Trace, np.ndarray | None]:
    """Run one forward pass over ``token_ids`` recording what ``spec`` asks for, with
    ``interventions`` (explorer/core/interventions/) applied if any.

    Returns the Trace and the logits [n, V] (float32) that the forward pass computed (None with
    ``host_logits=False``: nothing crosses to the host; the trace keeps them, within the memory budget,
    as its ``logits`` where it does not store them). ``cancel``
    is asked before every block; when it says so the pass stops there with
    ``explorer.core.cancel.Cancelled`` (a stale trace is abandoned, not finished).
    """
    import torch

    from explorer.core.placement import input_device, model_dtype

    spec = spec or CaptureSpec.default_for(input_device(model))

    ids = torch.as_tensor(list(token_ids), dtype=torch.long, device=input_device(model))[None]
    recorder = Recorder(spec, cancel)
    rec: Any = recorder
    extra: dict[str, Any] = {}
    if interventions:
        from explorer.core.interventions.apply import Intervener, resolve
        from explorer.core.interventions.spec import describe_all

        interventions = resolve(model, list(token_ids), interventions)
        rec = Intervener([interventions], model.cfg.n_layers, recorder)
        extra["interventions"] = describe_all(interventions)
    t0 = time.perf_counter()
    with torch.inference_mode():
        logits = model(ids, rec)
    seconds = time.perf_counter() - t0
    meta = TraceMeta(model_name=model_name, device=str(ids.device), dtype=str(model_dtype(model)).replace("torch.", ""),
                     forward_seconds=seconds, truncated_from=truncated_from, extra=extra)
    trace = Trace(token_ids, tokens, model.cfg, recorder.arrays, meta, model, tuple(interventions))
    if "logits" not in recorder.arrays and spec.dtype == "float32":  # what deriving them would compute
        trace._remember("logits", trace._native(logits[0].float()))
    return trace, (to_numpy(logits[0]) if host_logits else None)
