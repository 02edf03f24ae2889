"""The Features panel and steering in the window: File > Open SAE, the panel's numbers against the core,
a feature switched off by a right-click through the one intervention list, a steered continuation
against the core's steered generate with the same seed."""

from __future__ import annotations

import json

import numpy as np
import torch
from PySide6.QtCore import QPointF
from PySide6.QtWidgets import QMessageBox
from safetensors.torch import save_file

import explorer.ui  # noqa: F401  (binds pyqtgraph to PySide6)
from explorer.core.features.analysis import reconstruction_error, strongest_features, top_features
from explorer.core.features.steering import feature_vector, neuron_vector, steer
from explorer.core.generation.generate import generate
from tests.ui.right_click import right_click_menu

PROMPT = "The cat sat on the mat, and the dog sat on the log."


def write_sae(path, d: int = 32, d_sae: int = 96, hook: str = "blocks.1.hook_resid_pre", model: str = "tiny-a"):
    path.mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(3)
    save_file({"W_enc": torch.randn(d, d_sae, generator=g) * 0.5, "b_enc": torch.zeros(d_sae) - 0.2,
               "W_dec": torch.randn(d_sae, d, generator=g) * 0.3, "b_dec": torch.zeros(d)},
              str(path / "sae_weights.safetensors"))
    (path / "cfg.json").write_text(json.dumps({"architecture": "standard", "d_in": d, "d_sae": d_sae,
                                               "metadata": {"hook_name": hook, "model_name": model}}))
    return path


def opened(qtbot, window, path, n: int = 1):
    window.feature_tools.opener.open(str(path))
    qtbot.waitUntil(lambda: len(window.session.features.saes) == n, timeout=30_000)
    panel = window.panel("features")
    qtbot.waitUntil(lambda: panel.trace is window.trace and panel._whole is not None
                    and panel._whole.acts is not None, timeout=30_000)
    return panel


def test_the_features_panel_shows_the_cores_numbers_and_switches_a_feature_off(qtbot, window, tmp_path,
                                                                               monkeypatch) -> None:
    panel = window.panel("features")
    dock = next(d for d in window.docks if d.panel is panel)
    assert dock.isHidden() and not panel.available()          # no SAE: the panel does not apply
    with qtbot.waitSignal(window.trace_applied, timeout=30_000):
        window.set_prompt(PROMPT)
    sae_dir = tmp_path / "saes"
    write_sae(sae_dir / "l1")
    write_sae(sae_dir / "l0", hook="blocks.0.hook_resid_pre")
    opened(qtbot, window, sae_dir, 2)                          # a folder of SAEs: each opened
    assert [s.hook.hook_name for s in window.session.features.saes] == ["blocks.0.hook_resid_pre",
                                                                        "blocks.1.hook_resid_pre"]
    assert not dock.isHidden() and panel.available()
    sae = panel.sae
    trace = window.trace
    acts = sae.activations(trace)
    token = panel.selected_token
    ids, values = top_features(acts, token, 20)
    np.testing.assert_array_equal(panel._view.ids, ids)
    np.testing.assert_allclose(panel._view.acts, values, rtol=1e-5)
    strong, columns = strongest_features(acts, 32)
    np.testing.assert_array_equal(panel._whole.ids, strong)
    np.testing.assert_allclose(panel.map.matrix, columns, rtol=1e-5)
    np.testing.assert_allclose(panel.along_bars.opts["height"], acts[:, panel.feature], rtol=1e-5)
    np.testing.assert_allclose(panel.error_bars.opts["height"], reconstruction_error(sae, trace, acts).relative,
                               rtol=1e-5)
    assert "poor SAE is not the model" in panel.error_note.text()
    assert panel.writes_table.rowCount() == 10

    # a bad directory: one clear line
    lines = []
    monkeypatch.setattr(QMessageBox, "warning", lambda parent, title, text, *a: lines.append(text))
    with qtbot.waitSignal(window.session.features.failed, timeout=30_000):
        window.feature_tools.opener.open(str(tmp_path))
    assert len(lines) == 1 and "\n" not in lines[0] and "sae_weights.safetensors" in lines[0]

    # right-click a column of the tokens x features view: switch that feature off
    feature = int(panel._whole.ids[0])
    row = len(panel._whole.rows) // 2
    scene = panel.map.image.mapToScene(QPointF(0.5, row + 0.5))
    with qtbot.waitSignal(window.trace_applied, timeout=30_000):
        right_click_menu(qtbot, panel.map, scene, f"Switch off feature {feature}")
    (iv,) = window.interventions.active()
    assert (iv.target, iv.index, iv.mode, iv.value) == ("feature", feature, "zero", sae)
    assert window.session.baseline is not None                # What changed, DLA, patching compare with it
    qtbot.waitUntil(lambda: panel._whole is not None and panel._whole.acts is not None
                    and panel.trace is window.trace, timeout=30_000)
    assert panel._intervention_marks[0].count == 1
    changed = window.dock("what_changed")
    changed.raise_()
    qtbot.waitUntil(lambda: changed.panel.trace is window.trace, timeout=30_000)
    assert f"feature {feature} (" in changed.panel.info.text()
    assert np.abs(changed.panel.result.next_delta).max() > 0


