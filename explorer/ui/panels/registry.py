"""The panels, one record each: a ``PanelSpec`` says everything the app needs to know about a panel
besides its code (its id, where its class lives, its titles, its explanation page, its dock's name).

Everything that lists panels reads ``PANELS``: the window makes one dock per entry, in this order (tab
titles and the View menu from the titles), the offscreen renderer names its files by the id, the model
diagram and the tour link to a panel by its id (the same strings as ``explorer.core.diagram``), and
``Session.show_panel(id)`` raises it. A panel class finds its own record (``spec_of``): its ``title``
and ``explanation`` come from here.

Adding a panel: write its module (a ``Panel`` subclass, ``explorer/ui/panels/base.py``) and add one
``PanelSpec`` line to ``PANELS``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from importlib import import_module

from explorer.core.diagram.boxes import ATTN, EMBED, EXPERTS, MASKED, NEURONS, RESID, TOKENS

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PanelSpec:
    """One panel. ``id``: its name everywhere (diagram and tour links, ``show_panel``, file names);
    ``module``/``cls``: where its class is (imported only when the window is built); ``title``: the full
    title (dock, View menu, tooltip); ``short_title``: the tab's text, where the full one is too long for
    1280 px; ``explanation``: the stem of ``resources/explanations/<stem>.md`` ("What am I looking at?");
    ``dock``: the dock's object name, where saved layouts know it by another ("dock-<id>" otherwise);
    ``tour_title``: how the tour's "Show in …" button names it; ``docked``: one of the panel docks
    (False: the generation pane, which the window places on its own)."""

    id: str
    module: str
    cls: str
    title: str
    short_title: str = ""
    explanation: str = ""
    dock: str = ""
    tour_title: str = ""
    docked: bool = True

    @property
    def dock_name(self) -> str:
        return self.dock or f"dock-{self.id}"

    @property
    def tab_title(self) -> str:
        return self.short_title or self.title

    @property
    def link_title(self) -> str:
        return self.tour_title or self.title

    def load(self) -> type:
        """The panel's class (imports its module)."""
        return getattr(import_module(self.module), self.cls)


PANELS: tuple[PanelSpec, ...] = (
    PanelSpec(TOKENS, "explorer.ui.panels.tokenization", "TokenizationPanel", "Tokenization", "Tokens",
              "tokenization"),
    PanelSpec(EMBED, "explorer.ui.panels.embeddings", "EmbeddingsPanel", "Embeddings & positions", "Embeddings",
              "embeddings"),
    PanelSpec(ATTN, "explorer.ui.panels.attention", "AttentionPanel", "Attention", "Attention", "attention"),
    PanelSpec(NEURONS, "explorer.ui.panels.neurons", "NeuronsPanel", "FFN neurons", "Neurons", "ffn"),
    PanelSpec(EXPERTS, "explorer.ui.panels.experts", "ExpertsPanel", "Mixture of experts", "MoE", "experts",
              tour_title="Experts"),
    PanelSpec(RESID, "explorer.ui.panels.residual", "ResidualPanel", "Residual stream & logit lens", "Residual",
              "residual", tour_title="Residual stream"),
    PanelSpec("what_changed", "explorer.ui.panels.interventions", "WhatChangedPanel", "What changed",
              "What changed", "what_changed", dock="dock-interventions-what_changed"),
    PanelSpec("dla", "explorer.ui.panels.interventions", "DLAPanel", "Direct logit attribution", "Logit attribution",
              "dla", dock="dock-interventions-dla"),
    PanelSpec("patching", "explorer.ui.panels.interventions", "PatchingPanel", "Activation patching", "Patching",
              "patching", dock="dock-interventions-patching"),
    PanelSpec(MASKED, "explorer.ui.panels.masked", "MaskedTokensPanel", "Masked tokens", "Masked", "masked"),
    PanelSpec("journey", "explorer.ui.panels.journey", "JourneyPanel", "Journey of a generated token", "Journey",
              "journey"),
    PanelSpec("diagram", "explorer.ui.panels.diagram", "DiagramPanel", "Model diagram", "Flow", "diagram"),
    PanelSpec("features", "explorer.ui.panels.features", "FeaturesPanel", "Features (SAE)", "Features", "features"),
    PanelSpec("head_finder", "explorer.ui.panels.head_finder", "HeadFinderPanel", "Head finder (corpus scores)",
              "Head finder", "head_finder"),
    PanelSpec("qkov", "explorer.ui.panels.qkov", "QKOVPanel", "Why a head attends, what it moves (QK/OV)", "QK/OV",
              "qkov", tour_title="QK/OV"),
    PanelSpec("roles", "explorer.ui.panels.roles", "RolesPanel", "Conversation roles", "Roles", "roles"),
    PanelSpec("inside_attention", "explorer.ui.panels.inside_attention", "InsideAttentionPanel",
              "Inside attention: Q, K, V, W_O and the KV cache", "Inside attention", "inside_attention"),
)

# the generation pane: a panel the window docks on its right, on its own (the tour links to it)
GENERATION = PanelSpec("generation", "explorer.ui.generation", "GenerationPane", "Generation", explanation="generation",
                       dock="dock-pane", docked=False)

_ALL = (*PANELS, GENERATION)
_BY_ID = {spec.id: spec for spec in _ALL}
_OF_CLASS: dict[type, PanelSpec | None] = {}


def spec(panel_id: str) -> PanelSpec:
    """The record of the panel ``panel_id`` (KeyError for an unknown id)."""
    return _BY_ID[panel_id]


def find(panel_id: str) -> PanelSpec | None:
    return _BY_ID.get(panel_id)


def spec_of(cls: type) -> PanelSpec | None:
    """The record of a panel class (None for a class no record names: a test's own panel)."""
    if cls not in _OF_CLASS:
        _OF_CLASS[cls] = next((s for s in _ALL if s.cls == cls.__name__
                               and (cls.__module__ == s.module or cls.__module__.startswith(s.module + "."))), None)
    return _OF_CLASS[cls]


def available() -> list[tuple[PanelSpec, type]]:
    """Each record of ``PANELS`` with its class, each imported on its own: one that is missing or broken
    (still being written, say) is skipped with a log line instead of taking the window down."""
    found = []
    for entry in PANELS:
        try:
            found.append((entry, entry.load()))
        except Exception as exc:  # noqa: BLE001 - ImportError, AttributeError or a bug in the module
            log.warning("skipping panel %s (%s.%s): %s: %s", entry.id, entry.module, entry.cls,
                        type(exc).__name__, exc)
    return found


def panel_classes() -> list[type]:
    """The classes of ``PANELS``, in order (those that import)."""
    return [cls for _spec, cls in available()]
