"""Checking a mixture-of-experts family against transformers on a tiny random model.

``check_moe`` runs ``decoder_reference.check`` (logits, every pattern stored and derived, the residual stream,
greedy tokens with and without the KV cache) and then the routing: every MoE layer's router logits, each
token's chosen experts (as a set: some families choose unsorted) and each chosen expert's weight, read from
the reference's own router module with a forward hook. Tolerances: logits 1e-4, router logits and attention
patterns 1e-5.
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch
from decoder_reference import IDS, check

from explorer.core.trace import CaptureSpec

ROUTER_TOL = 1e-5
PATTERN_TOL = 1e-5
EAGER = dict(attn_implementation="eager", experts_implementation="eager")


def routers(model) -> list[torch.nn.Module]:
    """The reference's router modules, one per MoE layer, in layer order."""
    found = [m for name, m in model.named_modules()
             if type(m).__name__.endswith(("Router", "TopkRouter", "TopKRouter", "TopKGating"))]
    return found


@contextlib.contextmanager
def captured_routing(model):
    """Each router call's (logits [n, E], chosen experts [n, k], their weights [n, k]), in layer order."""
    calls: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    def hook(module, inputs, output):
        if len(output) == 2:                       # Llama 4: (scores over every expert, logits)
            scores, logits = output
            k = module.top_k
            chosen = logits.topk(k, dim=-1).indices
            weights = scores.gather(-1, chosen)
        else:                                      # (logits, weights, chosen experts)
            logits, weights, chosen = output
        calls.append((logits.detach().float().reshape(-1, logits.shape[-1]).numpy(),
                      chosen.detach().reshape(-1, chosen.shape[-1]).numpy(),
                      weights.detach().float().reshape(-1, weights.shape[-1]).numpy()))

    handles = [r.register_forward_hook(hook) for r in routers(model)]
    try:
        yield calls
    finally:
        for h in handles:
            h.remove()


def check_routing(loaded, model, ids=IDS) -> dict[str, float]:
    cfg = loaded.config
    with captured_routing(model) as calls, torch.no_grad():
        model(torch.tensor([ids]))
    assert len(calls) == len(cfg.moe_layers) > 0
    trace = loaded.trace_ids(ids, CaptureSpec.full())
    diffs = {"router logits": 0.0, "weights": 0.0}
    for layer, (logits, chosen, weights) in zip(cfg.moe_layers, calls):
        ours = trace[f"blocks.{layer}.moe.router_logits"]
        diffs["router logits"] = max(diffs["router logits"], float(np.abs(ours - logits).max()))
        experts, ours_w = trace[f"blocks.{layer}.moe.experts"], trace[f"blocks.{layer}.moe.weights"]
        for token in range(len(ids)):
            assert set(experts[token].tolist()) == set(chosen[token].tolist()), (layer, token)
            theirs = dict(zip(chosen[token].tolist(), weights[token].tolist()))
            mine = dict(zip(experts[token].tolist(), ours_w[token].tolist()))
            diffs["weights"] = max(diffs["weights"], max(abs(mine[e] - theirs[e]) for e in theirs))
    assert diffs["router logits"] <= ROUTER_TOL and diffs["weights"] <= ROUTER_TOL, diffs
    return diffs


def check_moe(loaded, model, ids=IDS, **kwargs) -> dict[str, float]:
    """Everything decoder_reference.check compares, the patterns at 1e-5, and the routing."""
    diffs = check(loaded, model, ids, **kwargs)
    assert diffs["pattern"] <= PATTERN_TOL and diffs["derived pattern"] <= PATTERN_TOL, diffs
    diffs.update(check_routing(loaded, model, ids))
    return diffs
