"""Interventions against hand-made references: transformers with weights edited, or hooks on its modules."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from explorer.core.checkpoint import load_checkpoint
from explorer.core.generation.generate import generate
from explorer.core.generation.sampling import SamplingParams
from explorer.core.interventions.apply import Intervener, resolve, run
from explorer.core.interventions.spec import Intervention, InterventionError, parse_spec
from explorer.core.trace import CaptureSpec

PROMPT = "The quick brown fox jumps over the lazy dog. The quick brown fox"
IDS = [5, 17, 99, 3, 250, 42, 42, 7, 131, 64, 200, 11, 9, 77]
TOL = 1e-4


def hf_logits(model, ids) -> np.ndarray:
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].numpy()


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    import transformers as T

    torch.manual_seed(0)
    config = T.LlamaConfig(vocab_size=300, hidden_size=32, intermediate_size=48, num_hidden_layers=3,
                           num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                           attn_implementation="eager")
    model = T.LlamaForCausalLM(config).eval()
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():  # unit-scale weights so that ablations move the logits visibly
        for name, p in model.named_parameters():
            if p.dim() > 1:
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[-1]))
    path = tmp_path_factory.mktemp("llama-iv")
    model.save_pretrained(path)
    return load_checkpoint(path, device="cpu"), path


def test_parse_spec() -> None:
    assert parse_spec("1.2").key == ("head", 1, 2, "zero", None)
    assert parse_spec("mlp0:37", "mean").key == ("neuron", 0, 37, "mean", None)
    assert parse_spec("attn3").key == ("attn", 3, None, "zero", None)
    assert parse_spec("mlp2").key == ("mlp", 2, None, "zero", None)
    for bad in ("1", "head1.2", "mlp:3", "attn", "1.2.3"):
        with pytest.raises(InterventionError):
            parse_spec(bad)


@pytest.mark.parametrize("layer,head", [(0, 1), (2, 3)])
def test_zero_head_equals_gpt2_with_its_output_columns_zeroed(tiny_gpt2, layer, head) -> None:
    loaded, reference = tiny_gpt2
    ids = loaded.tokenizer.encode(PROMPT)
    dh = loaded.config.d_head
    ours = run(loaded.model, ids, [Intervention("head", layer, head)]).numpy()
    edited = type(reference)(reference.config).eval()
    edited.load_state_dict(reference.state_dict())
    with torch.no_grad():  # GPT-2's Conv1D holds W_O as [H*dh, d]: the head's rows are its columns of W_O
        edited.transformer.h[layer].attn.c_proj.weight[head * dh:(head + 1) * dh] = 0
    expected = hf_logits(edited, ids)
    assert np.abs(ours - expected).max() < TOL
    assert np.abs(expected - hf_logits(reference, ids)).max() > 1e-3  # the ablation changed something


def test_zero_head_equals_llama_with_its_output_columns_zeroed(llama) -> None:
    import transformers as T

    loaded, path = llama
    layer, head, dh = 1, 2, loaded.config.d_head
    reference = T.LlamaForCausalLM.from_pretrained(path, attn_implementation="eager").eval()
    clean = hf_logits(reference, IDS)
    with torch.no_grad():
        reference.model.layers[layer].self_attn.o_proj.weight[:, head * dh:(head + 1) * dh] = 0
    expected = hf_logits(reference, IDS)
    ours = run(loaded.model, IDS, [Intervention("head", layer, head)]).numpy()
    assert np.abs(ours - expected).max() < TOL
    assert np.abs(expected - clean).max() > 1e-2


def test_mean_ablation_equals_a_constant_head_output(tiny_gpt2) -> None:
    """Replacing z_h by its mean over the prompt = W_O,h's rows zeroed and W_O,h @ mean added to the bias."""
    loaded, reference = tiny_gpt2
    ids = loaded.tokenizer.encode(PROMPT)
    layer, head, dh = 1, 2, loaded.config.d_head
    z = loaded.trace_ids(ids)[f"blocks.{layer}.attn.z"][head]          # [n, dh], the clean run
    mean = torch.from_numpy(z.mean(0).copy())
    edited = type(reference)(reference.config).eval()
    edited.load_state_dict(reference.state_dict())
    proj = edited.transformer.h[layer].attn.c_proj
    with torch.no_grad():
        proj.bias += mean @ proj.weight[head * dh:(head + 1) * dh]
        proj.weight[head * dh:(head + 1) * dh] = 0
    ours = run(loaded.model, ids, [Intervention("head", layer, head, "mean")]).numpy()
    assert np.abs(ours - hf_logits(edited, ids)).max() < TOL
    resolved = resolve(loaded.model, ids, [Intervention("head", layer, head, "mean")])[0]
    np.testing.assert_allclose(resolved.value, z.mean(0), atol=1e-6)


