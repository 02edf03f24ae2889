"""Models > Compare with another model: the second model beside the first, its views, clicks selecting in both."""

from __future__ import annotations

import numpy as np

from explorer.ui.window.compare_view import side_by_side


def _compare(qtbot, window, source):
    compare = window.session.compare
    with qtbot.waitSignal(compare.ready, timeout=60_000) as blocker:
        compare.open(str(source))
    return blocker.args[0]


def test_a_model_compared_with_itself_agrees_everywhere(qtbot, window, tiny_checkpoint):
    models = window.menus.models_menu
    models.aboutToShow.emit()
    assert any(a.text() == "Compare with another model…" for a in models.actions())
    result = _compare(qtbot, window, tiny_checkpoint)
    view = window.compare_dock.view
    assert window.compare_dock.isVisible()
    c = result.comparison
    L, n = window.loaded.config.n_layers, window.trace.n_tokens
    assert c.resid_cos.shape == (L + 1, n) and c.head_js.shape == (L, window.loaded.config.n_heads)
    np.testing.assert_allclose(c.resid_cos, 1.0, atol=1e-5)
    assert np.abs(c.head_js).max() < 1e-6 and np.abs(c.logit_kl).max() < 1e-5
    assert c.first_block is None and "agree" in view.summary.text()
    assert view.js.matrix.shape == (L, window.loaded.config.n_heads)
    qtbot.waitUntil(lambda: view.dist.rowCount() > 0 and view.lens.rowCount() == L + 1, timeout=30_000)
    # the two distributions side by side are the same model's: the same tokens, the same probabilities
    for row in range(view.dist.rowCount()):
        assert view.dist.item(row, 0).text() == view.dist.item(row, 2).text()
    # clicks select in both: a head cell selects its layer and head; a stream cell its position
    view.js.cell_clicked.emit(1, 1)
    assert (window.selection.layer, window.selection.head) == (1, 1)
    view.cos.cell_clicked.emit(0, 2)
    assert window.selection.token == 2 and view.position == 2
    qtbot.waitUntil(lambda: view.asked_position == 2, timeout=10_000)
    # a new prompt is compared again
    with qtbot.waitSignal(window.session.compare.ready, timeout=60_000) as blocker:
        window.set_prompt("Hello world, again and again")
    assert blocker.args[0].a is window.trace
    window.session.compare.close()
    assert view.result is None and "Not comparing" in view.summary.text()


def test_models_of_different_shapes_compare_by_relative_depth_with_a_note(qtbot, window, other_checkpoint):
    result = _compare(qtbot, window, other_checkpoint)
    c = result.comparison
    assert c.head_js.shape == (window.loaded.config.n_layers, 1)
    assert list(c.layer_map) == [0, 2, 3]  # 2 layers against 3: by relative depth (ends to ends)
    view = window.compare_dock.view
    assert "relative depth" in view.summary.text() and "head-averaged" in view.summary.text()
    dists, lens = side_by_side(result, 1)
    assert len(lens) == 3 and lens[1][3] == "after 1"  # A's boundary 1 beside B's at the same relative depth


def test_another_tokenizer_is_refused_in_one_line(qtbot, window):
    compare = window.session.compare
    with qtbot.waitSignal(compare.failed, timeout=60_000) as blocker:
        compare.open("shakespeare")
    message = blocker.args[0]
    assert "cannot be compared" in message and "tokeniz" in message and "\n" not in message
    assert not compare.active and "cannot be compared" in window.compare_dock.view.summary.text()


def test_a_model_that_outputs_nan_is_named_in_the_window_never_agreeing(qtbot, window, tiny_checkpoint, tmp_path):
    """Issue 34: the window's Compare against a copy whose weights hold NaN says B produced non-finite values."""
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    broken = tmp_path / "broken"
    shutil.copytree(tiny_checkpoint, broken)
    weights = load_file(str(broken / "model.safetensors"))
    name = next(k for k in weights if k.startswith("blocks.0.") and k.endswith("W_out.weight"))
    weights[name] = torch.full_like(weights[name], float("nan"))
    save_file(weights, str(broken / "model.safetensors"))
    result = _compare(qtbot, window, broken)
    text = window.compare_dock.view.summary.text()
    assert "B produced non-finite values" in text and "agree" not in text
    assert result.comparison.broken("logits") == ["B"]
