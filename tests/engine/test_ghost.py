"""Clipping without per-sample gradients (privbench/engine/ghost.py) equals the per-sample
reference.

Reference: `masked_sum(clip_l2(per_sample_grads(...), bound), mask)`, i.e. vmap(vmap(grad)) per
sample, clip, sum. Compared in float64 (both exact up to rounding: the relative error bound 1e-5
leaves eight orders of magnitude for a wrong rule to show) and the float32 fast path against the
float64 reference (the float32 per-sample reference itself is off by up to 1.3e-5 for the CNN on
28 x 28 inputs, the fast path by about 4e-7).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn

from privbench.engine.ghost import FastClip, plan_for
from privbench.engine.grads import (
    clip_l2,
    clipped_grad_sum,
    masked_sum,
    per_sample_grads,
    rows_to_dict,
)
from privbench.models import FlatModel, build_model
from privbench.registry import MODELS

SHAPES = {"resnet": (3, 12, 12), "lenet5": (1, 16, 16)}


def _inputs(fm: FlatModel, shape: tuple[int, ...], m: int = 3, b: int = 5, seed: int = 0,
            dtype: torch.dtype = torch.float64):
    gen = torch.Generator().manual_seed(seed)
    params = torch.stack([fm.init(torch.Generator().manual_seed(seed + i)) for i in range(m)])
    x = torch.randn(m, b, *shape, generator=gen)
    y = torch.randint(0, 10, (m, b), generator=gen)
    mask = torch.rand(m, b, generator=gen) < 0.6  # Poisson-like: padded rows masked out
    mask[0, 0] = True  # every row live (dead rows are skipped, tested separately)
    mask[1:, 1] = True
    bound = torch.rand(m, b, generator=gen, dtype=dtype) * 0.5 + 0.01  # per-row, per-sample
    return params.to(dtype), x.to(dtype), y, mask, bound


def _reference(fm, params, x, y, mask, bound):
    g = per_sample_grads(fm, params, x, y)  # (m, B, d)
    clipped, norms = clip_l2(g, bound)
    return masked_sum(clipped, mask), norms


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm())


@pytest.mark.parametrize("name", MODELS.names())
def test_fast_clipped_sum_equals_per_sample_reference(name):
    shape = SHAPES.get(name, (1, 8, 8))
    fm = build_model(name, shape, 10)
    assert plan_for(fm.module, shape) is not None  # every registered model has a fast plan
    fm.module.double()
    params, x, y, mask, bound = _inputs(fm, shape)
    g = per_sample_grads(fm, params, x, y)  # (m, B, d) the reference per-sample gradients
    ref_norms = g.norm(dim=-1)
    for b in (bound, 0.05, bound[:, :1]):  # per-sample, scalar, per-row bounds
        ref_b = masked_sum(clip_l2(g, b)[0], mask)
        got, norms = clipped_grad_sum(fm, params, x, y, mask, b)
        assert _rel(got, ref_b) < 1e-5
        assert _rel(norms, ref_norms) < 1e-5
    fm.module.float()
    got32, _ = clipped_grad_sum(fm, params.float(), x.float(), y, mask, bound.float())
    ref = masked_sum(clip_l2(g, bound)[0], mask)
    assert got32.dtype == torch.float32 and _rel(got32, ref) < 1e-5


def test_fast_path_is_exact_on_28x28_cnn_and_in_row_chunks():
    fm = build_model("cnn", (1, 28, 28), 10)
    fm.module.double()
    params, x, y, mask, bound = _inputs(fm, (1, 28, 28), m=3, b=4)
    ref, _ = _reference(fm, params, x, y, mask, bound)
    for max_bytes in (None, 1):  # one chunk, one row per chunk
        got, _ = clipped_grad_sum(fm, params, x, y, mask, bound, max_bytes=max_bytes)
        assert _rel(got, ref) < 1e-5


def test_the_clipped_sum_is_differentiable_in_the_parameters_in_any_chunking():
    fm = build_model("lenet", (1, 8, 8), 10)
    fm.module.double()
    params, x, y, mask, bound = _inputs(fm, (1, 8, 8))
    weights = torch.randn(fm.d, dtype=torch.float64, generator=torch.Generator().manual_seed(1))

    def grad_of(fn) -> torch.Tensor:
        p = params.clone().requires_grad_(True)
        (fn(p) @ weights).sum().backward()
        return p.grad

    ref = grad_of(lambda p: _reference(fm, p, x, y, mask, bound)[0])
    for max_bytes in (None, 1):  # one chunk, one row per chunk
        got = grad_of(lambda p, mb=max_bytes: clipped_grad_sum(fm, p, x, y, mask, bound,
                                                                max_bytes=mb)[0])
        assert _rel(got, ref) < 1e-5


def test_dead_rows_and_clipping_that_binds_or_not():
    fm = build_model("lenet", (1, 8, 8), 10)
    fm.module.double()
    params, x, y, mask, _ = _inputs(fm, (1, 8, 8))
    mask[2] = False  # a row without a real sample: zero sum, zero norms
    for bound in (1e-4, 1e4):  # every sample clipped / none clipped (plain masked sum)
        ref, _ = _reference(fm, params, x, y, mask, bound)
        got, norms = clipped_grad_sum(fm, params, x, y, mask, bound)
        assert _rel(got, ref) < 1e-5 and not got[2].any() and not norms[2].any()


def test_a_mistaken_rule_would_be_caught():
    # The test can fail: a wrong bound (C instead of C/2) changes the sums far beyond 1e-5.
    fm = build_model("cnn", (1, 8, 8), 10)
    fm.module.double()
    params, x, y, mask, bound = _inputs(fm, (1, 8, 8))
    ref, _ = _reference(fm, params, x, y, mask, bound)
    got, _ = clipped_grad_sum(fm, params, x, y, mask, bound / 2)
    assert _rel(got, ref) > 1e-3


class _Scaled(nn.Module):
    """A leaf layer with parameters and no fast rule (generic per-layer vjp)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.linspace(0.5, 1.5, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x * self.scale)


