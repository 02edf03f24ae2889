"""Where the layers are, in the status bar; Models > Fit … to this machine after a model did not fit."""

from __future__ import annotations

from explorer.ui.window.chrome.model_menu import ModelMenus, RecentCheckpoints
from explorer.ui.window.chrome.status_bar import StatusBar
from explorer.ui.session.workers import LoadRequest, load_model_steps

INFO = {"name": "big", "description": "d", "source": "s", "vocabulary": "v", "context_length": 8,
        "parameters": 10, "dtype": "float32", "device": "cuda:0"}


def test_status_bar_says_where_the_layers_are(qtbot):
    bar = StatusBar()
    qtbot.addWidget(bar)
    bar.show_model({**INFO, "layers": "layers 0–17 cuda:0, 18–31 cpu"})
    assert bar.fields["device"].text() == "layers 0–17 cuda:0, 18–31 cpu"
    bar.show_model({**INFO, "layers": "all layers cuda:0"})
    assert bar.fields["device"].text() == "cuda:0"


def test_models_menu_offers_fit_to_this_machine(qtbot, settings):
    from PySide6.QtWidgets import QWidget

    parent = QWidget()
    qtbot.addWidget(parent)
    menus = ModelMenus(RecentCheckpoints(settings, lambda: []), lambda: ["tiny"], parent)
    menus.fill_models()
    assert not [a for a in menus.models_menu.actions() if "to this machine" in a.text()]
    menus.unfit = "/models/Llama-3.1-8B"
    menus.fill_models()
    (fit,) = [a for a in menus.models_menu.actions() if "to this machine" in a.text()]
    assert fit.text() == "Fit Llama-3.1-8B to this machine"
    with qtbot.waitSignal(menus.fit_chosen) as signal:
        fit.trigger()
    assert signal.args == ["/models/Llama-3.1-8B"]


def test_a_fit_request_loads_a_placed_model(tiny_gpt2_dir):
    steps = load_model_steps(LoadRequest(str(tiny_gpt2_dir), "cpu", fit=True))
    try:
        while True:
            next(steps)
    except StopIteration as done:
        result = done.value
    assert result.model.model.hf_device_map  # laid out by accelerate (here: all of it fits the CPU)
    assert result.model.info()["layers"] == "all layers cpu"
