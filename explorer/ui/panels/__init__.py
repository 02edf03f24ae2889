"""The panel registry: the main window makes one dock per entry, in this order."""

from __future__ import annotations

from importlib import import_module

# (module, class) pairs; imported lazily so that importing the registry stays cheap.
_REGISTRY = [
    ("explorer.ui.panels.tokenization", "TokenizationPanel"),
    ("explorer.ui.panels.embeddings", "EmbeddingsPanel"),
    ("explorer.ui.panels.attention", "AttentionPanel"),
    ("explorer.ui.panels.neurons", "NeuronsPanel"),
    ("explorer.ui.panels.residual", "ResidualPanel"),
    ("explorer.ui.panels.interventions", "WhatChangedPanel"),
    ("explorer.ui.panels.interventions", "DLAPanel"),
    ("explorer.ui.panels.interventions", "PatchingPanel"),
    ("explorer.ui.panels.masked", "MaskedTokensPanel"),
    ("explorer.ui.panels.journey", "JourneyPanel"),
    ("explorer.ui.panels.diagram", "DiagramPanel"),
    ("explorer.ui.panels.features", "FeaturesPanel"),
]


def panel_classes() -> list[type]:
    return [getattr(import_module(module), name) for module, name in _REGISTRY]
