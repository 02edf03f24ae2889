"""Models > Trace a remote model (NDIF)…: the dialog says what it will transfer, counts the layers as they
arrive, shows the model-less trace as File > Open trace does, and ends any failure in one line with the
current model left in place. The network is replaced (nnsight's own RemoteBackend, recording its
requests and running them on a local model, as tests/core/test_remote.py does)."""

from __future__ import annotations


import numpy as np
import pytest

from explorer.core.checkpoint import load_checkpoint
from explorer.core.remote.backend import RemoteSettings, compact_nbytes, human_bytes
from tests.core.decoder_reference import build

IDS_PROMPT = "5 17 99 3 50 42 42 7"


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("remote-ui-llama")
    build("LlamaConfig", "LlamaForCausalLM", num_hidden_layers=3, num_key_value_heads=2).save_pretrained(path)
    return path


def _menu_action(window):
    window.menus.fill_models()
    (action,) = [a for a in window.menus.models_menu.actions() if a.text() == "Trace a remote model (NDIF)…"]
    return action


def _estimate(qtbot, dialog, source, remote, host="https://ndif.example.org", key="k"):
    dialog.model.setText(str(source))
    dialog.remote.setChecked(remote)
    dialog.host.setText(host)
    dialog.api_key.setText(key)
    dialog.estimate_button.click()
    qtbot.waitUntil(lambda: dialog.start_button.isEnabled() or dialog.estimate_button.isEnabled() and
                    bool(dialog.status.text()), timeout=60_000)


def test_a_local_nnsight_trace_end_to_end(qtbot, window, llama_dir):
    window.prompt.set_text(IDS_PROMPT)
    before = window.session.loaded
    _menu_action(window).trigger()
    dialog = window.remote_traces.dialog
    assert dialog is not None and dialog.prompt == IDS_PROMPT
    _estimate(qtbot, dialog, llama_dir, remote=False)
    assert dialog.start_button.isEnabled(), dialog.status.text()
    job = dialog.job
    assert human_bytes(compact_nbytes(job.cfg, len(job.ids), 4)) in dialog.plan.text()
    assert f"{len(job.ids)} tokens" in dialog.plan.text() and "this machine" in dialog.plan.text()
    assert window.session.loaded is before  # estimating changes nothing
    arrived = []
    dialog.progress.valueChanged.connect(arrived.append)
    dialog.layers_per_request = 1
    with qtbot.waitSignal(dialog.traced, timeout=120_000):
        dialog.start_button.click()
    assert arrived[-3:] == [1, 2, 3]  # one request a layer
    # shown as File > Open trace shows a trace: no model, the prompt read-only, the trace on screen
    qtbot.waitUntil(lambda: window.trace is not None and not window.trace.has_model)
    shown = window.trace
    assert window.session.loaded is None and window.prompt.edit.isReadOnly()
    assert window.session.trace_file == f"nnsight: {llama_dir}"
    assert window.status.fields["device"].text() == "no model"
    ours = load_checkpoint(llama_dir, device="cpu").trace_ids(list(job.ids))
    for layer in range(3):
        for site in ("resid_pre", "attn.q", "attn.pattern"):
            np.testing.assert_allclose(shown[f"blocks.{layer}.{site}"], ours[f"blocks.{layer}.{site}"], atol=1e-4)
    assert window.settings.value("remote/model") == str(llama_dir)


class _Network:
    """nnsight's RemoteBackend for each request, its ``request`` replaced: records what it would send and runs
    it locally (tests/core/test_remote.Recording), or fails as ``fail`` says."""

    def __init__(self, settings, fail=None):
        self.settings, self.fail, self.sent = settings, fail, []

    def __call__(self, lm):
        from tests.core.test_remote import Recording

        backend = Recording(lm, self.settings)
        if self.fail is not None:
            def request(request, tracer, fail=self.fail):
                raise fail
            backend.request = request
        self.sent.append(backend)
        return backend


@pytest.fixture
def remote_ready(llama_dir, monkeypatch):
    from nnsight.modeling import huggingface

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setitem(huggingface._ID_CACHE, str(llama_dir), "org/tiny-llama")
    return llama_dir


