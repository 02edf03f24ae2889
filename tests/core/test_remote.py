"""The nnsight backend (core/remote/): for every family in its tables, the Trace it builds equals this
project's own; ``export --backend nnsight`` keeps the README's contract; the remote path is tested up
to the request it sends, with nnsight's own objects and no network."""

from __future__ import annotations

import numpy as np
import pytest

from explorer.core.checkpoint import load_checkpoint
from explorer.core.remote.backend import (RemoteSettings, RemoteTraceError, compact_nbytes, open_model,
                                          remote_backend, saved_keys, trace_directory, trace_nnsight)
from explorer.core.remote.tables import FAMILIES, our_config
from tests.core.decoder_reference import build

IDS = [5, 17, 99, 3, 50, 42, 42, 7, 31, 64]
SPECS = {  # one tiny random model per family in the tables (GQA where the family has it)
    "llama": ("LlamaConfig", "LlamaForCausalLM", dict(num_key_value_heads=2)),
    "mistral": ("MistralConfig", "MistralForCausalLM", dict(num_key_value_heads=2, sliding_window=6)),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", dict(num_key_value_heads=2)),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", dict(head_dim=16, num_key_value_heads=2)),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", dict(head_dim=16, num_key_value_heads=2, sliding_window=6,
                                                         query_pre_attn_scalar=16)),
    "mixtral": ("MixtralConfig", "MixtralForCausalLM", dict(num_key_value_heads=2, num_local_experts=4,
                                                            num_experts_per_tok=2)),
    "gpt_oss": ("GptOssConfig", "GptOssForCausalLM", dict(num_key_value_heads=2, num_local_experts=4,
                                                          num_experts_per_tok=2, head_dim=16, sliding_window=6)),
}
MOE_SITES = ("router_logits", "probs", "weights", "experts")


@pytest.fixture(scope="module")
def family_dirs(tmp_path_factory):
    dirs = {}
    for family, (config, cls, overrides) in SPECS.items():
        path = tmp_path_factory.mktemp(f"nnsight-{family}")
        build(config, cls, **overrides).save_pretrained(path)
        dirs[family] = path
    return dirs


def _directory(family, family_dirs, tiny_gpt2_dir):
    return tiny_gpt2_dir if family == "gpt2" else family_dirs[family]


def test_every_family_in_the_tables_has_a_model_here():
    assert set(FAMILIES) == set(SPECS) | {"gpt2"}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_nnsight_trace_equals_our_own(family, family_dirs, tiny_gpt2_dir):
    path = _directory(family, family_dirs, tiny_gpt2_dir)
    theirs = trace_directory(path, ids=IDS)
    ours = load_checkpoint(path, device="cpu").trace_ids(IDS)
    cfg = ours.config
    assert not theirs.has_model
    expected = saved_keys(cfg.n_layers, FAMILIES[family], cfg.moe_layers)
    assert sorted(theirs.stored_keys()) == sorted([k for k in expected if k != "last_logits"] +
                                                  [f"blocks.{i}.moe.probs" for i in cfg.moe_layers])
    for layer in range(cfg.n_layers):
        sites = ["resid_pre", "attn.q", "attn.k", "attn.v", "attn.pattern", "attn.scores"]
        sites += ["attn.sink"] if cfg.attn_sinks else []                  # gpt-oss: each row's share of the sink
        sites += [f"moe.{site}" for site in MOE_SITES] if layer in cfg.moe_layers else []
        for site in sites:
            key = f"blocks.{layer}.{site}"
            if site == "moe.experts":  # the same experts, best first (the weights are compared beside them)
                np.testing.assert_array_equal(theirs[key], ours[key], err_msg=f"{family} {key}")
                continue
            np.testing.assert_allclose(theirs[key], ours[key], rtol=0, atol=1e-4, err_msg=f"{family} {key}")
    np.testing.assert_allclose(theirs["resid_final"], ours["resid_final"], rtol=0, atol=1e-4)
    np.testing.assert_allclose(theirs.meta.extra["last_logits"], ours["logits"][-1], rtol=0, atol=1e-4)
    with pytest.raises(Exception, match="model"):  # a model-less Trace: what needs weights says so
        theirs["blocks.0.moe.expert_out" if cfg.moe_layers else "blocks.0.mlp.post"]
    if cfg.moe_layers:  # what nnsight cannot reach in a mixture of experts, said in one line
        line = theirs.meta.extra["not_available"]
        assert "expert's output" in line and "\n" not in line


