"""A second engine: traces through nnsight, on this machine or on an NDIF server (core/remote/backend.py).

nnsight is an optional extra (``pip install 'transformer-explorer[remote]'``); nothing here imports it
until a trace is asked for. The per-family tables (``tables.py``) say where each Trace key lives in a
``transformers`` model.
"""

from __future__ import annotations

from explorer.core.errors import ExplorerError

INSTALL_HINT = "tracing through nnsight (locally or on NDIF) needs nnsight: pip install 'transformer-explorer[remote]'"


def require_nnsight():
    """The nnsight package, or one line saying how to install it."""
    try:
        import nnsight
    except ImportError:
        raise ExplorerError(INSTALL_HINT) from None
    return nnsight
