"""Interventions: switch a head, a neuron or a sublayer off, patch one run into another.

spec.py       Intervention (what, how, where), parse_spec for the CLI's --ablate, labels
apply.py      Intervener (a ``rec`` that changes tensors in the forward pass), resolve (means), run
patching.py   activation patching between a clean and a corrupted prompt, batched and cancellable
attribution.py attribution patching: every cell's linear estimate from one forward and one backward pass
"""
