"""GUI fixtures: small random models saved as native checkpoints (GPT-2's tokenizer), a
temporary QSettings, and a main window that has loaded one of them."""

from __future__ import annotations

import gc

import pytest
import torch
from PySide6.QtCore import QSettings, QThreadPool

import explorer.ui  # noqa: F401  (binds pyqtgraph to PySide6 before any test imports it)
from explorer.core.checkpoint import load_checkpoint, save_native
from explorer.core.config import ModelConfig
from explorer.core.model import Transformer
from explorer.core.tokenize.base import gpt2_tokenizer


def _save_random(path, name: str, n_layers: int, n_heads: int, seed: int):
    torch.manual_seed(seed)
    cfg = ModelConfig(vocab_size=50257, n_ctx=64, d_model=32, n_layers=n_layers, n_heads=n_heads,
                      d_head=32 // n_heads, d_ff=64)
    save_native(Transformer(cfg).eval(), gpt2_tokenizer(), path, name=name)
    return path


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
    """A 2-layer, 2-head random model with GPT-2's vocabulary and a 64-token context."""
    return _save_random(tmp_path_factory.mktemp("ckpt") / "tiny-a", "tiny-a", 2, 2, seed=0)


@pytest.fixture(scope="session")
def other_checkpoint(tmp_path_factory):
    """A second, differently shaped model (3 layers, 4 heads)."""
    return _save_random(tmp_path_factory.mktemp("ckpt") / "tiny-b", "tiny-b", 3, 4, seed=1)


@pytest.fixture
def bad_checkpoint(tmp_path):
    path = tmp_path / "broken"
    path.mkdir()
    (path / "config.json").write_text("{ this is not json ]")
    return path


@pytest.fixture(scope="session")
def tiny_loaded(tiny_checkpoint):
    return load_checkpoint(tiny_checkpoint, device="cpu")


@pytest.fixture(scope="session")
def worked_loaded():
    return load_checkpoint("worked-example", device="cpu")


@pytest.fixture
def settings(tmp_path):
    """A QSettings in a temporary INI file, so tests never touch the user's settings."""
    store = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    yield store
    store.sync()


@pytest.fixture(autouse=True)
def _no_blocking_message_boxes(monkeypatch):
    """A modal QMessageBox that a test did not stub would wait for a click forever (offscreen, no one
    clicks): fail the test at once, naming the dialog. A test that expects one stubs it itself."""
    from PySide6.QtWidgets import QMessageBox

    def unexpected(kind):
        def fail(parent, title, text, *args, **kwargs):
            raise AssertionError(f"unexpected modal QMessageBox.{kind}: {title!r}: {text!r}")
        return fail

    for kind in ("question", "warning", "information", "critical"):
        monkeypatch.setattr(QMessageBox, kind, unexpected(kind))


@pytest.fixture(autouse=True)
def _no_dangling_workers():
    """Workers left running when a test ends make later tests flaky: wait for them."""
    yield
    assert QThreadPool.globalInstance().waitForDone(60_000), "a background worker is still running"
    gc.collect()  # widgets of this test freed on the GUI thread, never later in a worker (see make_window)


@pytest.fixture
def make_window(qtbot, settings):
    """Build main windows on the temporary settings (closed at the end of the test)."""
    from explorer.ui.window.main_window import MainWindow

    windows = []

    def make(**kwargs):
        window = MainWindow(settings=kwargs.pop("settings", settings), device="cpu", **kwargs)
        qtbot.addWidget(window)
        window.resize(1200, 800)
        window.show()
        windows.append(window)
        return window

    yield make
    for window in windows:
        window.close()
    windows.clear()
    # Free the closed windows' widgets here, on the GUI thread: left to the cyclic garbage collector,
    # they are freed in whichever thread next allocates, e.g. a later test's model-loading worker,
    # and destroying widgets there deadlocks Qt (seen: ~QMenu in a worker against the GUI thread).
    gc.collect()


@pytest.fixture
def window(qtbot, make_window, tiny_checkpoint):
    """A shown main window with ``tiny_checkpoint`` loaded and its first trace applied."""
    window = make_window()
    with qtbot.waitSignal(window.trace_applied, timeout=30_000):
        window.open_checkpoint(str(tiny_checkpoint))
    return window



@pytest.fixture(scope="session")
def thirty_layers():
    """A 30-layer model (SmolLM2-135M's depth) with GPT-2's vocabulary, random, room for 2,048 tokens."""
    from explorer.core.loaded import LoadedModel
    from explorer.core.tokenize.base import gpt2_tokenizer

    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=50257, n_ctx=2048, d_model=32, n_layers=30, n_heads=2, d_head=16, d_ff=64)
    return LoadedModel(Transformer(cfg).eval(), gpt2_tokenizer(), "thirty-layers", "test", "gpt2")


LAPTOP = (1203, 752)  # the window's first size on a 1280x800 screen


@pytest.fixture
def laptop_window(qtbot, make_window, thirty_layers):
    """The window at its size on a 1280x800 screen with the 30-layer model open and traced."""
    from explorer.ui.session.workers import LoadRequest, LoadResult

    window = make_window()
    window.resize(*LAPTOP)
    window.session.use_model(LoadResult(LoadRequest(None, "cpu"), thirty_layers, None))
    qtbot.waitUntil(lambda: window.trace is not None and window.presenter.is_idle(), timeout=60_000)
    return window