def test_a_model_mismatch_asks_and_can_be_overridden(qtbot, window, tmp_path, monkeypatch) -> None:
    asked = []
    monkeypatch.setattr(QMessageBox, "question",
                        lambda parent, title, text, *a: asked.append(text) or QMessageBox.StandardButton.Yes)
    panel = opened(qtbot, window, write_sae(tmp_path / "other", model="llama-3-8b"))
    assert len(asked) == 1 and "llama-3-8b" in asked[0]
    assert panel.sae.warnings and "llama-3-8b" in panel.sae_info.text()

    # steering along the feature chosen in the panel: its decoder direction, entering the SAE's block
    steering = window.feature_tools.steering
    panel.choose_feature(int(panel._view.ids[-1]))
    sae, feature = window.session.features.selected
    assert feature == int(panel._view.ids[-1]) and steering.layer.value() == sae.hook.block
    window.generation.set_prompt(PROMPT)
    steering.alpha.setValue(6.0)
    with qtbot.waitSignal(steering.finished, timeout=60_000) as blocker:
        assert steering.run()
    result = blocker.args[0]
    assert result is not None, steering.error
    loaded = window.loaded
    expected = generate(loaded, loaded.tokenizer.encode(PROMPT), window.generation.current_params(),
                        interventions=(steer(sae.hook.block, feature_vector(sae, loaded.model, feature), 6.0, "f"),))
    assert result.steered.token_ids == expected.token_ids


def test_the_steered_continuation_is_the_cores_with_the_same_seed(qtbot, window) -> None:
    steering = window.feature_tools.steering
    window.generation.set_prompt(PROMPT)
    window.generation.seed.setValue(7)
    steering.source.setCurrentIndex(1)
    steering.neuron.setText("0:5")
    steering.layer.setValue(1)
    steering.alpha.setValue(8.0)
    with qtbot.waitSignal(steering.finished, timeout=60_000) as blocker:
        assert steering.run()
    result = blocker.args[0]
    assert result is not None, steering.error
    loaded = window.loaded
    ids = loaded.tokenizer.encode(PROMPT)
    params = window.generation.current_params(7)
    v = neuron_vector(loaded.model, 0, 5)
    expected = generate(loaded, ids, params, interventions=(steer(1, v, 8.0, "n"),))
    plain = generate(loaded, ids, params)
    assert result.steered.token_ids == expected.token_ids
    assert result.unsteered.token_ids == plain.token_ids
    assert steering.steered_text.toPlainText() == expected.text
    assert result.steered.token_ids != result.unsteered.token_ids   # the steer changes the text here

    # alpha is live: a change runs the steered continuation again, the unsteered one is kept
    with qtbot.waitSignal(steering.finished, timeout=60_000) as blocker:
        steering.alpha.setValue(-8.0)
    again = blocker.args[0]
    assert again.unsteered is result.unsteered and again.alpha == -8.0
    expected = generate(loaded, ids, params, interventions=(steer(1, v, -8.0, "n"),))
    assert again.steered.token_ids == expected.token_ids
