"""What an intervention is: a small immutable description, and the text form the CLI reads.

An :class:`Intervention` names

* **what** (``target``): ``"head"`` (one head's output z, before W_O), ``"neuron"`` (one FFN neuron's
  activation, ``mlp.post``), ``"attn"`` / ``"mlp"`` (a whole sublayer's output, what is added to the
  residual stream), ``"resid"`` (the residual stream entering block ``layer``; ``layer == L`` is the
  stream after the last block, before the final norm);
* **how** (``mode``): ``"zero"``; ``"mean"`` (the mean over the prompt's positions of the same
  activation in the run without interventions, see :func:`~explorer.core.interventions.apply.resolve`);
  ``"patch"`` (the value the same site had in another run, position by position);
* **where**: ``layer``, ``index`` (the head or the neuron), ``positions`` (None: every position).

``value`` holds the numbers a mode needs: for ``"patch"`` the other run's activation indexed by
position ([n_source, ...]); for ``"mean"`` once resolved, one vector (or number) used at every
position. Zero needs none. This module does not import torch: the UI holds these objects.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from explorer.core.errors import ExplorerError

TARGETS = ("head", "neuron", "attn", "mlp", "resid")
MODES = ("zero", "mean", "patch")


class InterventionError(ExplorerError):
    """An intervention that does not fit the model, or a spec that cannot be read."""


@dataclass(frozen=True, eq=False)
class Intervention:
    target: str
    layer: int
    index: int | None = None
    mode: str = "zero"
    positions: tuple[int, ...] | None = None
    value: Any = None  # numpy array or tensor; see the module docstring

    def __post_init__(self) -> None:
        if self.target not in TARGETS:
            raise InterventionError(f"unknown intervention target {self.target!r}; known: {', '.join(TARGETS)}")
        if self.mode not in MODES:
            raise InterventionError(f"unknown intervention mode {self.mode!r}; known: {', '.join(MODES)}")
        if (self.index is None) != (self.target not in ("head", "neuron")):
            raise InterventionError(f"a {self.target} intervention {'needs' if self.index is None else 'takes no'} index")
        if self.mode == "patch" and self.value is None:
            raise InterventionError("a patch needs the values of the run it patches from")
        if self.positions is not None:
            object.__setattr__(self, "positions", tuple(int(p) for p in self.positions))

    @property
    def key(self) -> tuple:
        """Identity without the values: two interventions with equal keys change the same numbers alike."""
        return (self.target, self.layer, self.index, self.mode, self.positions)

    @property
    def component(self) -> tuple:
        """What is changed (not how): the UI marks a component once whatever the mode."""
        return (self.target, self.layer, self.index, self.positions)

    @property
    def site(self) -> str:
        return SITES[self.target]

    def with_value(self, value: Any) -> Intervention:
        return replace(self, value=value)

    @property
    def label(self) -> str:
        """Short text: ``head 1.2 zero``, ``neuron 0:37 mean``, ``mlp 1 zero``, ``resid 2@5 patch``."""
        what = {"head": f"head {self.layer}.{self.index}", "neuron": f"neuron {self.layer}:{self.index}",
                "attn": f"attn {self.layer}", "mlp": f"mlp {self.layer}", "resid": f"resid {self.layer}"}[self.target]
        if self.positions is not None:
            what += "@" + ",".join(str(p) for p in self.positions)
        return f"{what} {self.mode}"

    def describe(self) -> dict[str, Any]:
        """JSON-able description (values left out) for exported traces and transcripts."""
        out: dict[str, Any] = {"target": self.target, "layer": self.layer, "mode": self.mode}
        if self.index is not None:
            out["index"] = self.index
        if self.positions is not None:
            out["positions"] = list(self.positions)
        return out


SITES = {"head": "attn.z", "neuron": "mlp.post", "attn": "attn.out", "mlp": "mlp.out", "resid": "resid_pre"}

_SPEC = re.compile(r"^(?:(?P<layer>\d+)\.(?P<head>\d+)|mlp(?P<nl>\d+):(?P<neuron>\d+)|(?P<sub>attn|mlp)(?P<sl>\d+))$")


def parse_spec(text: str, mode: str = "zero") -> Intervention:
    """``L.H`` head H of layer L; ``mlpL:N`` neuron N of layer L's FFN; ``attnL`` / ``mlpL`` a sublayer."""
    m = _SPEC.match(text.strip())
    if m is None:
        raise InterventionError(f"cannot read the intervention {text!r}: use L.H (a head), mlpL:N (a neuron), "
                                "attnL or mlpL (a whole sublayer)")
    if m["layer"] is not None:
        return Intervention("head", int(m["layer"]), int(m["head"]), mode)
    if m["neuron"] is not None:
        return Intervention("neuron", int(m["nl"]), int(m["neuron"]), mode)
    return Intervention(m["sub"], int(m["sl"]), None, mode)


def check(interventions: tuple[Intervention, ...] | list[Intervention], cfg: Any, n_tokens: int | None = None) -> None:
    """Raise :class:`InterventionError` for an intervention outside the model's shapes."""
    for iv in interventions:
        top = cfg.n_layers if iv.target == "resid" else cfg.n_layers - 1
        if not 0 <= iv.layer <= top:
            raise InterventionError(f"{iv.label}: layer {iv.layer} is outside 0-{top}")
        if iv.target in ("neuron", "mlp") and not cfg.has_ffn:
            raise InterventionError(f"{iv.label}: this model has no FFN sublayers")
        if iv.target == "head" and not 0 <= iv.index < cfg.n_heads:
            raise InterventionError(f"{iv.label}: head {iv.index} is outside 0-{cfg.n_heads - 1}")
        if iv.target == "neuron" and not 0 <= iv.index < cfg.d_ff:
            raise InterventionError(f"{iv.label}: neuron {iv.index} is outside 0-{cfg.d_ff - 1}")
        if n_tokens is not None and iv.positions is not None and any(not 0 <= p < n_tokens for p in iv.positions):
            raise InterventionError(f"{iv.label}: a position is outside 0-{n_tokens - 1}")


def describe_all(interventions: tuple[Intervention, ...] | list[Intervention]) -> list[dict[str, Any]]:
    return [iv.describe() for iv in interventions]
