"""Features as interventions: switch a feature off, clamp it or scale it, at its SAE's hook point.

An SAE writes ``x = x_hat + error`` with ``x_hat = sum_f a_f * d_f + b_dec`` (``d_f`` the decoder row).
Switching feature f off replaces x by ``x_hat - a_f * d_f + error = x - a_f * d_f``: only that
feature's term changes, and whatever the SAE does not explain (the error term) is kept, so the run
is the model's own except for the feature. Clamping to c adds ``(c - a_f) * d_f``; scaling by s adds
``(s - 1) * a_f * d_f``. ``a_f`` is the SAE's encoding of the activation arriving at the site, at
each position.

The interventions are :class:`~explorer.core.interventions.spec.Intervention` objects (target
``"feature"``, the SAE as ``value``) in the same list as heads and neurons, applied by the same
``Intervener``, which calls the SAE's ``edit`` (``sae.py``) at the hook point. Transcoders read one
site and write another: their features are not edited here.
"""

from __future__ import annotations

from collections.abc import Sequence

from explorer.core.features.hooks import WRITABLE, SAEError
from explorer.core.features.sae import SAE, check_feature
from explorer.core.interventions.spec import Intervention


def feature_intervention(sae: SAE, feature: int, mode: str = "zero", amount: float | None = None,
                         positions: Sequence[int] | None = None) -> Intervention:
    """Switch ``feature`` off (``"zero"``), set it to ``amount`` (``"clamp"``) or multiply it by
    ``amount`` (``"scale"``) at the SAE's hook point."""
    from explorer.core import arguments

    arguments.instance(sae, SAE, "sae", "an SAE (from open_sae)")
    check_feature(sae, feature)
    if sae.is_transcoder:
        raise SAEError(f"{sae.name}: a transcoder's features are read at one site and written at another; "
                       "switch an SAE's features instead")
    if sae.hook.site not in WRITABLE:
        raise SAEError(f"{sae.name}: the forward pass cannot be changed at {sae.hook.hook_name}")
    return Intervention("feature", sae.hook.block, int(feature), mode,
                        tuple(positions) if positions is not None else None, sae,
                        None if amount is None else float(amount), sae.name)
