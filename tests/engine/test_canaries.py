"""White-box gradient canaries (privbench/engine/canaries.py): what the engine adds for them,
exactly."""

from __future__ import annotations

import math

import pytest
import torch

from privbench.engine.canaries import GradientCanaries, inserted
from privbench.engine.grads import batch_grads, clipped_grad_sum, per_sample_grads
from privbench.errors import NotApplicable
from privbench.models import build_model


def _batch(seed: int = 0):
    fm = build_model("mlp", (1, 8, 8), 10)
    gen = torch.Generator().manual_seed(seed)
    params = torch.stack([fm.init(gen), fm.init(gen)])  # (2, d)
    x = torch.rand(2, 5, 1, 8, 8, generator=gen)
    y = torch.randint(0, 10, (2, 5), generator=gen)
    mask = torch.ones(2, 5, dtype=torch.bool)
    mask[1, 4] = False
    return fm, params, x, y, mask


def test_canaries_add_their_clipped_gradient_to_the_sum_and_nothing_else():
    fm, params, x, y, mask = _batch()
    bank = GradientCanaries(torch.tensor([3, 17, 40]), norm=2.0)
    yc = y.clone()
    yc[0, 1], yc[1, 2], yc[1, 4] = bank.labels(torch.tensor([0, 2, 1]))  # (1, 4) not sampled
    real = mask & (yc >= 0)
    expect, _ = clipped_grad_sum(fm, params, x, y, real, 0.5)
    expect[0, 3] += 0.5  # canary 0 clipped from norm 2 to 0.5
    expect[1, 40] += 0.5  # canary 2
    with inserted(bank):
        got, norms = clipped_grad_sum(fm, params, x, yc, mask, 0.5)
    assert torch.allclose(got, expect, atol=1e-6)
    assert norms[0, 1] == 2.0
    with inserted(bank):  # clipping off: the canary keeps its norm
        off, _ = clipped_grad_sum(fm, params, x, yc, mask, math.inf)
    base, _ = clipped_grad_sum(fm, params, x, y, real, math.inf)
    assert off[0, 3] - base[0, 3] == pytest.approx(2.0, abs=1e-5)


def test_canaries_count_in_the_batch_mean_and_are_refused_per_sample():
    fm, params, x, y, mask = _batch(1)
    bank = GradientCanaries(torch.tensor([5, 6]), norm=3.0)
    yc = y.clone()
    yc[0, 0] = bank.labels(torch.tensor([1]))[0]
    real = mask & (yc >= 0)
    mean_real = batch_grads(fm, params, x, y, real)  # (2, d)
    with inserted(bank):
        got = batch_grads(fm, params, x, yc, mask)
        with pytest.raises(NotApplicable):
            per_sample_grads(fm, params, x, yc)
    expect = mean_real.clone()
    expect[0] = mean_real[0] * 4 / 5
    expect[0, 6] += 3.0 / 5
    assert torch.allclose(got, expect, atol=1e-6)


def test_vector_canaries_are_clipped_as_any_sample_and_counted_in_the_batch_mean():
    from privbench.engine.canaries import VectorCanaries

    fm, params, x, y, mask = _batch(2)
    gen = torch.Generator().manual_seed(3)
    v = torch.randn(2, fm.d, generator=gen)
    v = v * torch.tensor([[4.0], [0.1]]) / v.norm(dim=1, keepdim=True)  # norms 4 and 0.1
    bank = VectorCanaries(v)
    yc = y.clone()
    yc[0, 1], yc[1, 2] = -1, -2  # canary 0 at node 0, canary 1 at node 1
    real = mask & (yc >= 0)
    expect, _ = clipped_grad_sum(fm, params, x, y, real, 0.5)
    expect[0] += v[0] * 0.5 / 4  # clipped from norm 4 to 0.5
    expect[1] += v[1]  # below the bound: whole
    with inserted(bank):
        got, norms = clipped_grad_sum(fm, params, x, yc, mask, 0.5)
        mean = batch_grads(fm, params, x, yc, mask)
    assert torch.allclose(got, expect, atol=1e-5)
    assert float(norms[0, 1]) == pytest.approx(4.0)
    count = mask.sum(dim=1).double()  # (2,) the canary counts as a sample of the mean
    real_mean = batch_grads(fm, params, x, y, real)
    rest = 1 + (real_mean * (count - 1)[:, None].to(real_mean)).norm(dim=1, keepdim=True)
    want = real_mean * ((count - 1) / count)[:, None].to(real_mean) + \
        v * rest / count[:, None].to(v)  # the canary outweighs the real gradient sum
    assert torch.allclose(mean, want, atol=1e-5)