def test_neuron_and_sublayer_ablation_by_hooks(tiny_gpt2) -> None:
    """A neuron zeroed / mean-ablated and a whole FFN zeroed, checked with hooks on transformers' modules."""
    loaded, reference = tiny_gpt2
    ids = loaded.tokenizer.encode(PROMPT)
    post = loaded.trace_ids(ids)["blocks.0.mlp.post"][:, 7]
    mlp = reference.transformer.h[0].mlp

    def with_hook(module, hook) -> np.ndarray:
        handle = module.register_forward_pre_hook(hook)
        try:
            return hf_logits(reference, ids)
        finally:
            handle.remove()

    def set_neuron(value):
        def hook(_, args):
            x = args[0].clone()
            x[..., 7] = value
            return (x,)
        return hook

    for mode, value in (("zero", 0.0), ("mean", float(post.mean()))):
        ours = run(loaded.model, ids, [Intervention("neuron", 0, 7, mode)]).numpy()
        assert np.abs(ours - with_hook(mlp.c_proj, set_neuron(value))).max() < TOL
    handle = mlp.register_forward_hook(lambda m, a, out: torch.zeros_like(out))
    try:
        expected = hf_logits(reference, ids)
    finally:
        handle.remove()
    assert np.abs(run(loaded.model, ids, [Intervention("mlp", 0)]).numpy() - expected).max() < TOL


def test_patching_a_head_equals_a_hook_that_copies_it(tiny_gpt2) -> None:
    loaded, reference = tiny_gpt2
    clean = loaded.tokenizer.encode(PROMPT)
    corrupt = list(clean)
    corrupt[3] = clean[5]
    layer, head, dh = 1, 0, loaded.config.d_head
    clean_z = loaded.trace_ids(clean)[f"blocks.{layer}.attn.z"]       # [H, n, dh]
    source = clean_z[head]

    def hook(_, args):
        x = args[0].clone()
        x[0, :, head * dh:(head + 1) * dh] = torch.from_numpy(source.copy())
        return (x,)

    handle = reference.transformer.h[layer].attn.c_proj.register_forward_pre_hook(hook)
    try:
        expected = hf_logits(reference, corrupt)
    finally:
        handle.remove()
    ours = run(loaded.model, corrupt, [Intervention("head", layer, head, "patch", value=source)]).numpy()
    assert np.abs(ours - expected).max() < TOL
    # only positions 4 and 6: the others keep the corrupted run's values
    part = Intervention("head", layer, head, "patch", positions=(4, 6), value=source)
    trace = loaded.trace_ids(corrupt, interventions=[part])
    z = trace[f"blocks.{layer}.attn.z"][head]
    corrupt_z = loaded.trace_ids(corrupt)[f"blocks.{layer}.attn.z"][head]
    np.testing.assert_array_equal(z[[4, 6]], source[[4, 6]])
    np.testing.assert_array_equal(z[:4], corrupt_z[:4])


