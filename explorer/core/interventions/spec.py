"""What an intervention is: a small immutable description, and the text form the CLI reads.

An :class:`Intervention` names

* **what** (``target``): ``"head"`` (one head's output z, before W_O), ``"neuron"`` (one FFN neuron's
  activation, ``mlp.post``), ``"attn"`` / ``"mlp"`` (a whole sublayer's output, what is added to the
  residual stream), ``"resid"`` (the residual stream entering block ``layer``; ``layer == L`` is the
  stream after the last block, before the final norm);
  ``"feature"`` (one learned feature of an SAE at the SAE's hook point; ``value`` is the SAE, see
  ``core/features/edits.py``), ``"steer"`` (``amount`` times the vector ``value`` added to the residual
  stream entering block ``layer``, at every position it names); ``"expert"`` (expert ``index`` of the
  mixture of experts in block ``layer``: what its router makes of it, for the tokens ``positions`` names);
* **how** (``mode``): ``"zero"``; ``"mean"`` (the mean over the prompt's positions of the same
  activation in the run without interventions, see :func:`~explorer.core.interventions.apply.resolve`);
  ``"patch"`` (the value the same site had in another run, position by position); for a feature
  ``"zero"`` (off), ``"clamp"`` (its activation set to ``amount``) or ``"scale"`` (multiplied by
  ``amount``); a steer is ``"add"``; an expert ``"zero"`` (switched off: its router logit -inf, so the
  token's experts are drawn from the rest and their weights renormalise as the family's do), ``"force"``
  (into the token's top-k, with the weight the family gives it) or ``"scale"`` (its router logit times
  ``amount``);
* **where**: ``layer``, ``index`` (the head or the neuron), ``positions`` (None: every position).

``value`` holds the numbers a mode needs: for ``"patch"`` the other run's activation indexed by
position ([n_source, ...]); for ``"mean"`` once resolved, one vector (or number) used at every
position. Zero needs none. This module does not import torch: the UI holds these objects.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from explorer.core.errors import ExplorerError

TARGETS = ("head", "neuron", "attn", "mlp", "resid", "feature", "steer", "expert")
MODES = ("zero", "mean", "patch", "clamp", "scale", "add", "force")
_INDEXED = ("head", "neuron", "feature", "expert")
_MODES_OF = {"feature": ("zero", "clamp", "scale"), "steer": ("add",), "expert": ("zero", "force", "scale")}


class InterventionError(ExplorerError):
    """An intervention that does not fit the model, or a spec that cannot be read."""


@dataclass(frozen=True, eq=False)
class Intervention:
    target: str
    layer: int
    index: int | None = None
    mode: str = "zero"
    positions: tuple[int, ...] | None = None
    value: Any = None  # numpy array or tensor (an SAE for a feature); see the module docstring
    amount: float | None = None  # a feature's clamp value or scale factor; a steer's alpha
    source: str | None = None    # what a feature or steer comes from (the SAE's name, the vector's), for labels

    def __post_init__(self) -> None:
        if self.target not in TARGETS:
            raise InterventionError(f"unknown intervention target {self.target!r}; known: {', '.join(TARGETS)}")
        if self.mode not in MODES:
            raise InterventionError(f"unknown intervention mode {self.mode!r}; known: {', '.join(MODES)}")
        if self.mode not in _MODES_OF.get(self.target, ("zero", "mean", "patch")):
            raise InterventionError(f"a {self.target} intervention cannot be {self.mode!r}")
        if self.mode in ("clamp", "scale", "add") and self.amount is None:
            raise InterventionError(f"a {self.mode} needs an amount")
        if self.target in ("feature", "steer") and self.value is None:
            what = "SAE" if self.target == "feature" else "vector"
            raise InterventionError(f"a {self.target} intervention needs its {what}")
        if (self.index is None) != (self.target not in _INDEXED):
            raise InterventionError(f"a {self.target} intervention {'needs' if self.index is None else 'takes no'} index")
        if self.mode == "patch" and self.value is None:
            raise InterventionError("a patch needs the values of the run it patches from")
        if self.positions is not None:
            object.__setattr__(self, "positions", tuple(int(p) for p in self.positions))

    @property
    def key(self) -> tuple:
        """Identity without the values: two interventions with equal keys change the same numbers alike."""
        base = (self.target, self.layer, self.index, self.mode, self.positions)
        return base + (self.amount, self.source) if self.target in _MODES_OF else base  # (an expert's scale)

    @property
    def component(self) -> tuple:
        """What is changed (not how): the UI marks a component once whatever the mode."""
        base = (self.target, self.layer, self.index, self.positions)
        return base + (self.source,) if self.target in ("feature", "steer") else base

    @property
    def site(self) -> str:
        if self.target == "feature":
            return self.value.hook.site
        return SITES[self.target]

    def with_value(self, value: Any) -> Intervention:
        return replace(self, value=value)

    @property
    def label(self) -> str:
        """Short text: ``head 1.2 zero``, ``neuron 0:37 mean``, ``mlp 1 zero``, ``resid 2@5 patch``."""
        what = {"head": f"head {self.layer}.{self.index}", "neuron": f"neuron {self.layer}:{self.index}",
                "attn": f"attn {self.layer}", "mlp": f"mlp {self.layer}", "resid": f"resid {self.layer}",
                "feature": f"feature {self.index} ({self.source})", "steer": f"steer {self.layer} ({self.source})",
                "expert": f"expert {self.layer}:{self.index}"}[self.target]
        if self.positions is not None:
            what += "@" + ",".join(str(p) for p in self.positions)
        how = "off" if self.mode == "zero" and self.target in ("feature", "expert") else self.mode
        if (self.target, self.mode) == ("expert", "scale"):
            return f"{what} logit x{self.amount:g}"
        if self.amount is not None and self.mode in ("clamp", "scale", "add"):
            how = {"clamp": f"clamp {self.amount:g}", "scale": f"x{self.amount:g}",
                   "add": f"{self.amount:+g}"}[self.mode]
        return f"{what} {how}"

    def describe(self) -> dict[str, Any]:
        """JSON-able description (values left out) for exported traces and transcripts."""
        out: dict[str, Any] = {"target": self.target, "layer": self.layer, "mode": self.mode}
        if self.index is not None:
            out["index"] = self.index
        if self.positions is not None:
            out["positions"] = list(self.positions)
        if self.amount is not None:
            out["amount"] = float(self.amount)
        if self.source is not None:
            out["source"] = self.source
        return out


SITES = {"head": "attn.z", "neuron": "mlp.post", "attn": "attn.out", "mlp": "mlp.out", "resid": "resid_pre",
         "steer": "resid_pre", "expert": "moe.router_logits"}  # an expert: also moe.choice (apply.sites_of)

_SPEC = re.compile(r"^(?:(?P<layer>\d+)\.(?P<head>\d+)|mlp(?P<nl>\d+):(?P<neuron>\d+)|(?P<sub>attn|mlp)(?P<sl>\d+))$")
_EXPERT = re.compile(r"^expert(?P<layer>\d+):(?P<expert>\d+)(?::(?P<how>off|force|x(?P<factor>[-+0-9.eE]+)))?"
                     r"(?:@(?P<positions>\d+(?:,\d+)*))?$")
SPEC_HELP = ("L.H (a head), mlpL:N (a neuron), attnL or mlpL (a whole sublayer), expertL:E (expert E of layer L "
             "off; expertL:E:force into the top-k, expertL:E:x0.5 its router logit scaled; @P,Q at those tokens only)")


def parse_spec(text: str, mode: str = "zero") -> Intervention:
    """``L.H`` head H of layer L; ``mlpL:N`` neuron N of layer L's FFN; ``attnL`` / ``mlpL`` a sublayer;
    ``expertL:E[:off|:force|:xF][@P,Q]`` expert E of layer L's mixture of experts."""
    e = _EXPERT.match(text.strip())
    if e is not None:
        how = e["how"] or "off"
        if mode != "zero":
            raise InterventionError(f"{text!r}: an expert is switched off, forced or scaled, not {mode}-ablated")
        positions = tuple(int(p) for p in e["positions"].split(",")) if e["positions"] else None
        if how.startswith("x"):
            try:
                amount = float(e["factor"])
            except ValueError:
                raise InterventionError(f"cannot read the factor in {text!r} (write e.g. expert3:5:x0.5)") from None
            return Intervention("expert", int(e["layer"]), int(e["expert"]), "scale", positions, amount=amount)
        return Intervention("expert", int(e["layer"]), int(e["expert"]), "zero" if how == "off" else "force", positions)
    m = _SPEC.match(text.strip())
    if m is None:
        raise InterventionError(f"cannot read the intervention {text!r}: use {SPEC_HELP}")
    if m["layer"] is not None:
        return Intervention("head", int(m["layer"]), int(m["head"]), mode)
    if m["neuron"] is not None:
        return Intervention("neuron", int(m["nl"]), int(m["neuron"]), mode)
    return Intervention(m["sub"], int(m["sl"]), None, mode)


