"""A norm with its scale frozen at the value it had on this prompt: then it is a linear map.

LayerNorm is y = (x - mean x) / s * w + b with s = sqrt(var x + eps); RMSNorm is y = x / s * w with
s = sqrt(mean(x^2) + eps) (Gemma: times (1 + w)). The centring and the gain are linear; only the division by s
depends on x. Taking s as the forward pass computed it (``blocks.L.ln1.var``, ``.mean_square`` in the trace)
makes the norm linear in x, so a sum of parts goes through it part by part and the parts still add up exactly
to what the model computed, the bias b being a part of its own (``bias``).

``FrozenNorm.apply`` sends row vectors forward (without the bias); ``FrozenNorm.pull`` sends a *reader* (a matrix
A whose columns are read off the norm's output, [D, k]) back to the norm's input: ``apply(x) @ A == x @ pull(A)``.
Pulling readers back, rather than pushing every part forward, keeps the work at [D, k] per norm.
Pure numpy, float64.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from explorer.core.model import Norm
    from explorer.core.trace import Trace


def param(t: Any) -> np.ndarray:
    """A parameter (or any tensor) as a float64 numpy array on the host."""
    return t.detach().to("cpu").double().numpy()


@dataclass(frozen=True)
class FrozenNorm:
    scale: float                # s: what the norm divided by on this prompt, at this position
    centre: bool                # LayerNorm subtracts the mean first; RMSNorm does not
    gain: np.ndarray | None     # w (Gemma: 1 + w), [D]; None for a norm without weights
    bias: np.ndarray | None     # b, [D] (LayerNorm with a bias)
    what: str = ""              # the norm in words ("block 3's first LayerNorm at #5")

    def apply(self, x: np.ndarray) -> np.ndarray:
        """The norm of row vectors ``x`` [..., D] with the frozen scale, without the bias."""
        x = np.asarray(x, dtype=np.float64)
        if self.centre:
            x = x - x.mean(-1, keepdims=True)
        x = x / self.scale
        return x * self.gain if self.gain is not None else x

    def pull(self, reader: np.ndarray) -> np.ndarray:
        """The reader of the input that reads what ``reader`` [D, k] reads off the output (bias aside)."""
        m = np.asarray(reader, dtype=np.float64) / self.scale
        if self.gain is not None:
            m = self.gain[:, None] * m
        if self.centre:  # (I - 11^T / D) is symmetric: centring the columns of the reader
            m = m - m.mean(0, keepdims=True)
        return m

    def bias_read(self, reader: np.ndarray) -> np.ndarray:
        """What ``reader`` [D, k] reads off the norm's bias ([k] zeros without one)."""
        return self.bias @ reader if self.bias is not None else np.zeros(reader.shape[1])


def freeze(norm: Norm, scale: float, row: int | None = None, what: str = "") -> FrozenNorm:
    """``norm`` (explorer/core/model.py's ``Norm``) with its division fixed at ``scale``.
    ``row``: for a norm with one weight per head ([heads, 1, D]: StableLM's q/k norms), that head's."""
    from explorer.core.placement import weights_of

    with weights_of(norm):
        gain = norm.gain()
        gain = None if gain is None else param(gain)
        bias = None if norm.bias is None else param(norm.bias)
    if row is not None:
        gain = None if gain is None else (gain[row, 0] if gain.ndim == 3 else gain)
        bias = None if bias is None else (bias[row, 0] if bias.ndim == 3 else bias)
    return FrozenNorm(float(scale), norm.kind == "layernorm", gain, bias, what)


def frozen_at(trace: Trace, norm: Norm, site: str, position: int, row: int | None = None,
              what: str = "") -> FrozenNorm:
    """``norm`` frozen at the scale the forward pass recorded for it at ``position``: ``site`` is its trace
    name (``blocks.3.ln1``, ``ln_embed``, ``blocks.3.attn.q_norm``); ``row`` the head where the statistics are
    per head ([H, n])."""
    stat = trace[f"{site}.var" if norm.kind == "layernorm" else f"{site}.mean_square"]
    value = stat[row, position] if stat.ndim == 2 else stat[position]
    return freeze(norm, float(np.sqrt(float(value) + norm.eps)), row, what)
