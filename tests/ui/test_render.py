"""Offscreen rendering of every panel and of one attention map per head; ``export --plots``."""

from __future__ import annotations

import numpy as np
from PySide6.QtGui import QImage

import explorer.ui  # noqa: F401
from explorer.cli import main
from explorer.core.checkpoint import load_checkpoint
from explorer.ui.offscreen import export_attention_maps, render_plots

PROMPT = "The quick brown fox jumps over the lazy dog while the cat sleeps on a mat"
EMBEDDING_PLOTS = {"embeddings_token_embeddings.png", "embeddings_embedding_sum.png",
                   "embeddings_cosine_similarity.png", "embeddings_nearest_neighbours.png"}


def _check_pngs(paths):
    for path in paths:
        image = QImage(str(path))
        assert path.is_file() and not image.isNull(), path
        assert image.width() > 50 and image.height() > 50, path


def _render_and_check(loaded, trace, out):
    pngs = render_plots(loaded, trace, out)
    _check_pngs(pngs)
    assert all(p.suffix == ".png" for p in pngs)
    heads = sorted(p.name for p in (out / "attention").glob("*.png"))
    cfg = trace.config
    assert heads == sorted(f"L{l}_H{h}.png" for l in range(cfg.n_layers) for h in range(cfg.n_heads))
    assert len(list((out / "attention").glob("*.npy"))) == len(heads) == len(list((out / "attention").glob("*.csv")))
    return {p.name for p in pngs}


def test_render_plots_worked_example(qapp, tmp_path):
    loaded = load_checkpoint("worked-example", device="cpu")
    names = _render_and_check(loaded, loaded.trace("Today is sunday saturday"), tmp_path)
    assert EMBEDDING_PLOTS <= names
    assert "embeddings_positions.png" not in names  # no positions: a note, not a heatmap


def test_render_plots_tiny_gpt2(qapp, tiny_gpt2, tmp_path):
    loaded, _ = tiny_gpt2
    trace = loaded.trace(PROMPT)
    assert trace.n_tokens == 16
    names = _render_and_check(loaded, trace, tmp_path)
    assert EMBEDDING_PLOTS | {"embeddings_positions.png"} <= names
    assert len([n for n in names if n.startswith("L")]) == 3 * 4


def test_attention_maps_of_chosen_layers(qapp, tiny_gpt2, tmp_path):
    loaded, _ = tiny_gpt2
    trace = loaded.trace("one two three")
    files = export_attention_maps(trace, tmp_path, layers=[1])
    assert sorted(p.name for p in files if p.suffix == ".png") == [f"L1_H{h}.png" for h in range(4)]
    _check_pngs([p for p in files if p.suffix == ".png"])
    np.testing.assert_allclose(np.load(tmp_path / "L1_H2.npy"), trace.head(1, 2, "pattern"))


def test_cli_export_plots(qapp, tiny_gpt2_dir, tmp_path, capsys):
    code = main(["export", "--checkpoint", str(tiny_gpt2_dir), "--prompt", PROMPT, "--out", str(tmp_path),
                 "--plots", "--device", "cpu"])
    assert code == 0
    assert (tmp_path / "trace.npz").is_file()
    plots = tmp_path / "plots"
    _check_pngs(sorted(plots.glob("*.png")) + sorted((plots / "attention").glob("*.png")))
    assert EMBEDDING_PLOTS <= {p.name for p in plots.glob("*.png")}
    assert len(list((plots / "attention").glob("*.png"))) == 12
    assert "plot images" in capsys.readouterr().out


def test_export_plots_waits_for_every_background_view_and_skips_empty_ones(qapp, tiny_gpt2, tmp_path,
                                                                           monkeypatch):
    """As on a GPT-2-small-sized model: the lens and the all-heads views are computed in the background
    (forced here); no image is written while any is still computing, nothing without content is
    drawn (no intervention: What changed and patching have nothing), names are <panel>_<view>.png."""
    from explorer.ui.export import images
    from explorer.ui.panels.attention import views
    from explorer.ui.panels.residual import lens
    from explorer.ui.session.progressive import lane

    monkeypatch.setattr(lens, "LENS_NOW_MACS", 0)
    monkeypatch.setattr(views, "ALL_HEADS_NOW_MACS", 0)
    pending_at_write = []
    real = images.export_png

    def recording(item, path, *args, **kwargs):
        pending_at_write.append((path.name, len(lane().pending())))
        return real(item, path, *args, **kwargs)

    monkeypatch.setattr(images, "export_png", recording)
    loaded, _ = tiny_gpt2
    names = _render_and_check(loaded, loaded.trace(PROMPT), tmp_path)
    assert lane().computed  # the background lane did run the views
    assert [name for name, pending in pending_at_write if pending] == []
    panel_plots = {n for n in names if not n.startswith("L")}
    assert {"residual_logit_lens_top-1_probability.png", "attention_all_heads.png"} <= panel_plots
    assert not any(n.startswith(("what_changed", "patching")) for n in panel_plots)
    ids = ("inside_attention", "attention", "dla", "embeddings", "neurons", "residual", "tokenization", "masked")
    for name in panel_plots:
        panel = next((i for i in ids if name.startswith(i + "_")), None)
        assert panel is not None, name
        view = name[len(panel) + 1:-len(".png")]
        assert view and not view.startswith(panel), name
