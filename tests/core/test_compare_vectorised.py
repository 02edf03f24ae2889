"""The comparison computed in torch (``compare_traces`` now) equals the numpy computation it replaced,
written out here as the reference, on a tiny model and a copy whose layer-1 queries differ."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from explorer.core.analysis.compare import (
    compare_spec,
    compare_traces,
    cosine,
    depth_map,
    head_js,
    head_js_tensor,
    logit_kl,
    logit_kl_tensor,
    relative_difference,
)
from explorer.core.checkpoint import load_checkpoint
from explorer.core.trace import CaptureSpec

PROMPT = "To be, or not to be, that is the question: whether 'tis nobler in the mind"


def reference(a, b):
    """The numpy computation ``compare_traces`` did before (same depth and heads): resid_cos,
    resid_rel, head_js, logit_kl."""
    layer_map = depth_map(a.config.n_layers, b.config.n_layers)
    keys_a = [f"blocks.{i}.resid_pre" for i in range(a.config.n_layers)] + ["resid_final"]
    keys_b = [f"blocks.{i}.resid_pre" for i in range(b.config.n_layers)] + ["resid_final"]
    cos = np.stack([cosine(a[keys_a[i]], b[keys_b[j]]) for i, j in enumerate(layer_map)])
    rel = np.stack([relative_difference(a[keys_a[i]], b[keys_b[j]]) for i, j in enumerate(layer_map)])
    js = np.stack([head_js(a[f"blocks.{i}.attn.pattern"], b[f"blocks.{min(int(layer_map[i]), b.config.n_layers - 1)}"
                                                              f".attn.pattern"]) for i in range(a.config.n_layers)])
    return cos, rel, js, logit_kl(a["logits"], b["logits"])


@pytest.fixture(scope="module")
def pair():
    a = load_checkpoint("shakespeare", device="cpu")
    b = load_checkpoint("shakespeare", device="cpu")
    with torch.no_grad():
        w = b.model.blocks[1].attn.W_Q.weight
        w.add_(0.5 * torch.randn(w.shape, generator=torch.Generator().manual_seed(1)))
    return a, b


def test_the_torch_comparison_equals_the_numpy_reference(pair):
    a, b = pair
    ids, _ = a.encode(PROMPT)
    ta = a.trace_ids(ids, CaptureSpec.full())
    for spec in (compare_spec(), CaptureSpec.compact(), CaptureSpec.everything()):  # patterns derived, or stored
        tb = b.trace_ids(ids, spec)
        cos, rel, js, kl = reference(ta, tb)
        got = compare_traces(ta, tb)
        np.testing.assert_allclose(got.resid_cos, cos, rtol=0, atol=1e-12)
        np.testing.assert_allclose(got.resid_rel, rel, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(got.head_js, js, rtol=1e-4, atol=1e-7)
        np.testing.assert_allclose(got.logit_kl, kl, rtol=1e-3, atol=1e-6)
        assert np.all(got.head_js[:1] == 0) and np.all(got.head_js[1:].max(-1) > 1e-4)
        assert got.first_block == 1 and got.first_boundary == 2
    assert compare_spec().kinds == {"resid", "logits", "qkv"}


def test_a_model_compared_with_itself_agrees_to_the_last_bit_whatever_a_stored(pair):
    a, _ = pair
    ids, _ = a.encode(PROMPT)
    got = compare_traces(a.trace_ids(ids, CaptureSpec.full()), a.trace_ids(ids, compare_spec()))
    assert np.all(got.resid_cos == 1.0) and np.all(got.resid_rel == 0) and np.all(got.head_js == 0)
    assert np.all(got.logit_kl == 0)


def test_torch_divergences_on_hand_made_arrays():
    p = torch.tensor([[[0.5, 0.5, 0.0], [1.0, 0.0, 0.0]]])  # one head, two query rows, zeros included
    q = torch.tensor([[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]])
    np.testing.assert_allclose(head_js_tensor(p, q), head_js(p.numpy(), q.numpy()), rtol=1e-6)
    assert head_js_tensor(p, p)[0] == 0.0  # 0 where both are 0, not NaN
    la, lb = torch.tensor([[0.0, 0.0], [1.0, 2.0]]), torch.tensor([[0.0, float(np.log(3))], [1.0, 2.0]])
    np.testing.assert_allclose(logit_kl_tensor(la, lb), logit_kl(la.numpy(), lb.numpy()), rtol=1e-6, atol=1e-7)
    many = torch.randn(40, 7)  # several chunks of positions
    import explorer.core.analysis.compare as compare

    old, compare.CHUNK_ELEMENTS = compare.CHUNK_ELEMENTS, 14
    try:
        other = torch.randn(40, 7)
        np.testing.assert_allclose(logit_kl_tensor(many, other), logit_kl(many.numpy(), other.numpy()),
                                   rtol=1e-5, atol=1e-6)
    finally:
        compare.CHUNK_ELEMENTS = old


def test_b_keeps_only_what_its_lens_reads_once_compared(pair):
    from explorer.core.analysis.compare import lens_only
    from explorer.core.analysis.residual import lens_columns

    a, b = pair
    ids, _ = a.encode(PROMPT)
    tb = b.trace_ids(ids, compare_spec())
    slim = lens_only(tb)
    assert any(k.endswith(".attn.q") for k in tb.stored_keys())
    assert all(k == "logits" or ".resid" in k or k.startswith("resid") for k in slim.stored_keys())
    assert len(slim.stored_keys()) == b.config.n_layers * 2 + 2 and slim.nbytes < tb.nbytes
    np.testing.assert_array_equal(slim["logits"], tb["logits"])
    full, kept = lens_columns(tb, 3, 4, top=2), lens_columns(slim, 3, 4, top=2)
    np.testing.assert_array_equal(full.ids, kept.ids)
    np.testing.assert_array_equal(full.probs, kept.probs)
    assert lens_only(slim) is slim


def test_the_lens_at_one_position_equals_the_lens_columns_there(pair):
    from explorer.core.analysis.compare import lens_at
    from explorer.core.analysis.residual import lens_columns

    a, _ = pair
    ids, _ = a.encode(PROMPT)
    trace = a.trace_ids(ids, CaptureSpec.full())
    for position in (0, 5, len(ids) - 1):
        got_ids, got_probs = lens_at(trace, position, top=3)
        want = lens_columns(trace, position, position + 1, top=3)
        assert got_ids.shape == (a.config.n_layers + 1, 3)
        np.testing.assert_array_equal(got_ids, want.ids[:, 0])
        np.testing.assert_allclose(got_probs, want.probs[:, 0], rtol=1e-6, atol=1e-7)
