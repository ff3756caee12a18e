"""Engine helpers: clipping, masked sums, accuracy, the round loop."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from privbench.engine import accuracy, clip_l1, clip_l2, masked_sum
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
