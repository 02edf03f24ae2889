"""Qwen, Gemma, OLMo, StableLM and Granite checkpoints against transformers on tiny random models.

Each test builds the family's model from its transformers Config class (2-3 layers, d 64),
saves it with save_pretrained (safetensors), opens the directory with load_checkpoint and checks
logits, every attention pattern, the residual stream and greedy tokens (decoder_reference.check).
The sliding-window families run 14 tokens through a window of 4, so the window matters.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")

from decoder_reference import IDS, VOCAB, build, check, save_and_open, spread_weights

# --- Qwen ------------------------------------------------------------------------------------

def test_qwen2_qkv_bias_without_output_bias(tmp_path):
    model = build("Qwen2Config", "Qwen2ForCausalLM", num_key_value_heads=2)
    loaded = save_and_open(model, tmp_path)
    cfg = loaded.config
    assert loaded.arch == "qwen2" and cfg.attn_bias and cfg.attn_out_bias is False and cfg.kv_heads == 2
    assert loaded.model.blocks[0].attn.W_O.bias is None and loaded.model.blocks[0].attn.W_Q.bias is not None
    check(loaded, model)


def test_qwen2_sliding_window_layers(tmp_path):
    model = build("Qwen2Config", "Qwen2ForCausalLM", num_hidden_layers=3, use_sliding_window=True, sliding_window=4,
                  max_window_layers=1)
    loaded = save_and_open(model, tmp_path)
    assert loaded.config.sliding_layers == (1, 2) and loaded.config.sliding_window == 4
    check(loaded, model)


def test_qwen3_per_head_qk_norms(tmp_path):
    model = build("Qwen3Config", "Qwen3ForCausalLM", num_key_value_heads=2, head_dim=32, tie_word_embeddings=True)
    loaded = save_and_open(model, tmp_path)
    cfg = loaded.config
    assert loaded.arch == "qwen3" and cfg.qk_norm == "head" and cfg.d_head == 32 and cfg.tie_embeddings
    check(loaded, model)
    trace = loaded.trace_ids(IDS)
    assert trace["blocks.1.attn.q_norm.mean_square"].shape == (4, len(IDS))  # [H, n]
    assert trace["blocks.1.attn.k_norm.mean_square"].shape == (2, len(IDS))  # [Hkv, n]


# --- Gemma -----------------------------------------------------------------------------------

def test_gemma_scaled_embedding_offset_norms_and_geglu(tmp_path):
    model = build("GemmaConfig", "GemmaForCausalLM", num_key_value_heads=1, head_dim=16)
    loaded = save_and_open(model, tmp_path)
    cfg = loaded.config
    assert loaded.arch == "gemma" and cfg.embed_scale == 8.0 and cfg.norm_offset == 1.0
    assert cfg.gated_ffn and cfg.activation == "gelu_tanh" and cfg.tie_embeddings
    check(loaded, model)


GEMMA2 = dict(num_hidden_layers=3, num_key_value_heads=2, head_dim=16, sliding_window=4, query_pre_attn_scalar=24,
              attn_logit_softcapping=2.0, final_logit_softcapping=30.0)


def test_gemma2_sandwich_norms_softcaps_and_sliding_window(tmp_path):
    model = build("Gemma2Config", "Gemma2ForCausalLM", **GEMMA2)
    loaded = save_and_open(model, tmp_path)
    cfg = loaded.config
    assert loaded.arch == "gemma2" and cfg.norm_placement == "sandwich" and cfg.sliding_layers == (0, 2)
    assert (cfg.attn_softcap, cfg.final_softcap, cfg.attn_scale) == (2.0, 30.0, 24 ** -0.5)
    assert any("sliding window of 4" in note for note in loaded.notes)
    check(loaded, model)
    trace = loaded.trace_ids(IDS)
    n = len(IDS)
    # the window is in the mask: on sliding layer 0 the last query sees only the last 4 keys
    scores = trace.head(0, 1, "scores")
    assert np.isneginf(scores[n - 1, : n - 4]).all() and np.isfinite(scores[n - 1, n - 4:]).all()
    assert np.isfinite(trace.head(1, 1, "scores")[n - 1]).all()  # layer 1 sees everything
    # the cap is its own step: pre-cap scores exceed the cap, the capped ones never do
    pre = trace["blocks.0.attn.scores_precap"]
    finite = np.isfinite(pre)
    assert np.abs(pre[finite]).max() > 2.0 and np.abs(trace["blocks.0.attn.scores"][finite]).max() < 2.0
    np.testing.assert_allclose(trace["blocks.0.attn.scores"][finite], 2.0 * np.tanh(pre[finite] / 2.0), atol=1e-6)
    with torch.no_grad():  # the final cap matters too: some logits before it are beyond it
        precap = loaded.model.unembed(loaded.model.ln_final(torch.from_numpy(np.array(trace["resid_final"]))))
    assert precap.abs().max() > 30.0 and np.abs(trace["logits"]).max() < 30.0
    np.testing.assert_allclose(trace["logits"], 30.0 * np.tanh(precap.numpy() / 30.0), atol=1e-5)
    # a transformers 4 config.json has no layer_types: Gemma 2's rule is every even layer
    config = json.loads((tmp_path / "config.json").read_text())
    del config["layer_types"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    from explorer.core.checkpoint import load_checkpoint

    assert load_checkpoint(tmp_path, device="cpu").config.sliding_layers == (0, 2)


def test_gemma3_text_qk_norms_and_local_global_rope(tmp_path):
    rope = {"sliding_attention": {"rope_type": "default", "rope_theta": 10.0},
            "full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1000.0}}
    model = build("Gemma3TextConfig", "Gemma3ForCausalLM", num_hidden_layers=3, num_key_value_heads=2, head_dim=16,
                  sliding_window=4, query_pre_attn_scalar=16, rope_parameters=rope,
                  layer_types=["sliding_attention", "full_attention", "sliding_attention"])
    loaded = save_and_open(model, tmp_path)
    cfg = loaded.config
    assert loaded.arch == "gemma3_text" and cfg.qk_norm == "head" and cfg.sliding_layers == (0, 2)
    assert (cfg.rotary_base, cfg.rotary_base_local, cfg.rope["rope_type"]) == (1000.0, 10.0, "linear")
    check(loaded, model)


def test_gemma3_text_from_a_transformers_4_config(tmp_path):
    """rope_theta, rope_local_base_freq, rope_scaling and sliding_window_pattern as older files have them."""
    import json

    from explorer.core.checkpoint import load_checkpoint

    model = build("Gemma3TextConfig", "Gemma3ForCausalLM", num_hidden_layers=3, head_dim=16, sliding_window=4,
                  rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10.0},
                                   "full_attention": {"rope_type": "default", "rope_theta": 100.0}},
                  layer_types=["sliding_attention", "sliding_attention", "full_attention"])
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    for key in ("rope_parameters", "layer_types"):
        config.pop(key)
    config.update(rope_theta=100.0, rope_local_base_freq=10.0, sliding_window_pattern=3)
    (tmp_path / "config.json").write_text(json.dumps(config))
    loaded = load_checkpoint(tmp_path, device="cpu")
    assert loaded.config.sliding_layers == (0, 1) and loaded.config.rotary_base_local == 10.0
    check(loaded, model)


# --- OLMo ------------------------------------------------------------------------------------

@pytest.mark.parametrize("clip", [None, 0.5])
def test_olmo_parameter_free_layernorm_and_qkv_clipping(tmp_path, clip):
    model = build("OlmoConfig", "OlmoForCausalLM", clip_qkv=clip)
    loaded = save_and_open(model, tmp_path)
    cfg = loaded.config
    assert loaded.arch == "olmo" and cfg.norm == "layernorm" and not cfg.norm_affine and cfg.qkv_clip == clip
    assert loaded.model.blocks[0].ln1.weight is None
    check(loaded, model, final_norm=True)
    if clip is not None:
        assert np.abs(loaded.trace_ids(IDS)["blocks.0.attn.v"]).max() <= clip


def test_olmo2_output_norms_and_whole_projection_qk_norms(tmp_path):
    model = build("Olmo2Config", "Olmo2ForCausalLM", num_key_value_heads=2)
    loaded = save_and_open(model, tmp_path)
    cfg = loaded.config
    assert loaded.arch == "olmo2" and cfg.norm_placement == "output" and cfg.qk_norm == "full"
    assert loaded.model.blocks[0].ln1 is None and loaded.model.blocks[0].ln1_out is not None
    check(loaded, model)
    trace = loaded.trace_ids(IDS)
    assert trace["blocks.0.attn.q_norm.mean_square"].shape == (len(IDS),)
    assert "blocks.0.ln1_out.mean_square" in trace.keys()


# --- StableLM --------------------------------------------------------------------------------

@pytest.mark.parametrize("parallel", [False, True])
def test_stablelm_partial_rotary_layernorm_qkv_bias_and_per_head_qk_norms(tmp_path, parallel):
    model = build("StableLmConfig", "StableLmForCausalLM", num_key_value_heads=2, use_qkv_bias=True,
                  qk_layernorm=True, use_parallel_residual=parallel, partial_rotary_factor=0.25)
    loaded = save_and_open(model, tmp_path)
    cfg = loaded.config
    assert loaded.arch == "stablelm" and cfg.norm == "layernorm" and cfg.rotary_dim == 4
    assert cfg.qk_norm == "per_head" and cfg.parallel_residual is parallel and cfg.attn_out_bias is False
    check(loaded, model)


def test_stablelm_plain(tmp_path):
    model = build("StableLmConfig", "StableLmForCausalLM", partial_rotary_factor=0.5, tie_word_embeddings=True)
    loaded = save_and_open(model, tmp_path)
    assert loaded.config.rotary_dim == 8 and loaded.config.qk_norm == "none" and loaded.config.tie_embeddings
    check(loaded, model)


# --- Granite ---------------------------------------------------------------------------------

def test_granite_multipliers(tmp_path):
    model = build("GraniteConfig", "GraniteForCausalLM", num_key_value_heads=2, embedding_multiplier=6.0,
                  attention_multiplier=0.05, residual_multiplier=0.3, logits_scaling=4.0)
    loaded = save_and_open(model, tmp_path)
    cfg = loaded.config
    assert loaded.arch == "granite"
    assert (cfg.embed_scale, cfg.attn_scale, cfg.residual_scale, cfg.logit_scale) == (6.0, 0.05, 0.3, 0.25)
    check(loaded, model)
    trace = loaded.trace_ids(IDS)  # attn.out is what the sublayer adds: the residual stream's step
    np.testing.assert_allclose(trace["blocks.0.resid_mid"] - trace["blocks.0.resid_pre"], trace["blocks.0.attn.out"],
                               atol=1e-5)


# --- half-precision files ----------------------------------------------------------------------

@pytest.mark.parametrize("half", ["bfloat16", "float16"])
def test_half_precision_checkpoints_load_into_float32(tmp_path, half):
    """A bf16/fp16 safetensors file (how most checkpoints ship) opens; each weight is converted to
    the compute dtype exactly, and the model matches transformers reading the same file."""
    from safetensors import safe_open
    from transformers import Gemma2ForCausalLM

    from explorer.core.checkpoint import load_checkpoint

    build("Gemma2Config", "Gemma2ForCausalLM", **GEMMA2).to(getattr(torch, half)).save_pretrained(tmp_path)
    with safe_open(str(tmp_path / "model.safetensors"), "pt") as f:
        stored = {name: f.get_tensor(name) for name in f.keys()}  # noqa: SIM118 (safe_open has no __iter__)
    assert {t.dtype for t in stored.values()} == {getattr(torch, half)}
    loaded = load_checkpoint(tmp_path, device="cpu", dtype="float32")
    assert loaded.dtype == torch.float32
    embed = stored["model.embed_tokens.weight"]
    assert torch.equal(loaded.model.embed.weight, embed.float())
    reference = Gemma2ForCausalLM.from_pretrained(tmp_path, dtype=torch.float32, attn_implementation="eager").eval()
    check(loaded, reference)


# --- the trace stays exact and the sizes known for every new switch -----------------------------

FAMILIES = {
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", GEMMA2),
    "olmo2": ("Olmo2Config", "Olmo2ForCausalLM", {"num_key_value_heads": 2}),
    "stablelm": ("StableLmConfig", "StableLmForCausalLM", {"qk_layernorm": True, "use_qkv_bias": True}),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {"num_key_value_heads": 2, "head_dim": 16}),
    "granite": ("GraniteConfig", "GraniteForCausalLM", {"residual_multiplier": 0.5, "attention_multiplier": 0.1}),
}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_compact_traces_rederive_everything_and_sizes_are_known(tmp_path, family):
    from explorer.core.trace import KINDS, CaptureSpec, estimate_nbytes

    config_name, model_name, overrides = FAMILIES[family]
    loaded = save_and_open(build(config_name, model_name, **overrides), tmp_path)
    full = loaded.trace_ids(IDS, CaptureSpec.everything())
    compact = loaded.trace_ids(IDS, CaptureSpec.compact())
    assert set(full.stored_keys()) <= set(compact.keys())
    for key in full.stored_keys():  # stored by the forward pass = derived from the compact trace
        np.testing.assert_allclose(compact[key], full[key], atol=1e-5, rtol=0, err_msg=key)
    for spec in (CaptureSpec.full(), CaptureSpec.compact(), CaptureSpec(kinds=frozenset(KINDS), dtype="float16")):
        trace = loaded.trace_ids(IDS, spec)
        assert estimate_nbytes(loaded.config, len(IDS), spec) == trace.nbytes - trace.token_ids.nbytes


def test_new_switches_survive_a_json_round_trip(tmp_path):
    """The native format stores ModelConfig as JSON: tuples (sliding layers, RoPE scaling) come back equal."""
    from explorer.core.config import ModelConfig
    from explorer.core.model import Transformer
    from explorer.core.trace import CaptureSpec

    loaded = save_and_open(build("Gemma3TextConfig", "Gemma3ForCausalLM", num_hidden_layers=3, head_dim=16,
                                 sliding_window=4, rope_parameters={
                                     "sliding_attention": {"rope_type": "default", "rope_theta": 10.0},
                                     "full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 100.0}},
                                 layer_types=["sliding_attention", "sliding_attention", "full_attention"]),
                           tmp_path)
    again = ModelConfig.from_dict(json.loads(loaded.config.to_json()))
    assert again == loaded.config and hash(again) == hash(loaded.config)
    assert again.rope == {"rope_type": "linear", "factor": 2.0} and again.sliding_layers == (0, 1)
    model = Transformer(again).eval()
    model.load_state_dict(loaded.model.state_dict())
    with torch.no_grad():
        np.testing.assert_array_equal(model(torch.tensor([IDS]))[0].numpy(),
                                      loaded.trace_ids(IDS, CaptureSpec.compact())["logits"])


@pytest.mark.parametrize("family", ["gemma", "olmo"])
def test_a_neurons_vocabulary_effect_folds_the_final_norms_own_gain(tmp_path, family):
    """Gemma's final norm multiplies by (1 + w); OLMo's has no weight at all."""
    from explorer.core.analysis.neurons import neuron_vocab_effect

    names = {"gemma": ("GemmaConfig", "GemmaForCausalLM"), "olmo": ("OlmoConfig", "OlmoForCausalLM")}[family]
    loaded = save_and_open(build(*names), tmp_path)
    model = loaded.model
    top, values, _, _ = neuron_vocab_effect(loaded.trace_ids(IDS), 1, 7, k=5)
    direction = model.blocks[1].mlp.W_out.weight[:, 7].detach()
    if family == "gemma":
        direction = direction * (1.0 + model.ln_final.weight.detach())
    expected = (model.unembed.weight.detach() @ direction).numpy()
    np.testing.assert_allclose(values, expected[top], rtol=1e-5, atol=1e-5)
    assert values[0] == pytest.approx(float(expected.max()), rel=1e-5)


def test_multimodal_gemma3_opens_as_its_language_model(tmp_path):
    """Gemma 3 4B and larger are Gemma3ForConditionalGeneration files: the text model is checked
    against the whole multimodal model run on token ids (no image)."""
    import transformers

    text = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
                num_key_value_heads=2, head_dim=16, sliding_window=4, max_position_embeddings=64,
                query_pre_attn_scalar=16, layer_types=["sliding_attention", "full_attention", "sliding_attention"])
    vision = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=1, num_attention_heads=2, image_size=28,
                  patch_size=14)
    config = transformers.Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=4,
                                       image_token_index=VOCAB - 1, boi_token_index=VOCAB - 3,
                                       eoi_token_index=VOCAB - 2, attn_implementation="eager")
    torch.manual_seed(0)
    model = transformers.Gemma3ForConditionalGeneration(config).eval()
    spread_weights(model)
    loaded = save_and_open(model, tmp_path)
    assert loaded.arch == "gemma3" and loaded.config.sliding_layers == (0, 2) and loaded.config.qk_norm == "head"
    assert any("vision tower" in note for note in loaded.notes)
    check(loaded, model)