def test_a_remote_trace_sends_its_requests_and_counts_layers(qtbot, window, remote_ready):
    window.prompt.set_text(IDS_PROMPT)
    network = _Network(RemoteSettings("https://ndif.example.org", "secret"))
    dialog = window.remote_traces.open(backend_for=network)
    _estimate(qtbot, dialog, remote_ready, remote=True, key="secret")
    job = dialog.job
    assert job.remote and job.settings.host == "https://ndif.example.org" and job.settings.api_key == "secret"
    assert human_bytes(compact_nbytes(job.cfg, len(job.ids), 2)) in dialog.plan.text()  # bfloat16 from a server
    assert "ndif.example.org" in dialog.plan.text()
    dialog.layers_per_request = 2
    with qtbot.waitSignal(dialog.traced, timeout=120_000) as signal:
        dialog.start_button.click()
    assert len(network.sent) == 2  # layers 0-1, then 2 with the final residual and logits
    (request, blob, host, key), = network.sent[0].sent
    assert host == "https://ndif.example.org" and key == "secret" and '"repo_id": "org/tiny-llama"' in request.model_key
    trace, label = signal.args
    assert label == f"NDIF: {remote_ready}" and trace.meta.extra["backend"] == "remote"
    assert dialog.progress.value() == 3


@pytest.mark.parametrize("fail, words", [
    ("refused", "refused or failed"),
    ("timeout", "did not answer in time"),
])
def test_a_failed_remote_trace_is_one_line_and_keeps_the_model(qtbot, window, remote_ready, fail, words):
    from nnsight.intervention.backends.remote import RemoteError

    error = RemoteError("Model not hosted:\nllama-tiny is not deployed") if fail == "refused" else \
        TimeoutError("the read operation timed out\nafter 30 s")
    window.prompt.set_text(IDS_PROMPT)
    loaded, frame = window.session.loaded, window.session.frame
    network = _Network(RemoteSettings("https://ndif.example.org", "k"), fail=error)
    dialog = window.remote_traces.open(backend_for=network)
    _estimate(qtbot, dialog, remote_ready, remote=True)
    dialog.start_button.click()
    qtbot.waitUntil(lambda: dialog.estimate_button.isEnabled(), timeout=60_000)
    text = dialog.status.text()
    assert words in text and "\n" not in text
    assert window.session.loaded is loaded and window.session.frame is frame and dialog.isVisible()
    assert not window.prompt.edit.isReadOnly()
    assert dialog.start_button.isEnabled()  # try again


def test_bad_input_and_missing_nnsight_are_one_line(qtbot, window, monkeypatch, tmp_path):
    import sys

    window.prompt.set_text(IDS_PROMPT)
    dialog = window.remote_traces.open()
    _estimate(qtbot, dialog, tmp_path / "nowhere", remote=False)
    assert "is not a folder" in dialog.status.text() and not dialog.start_button.isEnabled()
    _estimate(qtbot, dialog, "org/model", remote=True, host="ndif.example.org")
    assert "must start with http" in dialog.status.text()
    monkeypatch.setitem(sys.modules, "nnsight", None)
    _estimate(qtbot, dialog, "org/model", remote=True)
    text = dialog.status.text()
    assert "pip install 'transformer-explorer[remote]'" in text and "\n" not in text
    assert window.session.loaded is not None


def test_settings_and_the_environment_fill_the_form(qtbot, window, settings, monkeypatch):
    monkeypatch.setenv("NDIF_API_KEY", "from-env")
    settings.setValue("remote/host", "https://my.ndif.host")
    dialog = window.remote_traces.open()
    assert dialog.host.text() == "https://my.ndif.host" and dialog.api_key.text() == ""
    assert dialog.api_key.placeholderText() == "from NDIF_API_KEY"
    assert dialog._settings().api_key == "from-env"  # an empty field falls back to NDIF_API_KEY
    dialog.close()


# --- the API key: never in the settings file ---------------------------------------------------------------
class _FakeKeyring:
    """A keyring backend in memory (what the system's key store would hold)."""

    def __init__(self, refuse=False):
        import keyring.backend

        class Backend(keyring.backend.KeyringBackend):
            priority = 1

            def __init__(inner):
                super().__init__()
                inner.stored = {}

            def get_password(inner, service, user):
                return inner.stored.get((service, user))

            def set_password(inner, service, user, password):
                if refuse:
                    raise keyring.errors.PasswordSetError("the key store is locked")
                inner.stored[(service, user)] = password

            def delete_password(inner, service, user):
                inner.stored.pop((service, user))

        self.backend = Backend()


@pytest.fixture(autouse=True)
def _no_system_keyring(monkeypatch):
    """No test here reads or writes the real key store: keyring's own "nowhere to store" backend by default."""
    import keyring.core
    from keyring.backends import fail

    monkeypatch.setattr(keyring.core, "_keyring_backend", fail.Keyring())


@pytest.fixture
def fake_keyring(monkeypatch):
    import keyring.core

    fake = _FakeKeyring().backend
    monkeypatch.setattr(keyring.core, "_keyring_backend", fake)
    return fake