def test_patching_everything_restores_clean_and_nothing_leaves_corrupt(tiny_gpt2) -> None:
    loaded, _ = tiny_gpt2
    model = loaded.model
    clean = loaded.tokenizer.encode(PROMPT)
    corrupt = list(clean)
    corrupt[2], corrupt[8] = clean[9], clean[1]
    clean_trace, corrupt_trace = loaded.trace_ids(clean), loaded.trace_ids(corrupt)
    L = loaded.config.n_layers
    every_layer = [Intervention("resid", layer, None, "patch", value=clean_trace[f"blocks.{layer}.resid_pre"])
                   for layer in range(L)]
    patched = run(model, corrupt, every_layer).numpy()
    assert np.array_equal(patched, clean_trace["logits"])
    # in one batch: element 0 patches everything, element 1 nothing
    ids = torch.tensor([corrupt, corrupt])
    with torch.inference_mode():
        both = model(ids, Intervener([every_layer, []], L)).numpy()
    np.testing.assert_allclose(both[0], clean_trace["logits"], atol=1e-5, rtol=0)
    np.testing.assert_allclose(both[1], corrupt_trace["logits"], atol=1e-5, rtol=0)
    assert np.abs(clean_trace["logits"] - corrupt_trace["logits"]).max() > 1e-2


def test_intervened_trace_derives_what_it_stores(tiny_gpt2) -> None:
    """A compact trace re-runs blocks with the interventions: derived values equal the stored ones."""
    loaded, _ = tiny_gpt2
    ids = loaded.tokenizer.encode(PROMPT)
    ivs = [Intervention("head", 0, 1, "mean"), Intervention("neuron", 1, 3), Intervention("attn", 2)]
    full = loaded.trace_ids(ids, CaptureSpec.full(), interventions=ivs)
    compact = loaded.trace_ids(ids, CaptureSpec.compact(), interventions=ivs)
    for key in ("blocks.0.attn.z", "blocks.1.mlp.post", "blocks.2.attn.out", "logits", "blocks.2.attn.pattern"):
        np.testing.assert_allclose(compact[key], full[key], atol=1e-5, rtol=0, err_msg=key)
    assert not full["blocks.2.attn.out"].any()
    assert not full["blocks.1.mlp.post"][:, 3].any()
    assert full.meta.extra["interventions"][0] == {"target": "head", "layer": 0, "mode": "mean", "index": 1}


def test_generation_with_interventions_follows_the_intervened_forward_pass(tiny_gpt2) -> None:
    loaded, _ = tiny_gpt2
    prompt = loaded.tokenizer.encode(PROMPT)
    ivs = [Intervention("attn", 0), Intervention("head", 1, 2, "mean"), Intervention("mlp", 1)]
    params = SamplingParams(temperature=0.0, max_new_tokens=8, stop_at_eos=False)
    plain = generate(loaded, prompt, params).token_ids
    for use_cache in (True, False):
        steered = generate(loaded, prompt, params, use_cache=use_cache, interventions=ivs).token_ids
        assert steered != plain
        # the same interventions (means from the prompt) on the whole sequence give the same choices
        resolved = resolve(loaded.model, prompt, ivs)
        logits = run(loaded.model, prompt + steered, resolved).numpy()
        assert logits[len(prompt) - 1:-1].argmax(-1).tolist() == steered


def test_bad_interventions_are_refused(tiny_gpt2) -> None:
    loaded, _ = tiny_gpt2
    ids = loaded.tokenizer.encode(PROMPT)
    for iv in (Intervention("head", 3, 0), Intervention("head", 0, 4), Intervention("neuron", 0, 256),
               Intervention("resid", 4)):
        with pytest.raises(InterventionError):
            run(loaded.model, ids, [iv])
    run(loaded.model, ids, [Intervention("resid", 3)])  # L: the stream after the last block


# --- activation patching and direct logit attribution -----------------------------------------

def corrupted(clean: list[int]) -> list[int]:
    out = list(clean)
    out[2], out[5] = clean[9], clean[1]
    return out


