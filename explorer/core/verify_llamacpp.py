"""How far our numbers are from what the user's runtime computes: the GGUF file run in llama.cpp beside ours.

With llama.cpp's Python binding installed (``llama-cpp-python``, the optional extra ``llamacpp``), ``verify``
and Help ▸ Verify also run the file in llama.cpp on the same token ids (``Llama(model_path, logits_all=True)``,
``eval(ids)``, its ``scores``: every position's logits, CPU only) and compare, per position: whether the most
likely next token is the same, the largest |Δ logit| and the KL divergence of llama.cpp's next-token
distribution from ours. They are not expected to be equal: llama.cpp multiplies the quantised weights with
activations it quantises too (to 8 bits, for most types) and sums in its own order, while ours are the exact
numbers of the dequantised weights in float32, as transformers computes them. Without the binding the
comparison is skipped with a note saying how to install it; nothing from the file runs but llama.cpp itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

INSTALL = "llama-cpp-python is not installed: pip install 'transformer-explorer[llamacpp]'"
EXPLAIN = ("llama.cpp computes with quantised activations (8-bit for most weight types) and its own summation "
           "order; ours are the dequantised weights' exact numbers in float32, as transformers computes them")


def available() -> bool:
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return False
    return True


@dataclass(frozen=True)
class RuntimeComparison:
    """Per position: top-1 agreement, max |Δ logit| and KL(llama.cpp || ours) of the next-token distributions."""

    ids: tuple[int, ...]
    top1_same: tuple[bool, ...]
    max_delta: tuple[float, ...]
    kl: tuple[float, ...]
    runtime: str = "llama.cpp"

    @property
    def agreement(self) -> float:
        return sum(self.top1_same) / max(1, len(self.top1_same))

    def summary(self) -> str:
        return (f"{self.runtime}: top-1 agrees at {sum(self.top1_same)} of {len(self.ids)} positions; "
                f"max |Δ logit| {max(self.max_delta):.3g}; KL up to {max(self.kl):.3g} nats ({EXPLAIN})")

    def lines(self) -> list[str]:
        rows = [f"{self.runtime} pos {i:<4} top-1 {'same' if same else 'DIFFERS'}  max |Δ logit| {d:.3e}  KL {k:.3e}"
                for i, (same, d, k) in enumerate(zip(self.top1_same, self.max_delta, self.kl))]
        return [self.summary(), *rows]


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    m = x.max(-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))


def compare_logits(ours: np.ndarray, theirs: np.ndarray, ids: list[int], runtime: str = "llama.cpp") -> RuntimeComparison:
    """Both models' logits ``[n, V]`` (the runtime's vocabulary may be padded: the common columns) compared."""
    v = min(ours.shape[-1], theirs.shape[-1])
    a, b = np.asarray(ours, dtype=np.float64)[:, :v], np.asarray(theirs, dtype=np.float64)[:, :v]
    la, lb = _log_softmax(a), _log_softmax(b)
    kl = (np.exp(lb) * (lb - la)).sum(-1)
    same = a.argmax(-1) == b.argmax(-1)
    return RuntimeComparison(tuple(int(i) for i in ids), tuple(bool(s) for s in same),
                             tuple(float(d) for d in np.abs(a - b).max(-1)), tuple(float(max(k, 0.0)) for k in kl),
                             runtime)


# The child that runs llama.cpp: llama.cpp is native code reading a user's file, and a crash there (a segfault
# on a malformed file, a CPU path the machine lacks) must end one comparison, never the app.
_CHILD = r"""
import json, sys
import numpy as np
import llama_cpp
a = json.loads(sys.stdin.read())
n = max(len(a["ids"]), 8)
llm = llama_cpp.Llama(model_path=a["path"], n_ctx=n, n_batch=n, logits_all=True, n_gpu_layers=0, verbose=False,
                      n_threads=a["threads"])
llm.reset()
llm.eval(list(a["ids"]))
np.save(a["out"], np.array(llm.scores[:len(a["ids"])], dtype=np.float32))
"""
TIMEOUT_S = 1800.0


def llamacpp_logits(path: Path, ids: list[int], threads: int | None = None, timeout: float = TIMEOUT_S) -> np.ndarray:
    """llama.cpp's logits at every position of ``ids`` (``Llama.eval`` with ``logits_all``; CPU, no GPU layers),
    computed in a child process (``python -I``): a crash or a hang there is a ``RuntimeError`` here."""
    import json
    import subprocess
    import sys
    import tempfile

    if getattr(sys, "frozen", False):
        raise RuntimeError("this build of the app cannot start a Python child process for llama.cpp")
    with tempfile.TemporaryDirectory(prefix="explorer-llamacpp-") as folder:
        out = Path(folder) / "logits.npy"
        request = json.dumps({"path": str(path), "ids": [int(i) for i in ids], "threads": threads, "out": str(out)})
        try:
            done = subprocess.run([sys.executable, "-I", "-c", _CHILD], input=request, capture_output=True,
                                  text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"llama.cpp did not finish within {timeout:.0f} s") from None
        if done.returncode < 0:
            raise RuntimeError(f"llama.cpp crashed (signal {-done.returncode})")
        if done.returncode != 0 or not out.is_file():
            lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
            raise RuntimeError(lines[-1] if lines else f"exit status {done.returncode}")
        return np.load(out, allow_pickle=False)


def compare_with_llamacpp(path: Path, ours: np.ndarray, ids: list[int]) -> RuntimeComparison | str:
    """The comparison, or one line saying why it was not run (the binding missing, or llama.cpp refusing the file)."""
    if not available():
        return f"llama.cpp comparison not run: {INSTALL}"
    try:
        theirs = llamacpp_logits(path, ids)
    except Exception as exc:  # noqa: BLE001 - whatever llama.cpp says becomes one line
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return f"llama.cpp comparison not run: llama.cpp could not run {path.name} ({first:.200})"
    return compare_logits(ours, theirs, ids)
