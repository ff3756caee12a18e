"""Engine helpers: clipping, masked sums, accuracy, the round loop."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from privbench.engine.evaluation import accuracy
from privbench.engine.grads import (
    batch_grads,
    clip_l1,
    clip_l2,
    looped_batch_grads,
    masked_sum,
    vmapped_batch_grads,
)
from privbench.models import build_model


@settings(max_examples=25, deadline=None)
@given(st.floats(0.01, 10.0), st.integers(0, 1000))
def test_clip_l2_bounds_norms_and_keeps_small_rows(bound, seed):
    g = torch.randn(3, 5, 17, generator=torch.Generator().manual_seed(seed)) * 3
    clipped, norms = clip_l2(g, bound)
    assert torch.all(clipped.norm(dim=-1) <= bound * (1 + 1e-5))
    small = norms <= bound
    assert torch.allclose(clipped[small], g[small])
    # direction is preserved
    cos = torch.nn.functional.cosine_similarity(clipped, g, dim=-1)
    assert torch.all(cos > 1 - 1e-5)


@settings(max_examples=25, deadline=None)
@given(st.floats(0.01, 10.0), st.integers(0, 1000))
def test_clip_l1_bounds_l1_norms(bound, seed):
    g = torch.randn(4, 9, generator=torch.Generator().manual_seed(seed))
    clipped, norms = clip_l1(g, bound)
    assert torch.all(clipped.abs().sum(-1) <= bound * (1 + 1e-5))
    assert torch.allclose(norms, g.abs().sum(-1))


def test_clip_with_per_node_bounds():
    g = torch.ones(2, 3, 4)  # per-sample norm 2
    clipped, _ = clip_l2(g, torch.tensor([[1.0], [4.0]]))
    assert torch.allclose(clipped[0].norm(dim=-1), torch.ones(3))
    assert torch.allclose(clipped[1], g[1])


def test_masked_sum_ignores_padding():
    g = torch.arange(2 * 3 * 2, dtype=torch.float32).reshape(2, 3, 2)
    mask = torch.tensor([[True, False, True], [False, False, False]])
    out = masked_sum(g, mask)
    assert torch.equal(out[0], g[0, 0] + g[0, 2]) and torch.equal(out[1], torch.zeros(2))


def test_accuracy_matches_module_predictions():
    fm = build_model("mlp", (1, 8, 8), 10)
    gen = torch.Generator().manual_seed(0)
    params = torch.stack([fm.init(gen) for _ in range(2)])
    x, y = torch.rand(50, 1, 8, 8, generator=gen), torch.randint(0, 10, (50,), generator=gen)
    acc = accuracy(fm, params, x, y, chunk=16)
    for i in range(2):
        pred = fm.forward(params[i], x).argmax(-1)
        assert abs(acc[i].item() - (pred == y).float().mean().item()) < 1e-6


def _rows_and_batches(model: str, shape: tuple[int, ...], m: int = 3, b: int = 8):
    """m different parameter rows of `model`, batches (m, b, *shape), a mask with one padded
    slot per row and one row of padding only; in float64, so that two layouts' rounding cannot
    flip a max-pool's choice between near-equal inputs (in float32 one such flip in 25,000
    windows moves a gradient entry by a whole sample's share)."""
    fm = build_model(model, shape, 10)
    fm.module.double()
    gen = torch.Generator().manual_seed(0)
    params = torch.stack([fm.init(gen) for _ in range(m)]).double()  # (m, d)
    x = torch.randn(m, b, *shape, generator=gen, dtype=torch.float64)
    y = torch.randint(0, 10, (m, b), generator=gen)
    mask = torch.ones(m, b, dtype=torch.bool)
    mask[:, -1] = False
    mask[1] = False  # a node whose epoch has ended: its gradient is zero
    return fm, params, x, y, mask


@pytest.mark.parametrize(("model", "shape"), [("cnn", (1, 28, 28)), ("lenet5", (1, 28, 28)),
                                              ("resnet", (3, 32, 32)), ("lenet", (1, 32, 32))])
def test_conv_batch_grads_loop_on_the_cpu_and_equal_the_vmap(model, shape):
    """On the CPU a conv model's batch step loops over the rows in channels-last layout (faster
    there than vmap's grouped convolution); it is the same gradient of the same masked mean
    loss, to float rounding, and each row is that row's own nn.Module gradient."""
    fm, params, x, y, mask = _rows_and_batches(model, shape)
    assert fm.convolutional
    with torch.no_grad():  # as callers run it (torch.func.grad ignores an outer no_grad)
        got = batch_grads(fm, params, x, y, mask)
    live = mask.any(dim=1)
    assert torch.equal(got[live], looped_batch_grads(fm, params[live], x[live], y[live],
                                                     mask[live]))
    assert torch.equal(got[~live], torch.zeros_like(got[~live]))
    ref = vmapped_batch_grads(fm, params, x, y, mask)
    assert torch.allclose(got, ref, rtol=1e-9, atol=1e-12)
    module = fm.module
    for p, flat in zip(module.parameters(), fm.unflatten(params[0]).values(), strict=True):
        p.data.copy_(flat)
    module.zero_grad(set_to_none=True)
    F.cross_entropy(module(x[0, :-1]), y[0, :-1]).backward()
    own = torch.cat([p.grad.reshape(-1) for p in module.parameters()])
    assert torch.allclose(got[0], own, rtol=1e-9, atol=1e-12)


def test_a_model_without_convolutions_keeps_the_vmap():
    fm, params, x, y, mask = _rows_and_batches("mlp", (1, 8, 8))
    assert not fm.convolutional
    live = mask.any(dim=1)
    got = batch_grads(fm, params, x, y, mask)
    assert torch.equal(got[live], vmapped_batch_grads(fm, params[live], x[live], y[live],
                                                      mask[live]))
