"""The residual panel's sublayer bars on a Llama-1B-shaped model (16 layers, RMSNorm, gated FFN, the
last FFN writing the most, as in the real one): the legend never covers a bar, at laptop and
desktop dock sizes and after the dock is resized."""

from __future__ import annotations

import pytest
import torch
from PySide6.QtCore import QRectF
from PySide6.QtWidgets import QApplication

import explorer.ui  # noqa: F401  (binds pyqtgraph to PySide6)
from explorer.core.config import ModelConfig
from explorer.core.loaded import LoadedModel
from explorer.core.model import Transformer
from explorer.core.tokenize.base import gpt2_tokenizer
from explorer.ui.panels.residual import ResidualPanel
from explorer.ui.session.selection import Selection


@pytest.fixture(scope="module")
def llama_shaped():
    torch.manual_seed(3)
    cfg = ModelConfig(arch="llama", vocab_size=50257, n_ctx=64, d_model=32, n_layers=16, n_heads=4, d_head=8,
                      d_ff=64, n_kv_heads=2, positions="rotary", norm="rmsnorm", activation="silu", gated_ffn=True,
                      attn_bias=False, mlp_bias=False, tie_embeddings=False)
    model = Transformer(cfg).eval()
    with torch.no_grad():  # Llama's last FFN writes far more than the others: its bar is the tallest, rightmost
        for p in model.blocks[-1].mlp.parameters():
            p.mul_(6.0)
    loaded = LoadedModel(model=model, tokenizer=gpt2_tokenizer(), name="llama-shaped", source="test", arch="llama")
    return loaded, loaded.trace("The capital of France is Paris, and the capital of Italy is")


def bar_rects(panel, item):
    opts = item.opts
    vb = panel.bars_plot.getViewBox()
    out = []
    for x, h in zip(opts["x"], opts["height"]):
        rect = QRectF(float(x) - opts["width"] / 2, 0.0, float(opts["width"]), float(h)).normalized()
        out.append(vb.mapViewToScene(rect).boundingRect())
    return out


def check_no_overlap(panel, where):
    legend = panel.bars_legend.sceneBoundingRect()
    assert legend.height() > 5, where
    bars = bar_rects(panel, panel.attn_bars) + bar_rects(panel, panel.ffn_bars)
    assert len(bars) == 32, where
    for rect in bars:
        assert not legend.intersects(rect), f"{where}: the legend {legend} covers a bar {rect}"


@pytest.mark.parametrize("size", [(860, 520), (1240, 900), (700, 420)])
def test_the_legend_never_covers_a_bar(qtbot, llama_shaped, size):
    loaded, trace = llama_shaped
    selection = Selection()
    panel = ResidualPanel(selection)
    qtbot.addWidget(panel)
    panel.set_tokenizer(loaded.tokenizer)
    panel.prepare(trace, panel.snapshot())
    selection.clamp(trace.config.n_layers, trace.config.n_heads, trace.n_tokens)
    panel.set_trace(trace)  # drawn before it has a size (a tab behind another)
    panel.resize(*size)
    panel.show()
    qtbot.waitExposed(panel)
    for _ in range(3):
        QApplication.processEvents()
    for token in (trace.n_tokens - 1, 3):
        selection.set_token(token)
        qtbot.waitUntil(lambda: len(bar_rects(panel, panel.ffn_bars)) == 16)
        QApplication.processEvents()
        check_no_overlap(panel, f"token {token} at {size}")
    panel.resize(size[0], int(size[1] * 0.7))  # the dock made smaller: the legend takes a larger share
    qtbot.waitUntil(lambda: panel.bars_plot.getViewBox().height() > 0)
    for _ in range(3):
        QApplication.processEvents()
    check_no_overlap(panel, f"resized to {size[0]}x{int(size[1] * 0.7)}")