def _settings_text(settings):
    from pathlib import Path

    settings.sync()
    path = Path(settings.fileName())
    return path.read_text() if path.exists() else ""


def test_the_key_is_not_in_the_settings_file_after_a_run(qtbot, window, remote_ready):
    window.prompt.set_text(IDS_PROMPT)
    dialog = window.remote_traces.open(backend_for=_Network(RemoteSettings("https://ndif.example.org", "s3cret-key")))
    _estimate(qtbot, dialog, remote_ready, remote=True, key="s3cret-key")
    assert not dialog.remember_key.isEnabled()  # no usable key store: kept for the session only
    with qtbot.waitSignal(dialog.traced, timeout=120_000):
        dialog.start_button.click()
    text = _settings_text(window.settings)
    assert "ndif.example.org" in text  # the host is remembered
    assert "s3cret-key" not in text and window.settings.value("remote/api_key") is None
    again = window.remote_traces.open()
    assert again.api_key.text() == "s3cret-key"  # the session keeps it
    again.close()


def test_remember_the_key_stores_it_with_keyring_and_reads_it_back(qtbot, window, settings, fake_keyring):
    from explorer.ui.window.remote_key import SERVICE, USER, KeyStore
    from explorer.ui.window.remote_trace import RemoteTraceDialog

    dialog = window.remote_traces.open()
    assert dialog.remember_key.isEnabled() and not dialog.remember_key.isChecked()
    dialog.api_key.setText("k-123")
    dialog.remember_key.setChecked(True)
    assert dialog._remember() == ""
    assert fake_keyring.stored[(SERVICE, USER)] == "k-123"
    assert "k-123" not in _settings_text(settings)
    dialog.close()
    # a new session (a fresh KeyStore: nothing in memory) reads it back from the key store
    fresh = RemoteTraceDialog(settings, IDS_PROMPT, keys=KeyStore(settings))
    qtbot.addWidget(fresh)
    assert fresh.api_key.text() == "k-123" and fresh.remember_key.isChecked()
    fresh.remember_key.setChecked(False)  # unticked: the stored key is forgotten
    fresh._remember()
    assert (SERVICE, USER) not in fake_keyring.stored


def test_without_keyring_the_checkbox_is_disabled_and_says_why(qtbot, window, monkeypatch):
    import sys

    dialog = window.remote_traces.open()
    assert not dialog.remember_key.isEnabled() and "no usable key store" in dialog.remember_key.toolTip()
    dialog.close()
    monkeypatch.setitem(sys.modules, "keyring", None)
    dialog = window.remote_traces.open()
    assert not dialog.remember_key.isEnabled()
    assert "pip install 'transformer-explorer[remote]'" in dialog.remember_key.toolTip()
    dialog.close()


@pytest.mark.parametrize("store", ["none", "keyring"])
def test_an_old_plain_text_key_moves_only_when_the_user_confirms(qtbot, window, settings, monkeypatch, store):
    import keyring.core

    from explorer.ui.window.remote_key import SERVICE, USER

    fake = _FakeKeyring().backend
    if store == "keyring":
        monkeypatch.setattr(keyring.core, "_keyring_backend", fake)
    settings.setValue("remote/api_key", "old-key")
    dialog = window.remote_traces.open()
    assert dialog.api_key.text() == "old-key"  # read, so it can be used at once
    assert not dialog.legacy_note.isHidden() and not dialog.move_key_button.isHidden()
    dialog._remember()  # a run without confirming: the settings entry stays
    assert settings.value("remote/api_key") == "old-key"
    dialog.move_key_button.click()
    assert settings.value("remote/api_key") is None and "old-key" not in _settings_text(settings)
    assert dialog.move_key_button.isHidden() and dialog.api_key.text() == "old-key"
    if store == "keyring":
        assert fake.stored[(SERVICE, USER)] == "old-key" and "key store" in dialog.status.text()
    else:
        assert window.remote_traces.keys.session == "old-key" and "session only" in dialog.status.text()
    dialog.close()


def test_a_key_store_that_refuses_leaves_the_old_key_in_place(qtbot, window, settings, monkeypatch):
    import keyring.core

    monkeypatch.setattr(keyring.core, "_keyring_backend", _FakeKeyring(refuse=True).backend)
    settings.setValue("remote/api_key", "old-key")
    dialog = window.remote_traces.open()
    dialog.move_key_button.click()
    assert settings.value("remote/api_key") == "old-key"  # never lost
    assert "locked" in dialog.status.text() and "still holds it" in dialog.status.text()
    assert not dialog.move_key_button.isHidden()
    dialog.close()