@pytest.mark.parametrize("family", ["llama", "gemma2", "gpt2", "gpt_oss"])
def test_export_backend_nnsight_contract(family, family_dirs, tiny_gpt2_dir, tmp_path):
    from explorer.cli import main

    path = _directory(family, family_dirs, tiny_gpt2_dir)
    prompt = "The cat sat on the mat" if family == "gpt2" else " ".join(map(str, IDS))
    assert main(["export", "--checkpoint", str(path), "--prompt", prompt, "--out", str(tmp_path / "n"),
                 "--backend", "nnsight"]) == 0
    assert main(["export", "--checkpoint", str(path), "--prompt", prompt, "--out", str(tmp_path / "d")]) == 0
    ours, default = np.load(tmp_path / "n" / "trace.npz"), np.load(tmp_path / "d" / "trace.npz")
    np.testing.assert_array_equal(ours["token_ids"], default["token_ids"])
    L = default["residual"].shape[0] - 1
    reference = load_checkpoint(path, device="cpu").trace_ids(default["token_ids"].tolist())
    for layer in range(L):
        np.testing.assert_allclose(ours[f"blocks.{layer}.resid_pre"], default["residual"][layer], atol=1e-4)
        np.testing.assert_allclose(ours[f"blocks.{layer}.attn.pattern"], default["attention"][layer], atol=1e-4)
        for site in ("q", "k", "v"):
            np.testing.assert_allclose(ours[f"blocks.{layer}.attn.{site}"], reference[f"blocks.{layer}.attn.{site}"],
                                       atol=1e-4)
    np.testing.assert_allclose(ours["resid_final"], default["residual"][L], atol=1e-4)
    np.testing.assert_allclose(ours["last_logits"], default["logits"][-1], atol=1e-4)
    for layer in reference.config.moe_layers:  # a mixture of experts: its routing is written too
        np.testing.assert_array_equal(ours[f"blocks.{layer}.moe.experts"], reference[f"blocks.{layer}.moe.experts"])
        np.testing.assert_allclose(ours[f"blocks.{layer}.moe.router_logits"],
                                   reference[f"blocks.{layer}.moe.router_logits"], atol=1e-5)


class Recording:
    """nnsight's own RemoteBackend with the network replaced: it records the request it would send (the
    envelope and the serialized block), then runs that block as a server would, on a local model."""

    def __new__(cls, lm, settings):
        from nnsight.intervention.backends.local import LocalSimulationBackend
        from nnsight.intervention.backends.remote import RemoteBackend

        class _Recording(type(remote_backend(lm, settings))):
            sent: list = []

            def request(self, request, tracer):
                self.sent.append((request, self._serialize(tracer), self.host, self.api_key))
                LocalSimulationBackend(lm)(tracer)  # deserialized with local modules hidden, then run
                return None

        assert issubclass(_Recording, RemoteBackend)
        backend = remote_backend(lm, settings)
        backend.__class__ = _Recording
        backend.sent = []
        return backend


def test_remote_request_saves_the_compact_set_in_execution_order(family_dirs, monkeypatch):
    import json

    from nnsight.modeling import huggingface

    monkeypatch.setenv("NDIF_API_KEY", "key-from-env")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    path = family_dirs["llama"]
    # nnsight canonicalises the repo id through the Hub (a network call): its own cache answers here
    monkeypatch.setitem(huggingface._ID_CACHE, str(path), "org/tiny-llama")
    hf = json.loads((path / "config.json").read_text())
    cfg = our_config("llama", hf)
    lm = open_model(path, hf)
    settings = RemoteSettings.resolve("https://ndif.example.org")
    assert settings.api_key == "key-from-env"
    backend = Recording(lm, settings)
    progress = []
    theirs = trace_nnsight(lm, "llama", cfg, IDS, [str(i) for i in IDS], backend=backend, progress=progress.append)
    (request, blob, host, key), = backend.sent
    assert host == "https://ndif.example.org" and key == "key-from-env"
    assert '"repo_id": "org/tiny-llama"' in request.model_key and len(blob) > 0
    assert "will come back" in progress[0]
    ours = load_checkpoint(path, device="cpu").trace_ids(IDS)
    assert theirs.stored_keys() == [k for k in saved_keys(cfg.n_layers) if k != "last_logits"]  # execution order
    for key in theirs.stored_keys():
        np.testing.assert_allclose(theirs[key], ours[key], atol=1e-5, err_msg=key)
    assert theirs.meta.extra["backend"] == "remote"
    # on demand, reduced on the server: the lens and the output's top 3, one position's neurons
    from explorer.core.remote.backend import fetch_details

    details = Recording(lm, settings)
    got = fetch_details(lm, "llama", cfg, IDS, 1, 3, k=3, backend=details)
    assert len(details.sent) == 1 and got["top_ids"].shape == (3,) and got["lens_ids"].shape == (3,)
    np.testing.assert_allclose(got["mlp.post"], ours["blocks.1.mlp.post"][3], atol=1e-5)


def test_a_server_refusal_is_one_line(family_dirs, monkeypatch):
    import json

    from nnsight.modeling import huggingface

    from nnsight.intervention.backends.remote import RemoteError

    path = family_dirs["qwen2"]
    hf = json.loads((path / "config.json").read_text())
    lm = open_model(path, hf)
    monkeypatch.setitem(huggingface._ID_CACHE, str(path), "org/tiny-qwen2")
    backend = remote_backend(lm, RemoteSettings.resolve("https://ndif.example.org", "k"))

    def refuse(request, tracer):
        raise RemoteError("Model not hosted:\nllama-tiny is not deployed")

    backend.request = refuse
    with pytest.raises(RemoteTraceError, match="refused or failed") as info:
        trace_nnsight(lm, "qwen2", our_config("qwen2", hf), IDS, [str(i) for i in IDS], backend=backend)
    assert "\n" not in str(info.value)