class _Tied(nn.Module):
    """The same Linear applied twice: no exact per-layer plan, whole-model vmap fallback."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(64, 16)
        self.mid = nn.Linear(16, 16)
        self.out = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.inp(x.flatten(1)))
        return self.out(torch.relu(self.mid(torch.relu(self.mid(h)))))


@pytest.mark.parametrize("kind", ["generic_layer", "tied"])
def test_layers_without_a_fast_rule_fall_back_exactly(kind):
    if kind == "generic_layer":
        module = nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.LayerNorm(16), _Scaled(16),
                               nn.Linear(16, 10))
    else:
        module = _Tied()
    fm = FlatModel(module.double())
    plan = plan_for(fm.module, (1, 8, 8))
    if kind == "tied":
        assert plan is None
    else:
        assert {lay.rule for lay in plan.layers} == {"linear", "generic"}
    params, x, y, mask, bound = _inputs(fm, (1, 8, 8))
    ref, _ = _reference(fm, params, x, y, mask, bound)
    got, _ = clipped_grad_sum(fm, params, x, y, mask, bound)
    assert _rel(got, ref) < 1e-5


# Conv geometries beyond the registered models': stride, dilation, asymmetric padding and
# kernels, and kernels larger than the feature map (every patch reaches into the padding).
GEOMETRIES = [
    dict(cin=3, cout=4, kernel=3, stride=1, padding=1, dilation=1, hw=(6, 5)),
    dict(cin=2, cout=5, kernel=(3, 2), stride=(2, 1), padding=(1, 0), dilation=1, hw=(7, 6)),
    dict(cin=2, cout=3, kernel=3, stride=1, padding=2, dilation=2, hw=(5, 5)),
    dict(cin=4, cout=6, kernel=5, stride=1, padding=2, dilation=1, hw=(4, 4)),
]


def _conv(g: dict) -> nn.Conv2d:
    return nn.Conv2d(g["cin"], g["cout"], g["kernel"], stride=g["stride"], padding=g["padding"],
                     dilation=g["dilation"]).double()


@pytest.mark.parametrize("g", GEOMETRIES)
def test_patch_gram_from_pixel_gram_equals_im2col_gram(g):
    from privbench.engine.ghost import _patch_gram, _unfolded

    conv = _conv(g)
    a = torch.randn(7, g["cin"], *g["hw"], generator=torch.Generator().manual_seed(1),
                    dtype=torch.float64)
    out_hw = tuple(conv(a).shape[2:])
    u = _unfolded(conv, a)  # (N, T, p) the im2col patches
    ref = u @ u.transpose(1, 2)
    got = _patch_gram(conv, a, out_hw)
    assert got.shape == ref.shape and _rel(got, ref) < 1e-12
    assert _rel(_patch_gram(conv, a.flip(-1), out_hw), ref) > 1e-3  # the map is not symmetric


@pytest.mark.parametrize("small_map", [0, 10**6])  # clipped sum: grouped kernel, or patches
@pytest.mark.parametrize("way", ["formed", "gram", "pixel"])
@pytest.mark.parametrize("g", GEOMETRIES)
def test_every_conv_norm_way_equals_per_sample_reference(monkeypatch, way, g, small_map):
    from privbench.engine import ghost

    monkeypatch.setattr(ghost, "SMALL_MAP", small_map)

    module = nn.Sequential(_conv(g), nn.Tanh(), nn.Flatten())
    with torch.no_grad():
        width = module(torch.zeros(1, g["cin"], *g["hw"], dtype=torch.float64)).shape[1]
    module.append(nn.Linear(width, 10).double())
    fm = FlatModel(module)
    shape = (g["cin"], *g["hw"])
    monkeypatch.setattr(ghost, "conv_norm_way", lambda lay: way)
    params, x, y, mask, bound = _inputs(fm, shape)
    ref, ref_norms = _reference(fm, params, x, y, mask, bound)
    got, norms = clipped_grad_sum(fm, params, x, y, mask, bound)
    assert _rel(got, ref) < 1e-10 and _rel(norms, ref_norms) < 1e-10


def test_conv_norm_way_is_the_cheapest_per_layer():
    from privbench.engine.ghost import conv_norm_way

    # the FedAvg CNN on 8 x 8: conv1 (T = 64, p = 25, q = 32) forms G_i; conv2 on a 4 x 4 map
    # (T = 16, p = 800) takes the pixel Gram (S^2 C = 8,192 against T^2 p = 204,800)
    plan = plan_for(build_model("cnn", (1, 8, 8), 10).module, (1, 8, 8))
    assert [conv_norm_way(lay) for lay in plan.layers if lay.rule == "conv2d"] == [
        "formed", "pixel"]
    # a strided conv with a wide input: the im2col Gram (T = 4) beats both
    module = nn.Sequential(nn.Conv2d(64, 64, 3, stride=4), nn.Flatten(), nn.Linear(256, 10))
    plan = plan_for(module, (64, 8, 8))
    assert conv_norm_way(plan.layers[0]) == "gram"


def test_pooled_conv_outputs_are_laid_out_channels_last_with_identical_values():
    """The layers a MaxPool2d follows are the ones marked; laying their outputs out channels-last
    changes no captured input or output gradient by a single bit (same windows, same maxima)."""
    shape = (1, 8, 8)
    for name, pooled in (("cnn", ["0", "3"]), ("lenet5", ["0", "3"]), ("lenet", [])):
        plan = plan_for(build_model(name, shape, 10).module, shape)
        assert [lay.name for lay in plan.layers if lay.pooled] == pooled
    fm = build_model("cnn", shape, 10)
    plan = plan_for(fm.module, shape)
    flat = FastClip([dataclasses.replace(lay, pooled=False) for lay in plan.layers])
    params, x, y, _, _ = _inputs(fm, shape, m=2, b=4, dtype=torch.float32)
    x = x.relu() * 0  # all-zero images: every pooling window a tie, the first maximum wins
    x[0, :2] = torch.randn(2, *shape, generator=torch.Generator().manual_seed(1))
    pdict = rows_to_dict(fm, params)
    a, e = plan.capture(fm.module, pdict, x, y)
    a0, e0 = flat.capture(fm.module, pdict, x, y)
    assert not a[1].is_contiguous() and a0[1].is_contiguous()  # conv 3's input: pooled, relaid
    for got, ref in zip(a + e, a0 + e0, strict=True):
        assert torch.equal(got, ref)
