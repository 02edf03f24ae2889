"""File > Open from Hugging Face cache…: the models already downloaded, picked by repository id.

The list comes from ``explorer.core.checkpoint.hub_cache.list_cached`` (the cache folder only;
nothing is downloaded), followed by the GGUF models of Ollama's store and LM Studio's models folder
(``local_stores.list_local``), by their model names. The chosen name is opened like any other source.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (QAbstractItemView, QDialog, QDialogButtonBox, QLabel, QTreeWidget, QTreeWidgetItem,
                               QVBoxLayout, QWidget)

from explorer.core.checkpoint.hub_cache import cache_dir, list_cached
from explorer.core.checkpoint.local_stores import list_local


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


class HubCacheDialog(QDialog):
    """A list of cached model repositories; ``chosen`` is the picked ``org/name`` (or None)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Open from Hugging Face cache")
        self.chosen: str | None = None
        layout = QVBoxLayout(self)
        root = cache_dir()
        self.models = list_cached(root)
        self.local = list_local()  # GGUF files of Ollama and LM Studio
        self.info = QLabel(self)
        self.info.setWordWrap(True)
        self.info.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.info.setText(f"Models already downloaded to {root}, then Ollama's and LM Studio's GGUF models "
                          "(nothing is downloaded here)." if self.models or self.local else
                          f"No model is cached in {root}. Get one with File ▸ Get a model… (or "
                          "<code>transformer-explorer get HuggingFaceTB/SmolLM2-135M-Instruct</code>), or set "
                          "HF_HUB_CACHE / HF_HOME to where your cache is.")
        layout.addWidget(self.info)
        self.tree = QTreeWidget(self)
        self.tree.setHeaderLabels(["model", "size", "snapshot or store"])
        self.tree.setRootIsDecorated(False)
        self.tree.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        for model in self.models:
            item = QTreeWidgetItem([model.repo_id, _size(model.size_bytes), model.path.name[:12]])
            item.setData(0, Qt.ItemDataRole.UserRole, model.repo_id)
            item.setToolTip(0, str(model.path) + ("" if model.has_config else "\n(no config.json: may not open)"))
            self.tree.addTopLevelItem(item)
        for local in self.local:
            item = QTreeWidgetItem([local.name, _size(local.size_bytes), local.store])
            item.setData(0, Qt.ItemDataRole.UserRole, local.name)
            item.setToolTip(0, f"{local.store} GGUF file: {local.path}")
            self.tree.addTopLevelItem(item)
        for column in range(3):
            self.tree.resizeColumnToContents(column)
        layout.addWidget(self.tree, 1)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Open | QDialogButtonBox.StandardButton.Cancel,
                                        parent=self)
        self.open_button = self.buttons.button(QDialogButtonBox.StandardButton.Open)
        self.open_button.setEnabled(False)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        layout.addWidget(self.buttons)
        self.tree.itemSelectionChanged.connect(self._on_selection)
        self.tree.itemDoubleClicked.connect(lambda *_: self.accept())
        if self.models or self.local:
            self.tree.setCurrentItem(self.tree.topLevelItem(0))
        self.resize(560, 360)

    def _on_selection(self) -> None:
        items = self.tree.selectedItems()
        self.chosen = items[0].data(0, Qt.ItemDataRole.UserRole) if items else None
        self.open_button.setEnabled(self.chosen is not None)