def test_patching_grids_equal_single_patched_runs(tiny_gpt2) -> None:
    from explorer.core.interventions.patching import activation_patching

    loaded, _ = tiny_gpt2
    model = loaded.model
    clean = loaded.tokenizer.encode(PROMPT)
    corrupt = corrupted(clean)
    pos, L = 10, loaded.config.n_layers
    target, distractor = clean[pos + 1], corrupt[pos + 1] if corrupt[pos + 1] != clean[pos + 1] else 0
    updates = []
    res = activation_patching(model, clean, corrupt, target, distractor, position=pos, batch_size=7,
                              progress=updates.append)
    clean_logits, corrupt_logits = run(model, clean), run(model, corrupt)

    def metric(logits):
        return float(logits[pos, target] - logits[pos, distractor])

    assert res.clean_metric == pytest.approx(metric(clean_logits), abs=1e-4)
    assert res.corrupt_metric == pytest.approx(metric(corrupt_logits), abs=1e-4)
    share = lambda logits: (metric(logits) - res.corrupt_metric) / (res.clean_metric - res.corrupt_metric)  # noqa: E731
    trace = loaded.trace_ids(clean)
    for layer, p in ((0, 2), (1, 5), (2, 10), (1, 3), (3, 10), (2, 1)):
        stream = trace["resid_final"] if layer == L else trace[f"blocks.{layer}.resid_pre"]
        iv = Intervention("resid", layer, None, "patch", (p,), stream)
        assert res.resid[layer, p] == pytest.approx(share(run(model, corrupt, [iv])), abs=1e-4)
    for layer, head in ((0, 0), (1, 3), (2, 1)):
        iv = Intervention("head", layer, head, "patch", value=trace[f"blocks.{layer}.attn.z"][head])
        assert res.heads[layer, head] == pytest.approx(share(run(model, corrupt, [iv])), abs=1e-4)
    assert res.resid[L, pos] == pytest.approx(1.0, abs=1e-5)   # the final stream at the target position: all
    assert res.resid[0, pos] == pytest.approx(0.0, abs=1e-4)   # the same token at the start: nothing
    assert not res.resid[:, pos + 1:].any()                    # later positions cannot matter
    assert np.abs(res.resid[0, [2, 5]]).max() > 0.05           # the changed tokens do
    # not run: positions 0-1 (before the first changed token) in every stream, the final stream at 2..pos-1,
    # the embeddings of the 7 unchanged tokens among 2..10
    assert res.skipped == 2 * (L + 1) + (pos - 2) + 7 and res.runs + res.skipped == (L + 1) * (pos + 1) + L * 4
    assert not res.resid[:, :2].any() and not res.resid[L, :pos].any()
    assert updates[-1].done == updates[-1].total == res.runs + res.skipped and len(updates) == res.batches + 1
    assert res.positions_run < res.runs * (pos + 1)  # residual patches at p start at p


def test_patching_cancels_and_refuses_bad_prompts(tiny_gpt2) -> None:
    import threading

    from explorer.core.interventions.patching import patching_steps

    loaded, _ = tiny_gpt2
    clean = loaded.tokenizer.encode(PROMPT)
    stop = threading.Event()
    steps = patching_steps(loaded.model, clean, corrupted(clean), clean[-1], batch_size=4, cancel=stop)
    next(steps)
    stop.set()
    with pytest.raises(StopIteration) as finished:
        next(steps)
    assert finished.value.value.cancelled and finished.value.value.runs <= 4
    with pytest.raises(InterventionError, match="same length"):
        next(patching_steps(loaded.model, clean, clean[:-1], 0))
    with pytest.raises(InterventionError, match="nothing for patching"):
        next(patching_steps(loaded.model, clean, clean, 0))