def check(interventions: tuple[Intervention, ...] | list[Intervention], cfg: Any, n_tokens: int | None = None) -> None:
    """Raise :class:`InterventionError` for an intervention outside the model's shapes."""
    for iv in interventions:
        top = cfg.n_layers if iv.target in ("resid", "steer", "feature") else cfg.n_layers - 1
        if not 0 <= iv.layer <= top:
            raise InterventionError(f"{iv.label}: layer {iv.layer} is outside 0-{top}")
        if iv.target in ("neuron", "mlp") and not cfg.has_ffn:
            raise InterventionError(f"{iv.label}: this model has no FFN sublayers")
        if iv.target == "head" and not 0 <= iv.index < cfg.n_heads:
            raise InterventionError(f"{iv.label}: head {iv.index} is outside 0-{cfg.n_heads - 1}")
        if iv.target in ("neuron", "mlp") and iv.layer in getattr(cfg, "moe_layers", ()):
            if iv.target == "neuron":
                raise InterventionError(f"{iv.label}: layer {iv.layer} is a mixture of experts (its neurons are its "
                                        f"experts'; switch an expert off instead: expert{iv.layer}:E)")
        elif iv.target == "neuron" and not 0 <= iv.index < cfg.d_ff:
            raise InterventionError(f"{iv.label}: neuron {iv.index} is outside 0-{cfg.d_ff - 1}")
        if iv.target == "expert" and iv.layer not in getattr(cfg, "moe_layers", ()):
            raise InterventionError(f"{iv.label}: layer {iv.layer} has no experts")
        if iv.target == "expert" and not 0 <= iv.index < cfg.n_experts:
            raise InterventionError(f"{iv.label}: expert {iv.index} is outside 0-{cfg.n_experts - 1}")
        if iv.target == "feature" and not 0 <= iv.index < iv.value.d_sae:
            raise InterventionError(f"{iv.label}: feature {iv.index} is outside 0-{iv.value.d_sae - 1}")
        if iv.target == "steer" and np.shape(iv.value) != (cfg.d_model,):
            raise InterventionError(f"{iv.label}: the vector has shape {np.shape(iv.value)}, the residual stream "
                                    f"is {cfg.d_model} wide")
        if n_tokens is not None and iv.positions is not None and any(not 0 <= p < n_tokens for p in iv.positions):
            raise InterventionError(f"{iv.label}: a position is outside 0-{n_tokens - 1}")


def describe_all(interventions: tuple[Intervention, ...] | list[Intervention]) -> list[dict[str, Any]]:
    return [iv.describe() for iv in interventions]