def test_bytes_to_transfer_at_n_tokens():
    from explorer.core.config import ModelConfig

    # Llama-3-70B's shape: 80 layers, d 8192, 64 heads, 8 K/V heads of 128; 1024 tokens in bf16
    cfg = ModelConfig(arch="llama", vocab_size=128256, n_ctx=8192, d_model=8192, n_layers=80, n_heads=64,
                      d_head=128, n_kv_heads=8, d_ff=28672)
    per_layer = 1024 * 8192 + (64 + 16) * 1024 * 128
    assert compact_nbytes(cfg, 1024) == (80 * per_layer + 1024 * 8192 + 128256) * 2
    assert 2.8 * 2**30 < compact_nbytes(cfg, 1024) < 2.9 * 2**30  # resid_pre, q, k, v: ~36 MiB a layer


def test_settings_and_missing_nnsight(monkeypatch, tmp_path, capsys):
    import sys

    from explorer.cli import main
    from explorer.core.errors import ExplorerError

    monkeypatch.delenv("NDIF_API_KEY", raising=False)
    monkeypatch.setenv("NDIF_HOST", "http://localhost:5001")
    assert RemoteSettings.resolve() == RemoteSettings("http://localhost:5001", "")
    with pytest.raises(ExplorerError, match="http"):
        RemoteSettings.resolve("ndif.example.org")
    monkeypatch.setitem(sys.modules, "nnsight", None)
    assert main(["export", "-c", str(tmp_path), "--prompt", "x", "--out", str(tmp_path / "o"),
                 "--backend", "nnsight"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "pip install 'transformer-explorer[remote]'" in err


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_details_on_demand_equal_our_own(family, family_dirs, tiny_gpt2_dir):
    import json

    from explorer.core.analysis.residual import logit_lens
    from explorer.core.remote.backend import fetch_details

    path = _directory(family, family_dirs, tiny_gpt2_dir)
    hf = json.loads((path / "config.json").read_text())
    cfg = our_config(family, hf)
    ours = load_checkpoint(path, device="cpu").trace_ids(IDS)
    layer, position = cfg.n_layers - 1, 4
    got = fetch_details(open_model(path, hf), family, cfg, IDS, layer, position, k=5)
    if cfg.moe_layers:
        assert "mlp.post" not in got  # an MoE layer has no single FFN's neurons to read (Family.unavailable)
    else:
        np.testing.assert_allclose(got["mlp.post"], ours[f"blocks.{layer}.mlp.post"][position], atol=1e-4)
    logits = ours["logits"][position]
    np.testing.assert_array_equal(got["top_ids"], np.argsort(-logits, kind="stable")[:5])
    np.testing.assert_allclose(got["top_logits"], logits[got["top_ids"]], atol=1e-4)
    lens = logit_lens(ours, top=5)
    np.testing.assert_array_equal(got["lens_ids"], lens.ids[layer, position])
    np.testing.assert_allclose(got["lens_logits"], lens.logits[layer, position], atol=1e-4)


@pytest.mark.parametrize("family", ["qwen3", "gpt_oss"])
def test_layers_arrive_a_request_at_a_time(family_dirs, monkeypatch, family):
    import json

    from nnsight.modeling import huggingface

    from explorer.core.remote.backend import stream_compact

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    path = family_dirs[family]
    monkeypatch.setitem(huggingface._ID_CACHE, str(path), f"org/tiny-{family}")
    hf = json.loads((path / "config.json").read_text())
    cfg, lm = our_config(family, hf), open_model(path, hf)
    backends = []

    def backend_for():
        backends.append(Recording(lm, RemoteSettings.resolve("https://ndif.example.org", "k")))
        return backends[-1]

    ours = load_checkpoint(path, device="cpu").trace_ids(IDS)
    arrived = list(stream_compact(lm, family, cfg, IDS, layers_per_request=1, backend_for=backend_for))
    assert [(first, last) for first, last, _ in arrived] == [(0, 1), (1, 2)] and len(backends) == 2
    first = ["blocks.0.attn.k", "blocks.0.attn.q", "blocks.0.attn.v", "blocks.0.resid_pre"]
    if family == "gpt_oss":  # its sinks, and the routing of its mixture of experts
        first += ["blocks.0.attn.sinks", "blocks.0.moe.experts", "blocks.0.moe.router_logits", "blocks.0.moe.weights"]
    assert sorted(arrived[0][2]) == sorted(first)
    merged = {k: v for _, _, arrays in arrived for k, v in arrays.items()}
    assert set(merged) == set(saved_keys(cfg.n_layers, FAMILIES[family], cfg.moe_layers))
    merged = {k: v for k, v in merged.items() if not k.endswith("attn.sinks")}  # a weight: not a key of ours
    for key, value in merged.items():
        np.testing.assert_allclose(value, ours["logits"][-1] if key == "last_logits" else ours[key], atol=1e-5,
                                   err_msg=key)