@pytest.mark.parametrize("which", ["gpt2", "llama"])
def test_direct_logit_attribution_sums_to_the_logit(tiny_gpt2, llama, which) -> None:
    from explorer.core.analysis.dla import direct_logit_attribution

    loaded = tiny_gpt2[0] if which == "gpt2" else llama[0]
    ids = loaded.tokenizer.encode(PROMPT)[:14] if which == "gpt2" else IDS
    trace = loaded.trace_ids(ids)
    L, H = loaded.config.n_layers, loaded.config.n_heads
    for pos, target, distractor in ((-1, 11, None), (4, 200, 7)):
        dla = direct_logit_attribution(trace, target, pos, distractor)
        assert dla.heads.shape == (L, H) and dla.mlp.shape == (L,)
        logits = trace["logits"][pos]
        expected = logits[target] - (logits[distractor] if distractor is not None else 0.0)
        assert abs(dla.total - expected) <= 1e-4
        assert abs(dla.logit - expected) <= 1e-6
        assert np.abs(dla.heads).max() > 1e-3 and np.abs(dla.mlp).max() > 1e-3
    # a switched-off head writes nothing; a switched-off FFN neither
    ablated = loaded.trace_ids(ids, interventions=[Intervention("head", 1, 2), Intervention("mlp", 0)])
    dla = direct_logit_attribution(ablated, 11)
    assert dla.heads[1, 2] == 0.0 and abs(dla.mlp[0]) < 1e-12
    assert abs(dla.total - ablated["logits"][-1, 11]) <= 1e-4


@pytest.mark.parametrize("switches", [
    dict(norm="rmsnorm", norm_offset=1.0, gated_ffn=True, activation="silu", attn_bias=False, mlp_bias=False),
    dict(residual_scale=0.4, logit_scale=0.25, embed_scale=2.0),
    dict(parallel_residual=True, n_kv_heads=1, positions="rotary"),
])
def test_direct_logit_attribution_on_other_switches(switches) -> None:
    """Gemma-style offset RMSNorm, Granite-style scales, a parallel block with GQA: the terms still add up."""
    from explorer.core.analysis.dla import direct_logit_attribution
    from explorer.core.config import ModelConfig
    from explorer.core.model import Transformer
    from explorer.core.trace import capture

    torch.manual_seed(3)
    cfg = ModelConfig(vocab_size=60, n_ctx=16, d_model=16, n_layers=2, n_heads=2, d_head=8, d_ff=32, **switches)
    model = Transformer(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    trace, logits = capture(model, [1, 5, 9, 3, 7], ["t"] * 5)
    dla = direct_logit_attribution(trace, 11, 3, 4)
    assert abs(dla.total - (logits[3, 11] - logits[3, 4])) <= 1e-4
    assert np.abs(dla.heads).max() > 1e-3


def test_direct_logit_attribution_refuses_post_norm() -> None:
    from explorer.core.analysis.dla import DLAError, direct_logit_attribution
    from explorer.core.config import ModelConfig
    from explorer.core.model import Transformer
    from explorer.core.trace import capture

    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=50, n_ctx=16, d_model=16, n_layers=2, n_heads=2, d_head=8, d_ff=32,
                      norm_placement="post")
    trace, _ = capture(Transformer(cfg).eval(), [1, 2, 3, 4], ["a"] * 4)
    with pytest.raises(DLAError, match="pre-norm"):
        direct_logit_attribution(trace, 3)


def test_compare_runs_by_hand() -> None:
    from explorer.core.analysis.changes import compare_runs

    before = np.log(np.array([[0.5, 0.3, 0.2], [0.1, 0.6, 0.3], [0.2, 0.2, 0.6]]))
    after = np.log(np.array([[0.5, 0.3, 0.2], [0.7, 0.2, 0.1], [0.2, 0.2, 0.6]]))
    c = compare_runs(before, after, np.array([0, 2, 1]), position=1, top=2)
    assert c.position == 1 and c.ids.tolist() == [0, 1]     # 0.7 (after) and 0.6 (before) lead
    np.testing.assert_allclose(c.p_before, [0.1, 0.6])
    np.testing.assert_allclose(c.p_after, [0.7, 0.2])
    assert c.kl == pytest.approx(0.1 * np.log(0.1 / 0.7) + 0.6 * np.log(0.6 / 0.2) + 0.3 * np.log(0.3 / 0.1))
    np.testing.assert_allclose(c.next_before, np.log([0.2, 0.6]))   # token 2 after position 0, token 1 after 1
    np.testing.assert_allclose(c.next_delta, [0.0, np.log(0.2 / 0.6)])
