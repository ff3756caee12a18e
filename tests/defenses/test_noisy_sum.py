"""The push-sum DP-SGD defenses' Gaussian release: the clipped sum plus std times one draw of
the run's noise stream."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from defenses._noisy_sum import noisy_clipped_sum
from privbench.engine.grads import clipped_grad_sum
from privbench.models import build_model
from privbench.seeding import Streams, noise_off


def _setup(n: int = 3, b: int = 5):
    fm = build_model("mlp", (1, 8, 8), 10)
    gen = torch.Generator().manual_seed(0)
    params = torch.stack([fm.init(gen) for _ in range(n)])  # (n, d)
    x = torch.rand(n, b, 1, 8, 8, generator=gen)
    y = torch.randint(0, 10, (n, b), generator=gen)
    mask = torch.ones(n, b, dtype=torch.bool)
    mask[0, -1] = False
    ctx = SimpleNamespace(fm=fm, streams=Streams(7), device=torch.device("cpu"))
    return ctx, params, x, y, mask


def test_noise_is_std_times_one_draw_of_the_noise_stream():
    ctx, params, x, y, mask = _setup()
    std = torch.tensor([[0.0], [0.5], [2.0]])  # (n, 1)
    out = noisy_clipped_sum(ctx, params, x, y, mask, 0.3, std)
    sums, _ = clipped_grad_sum(ctx.fm, params, x, y, mask, 0.3)
    u = torch.randn(sums.shape, generator=Streams(7).get("noise"))
    assert torch.equal(out, sums + std * u)
    assert torch.equal(out[0], sums[0])  # std 0: the clipped sum itself
    assert not torch.allclose(out[1], sums[1])


def test_draw_made_without_noise_keeps_the_stream_in_step():
    ctx, params, x, y, mask = _setup()
    std = torch.full((3, 1), 1.5)
    with noise_off():
        clean = noisy_clipped_sum(ctx, params, x, y, mask, 0.3, std)
    assert torch.equal(clean, clipped_grad_sum(ctx.fm, params, x, y, mask, 0.3)[0])
    after = torch.randn(4, generator=ctx.streams.get("noise"))
    ref = Streams(7).get("noise")
    torch.randn(clean.shape, generator=ref)
    assert torch.equal(after, torch.randn(4, generator=ref))
