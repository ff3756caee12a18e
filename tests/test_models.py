"""Models: shapes, the flat view, and vectorized per-sample gradients against a plain loop."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from privbench.engine.grads import batch_grads, per_sample_grads
from privbench.errors import ConfigError
from privbench.models import build_model
from privbench.registry import MODELS


def _loop_grads(fm, params, x, y):
    """Reference: one forward/backward per node and sample through the nn.Module."""
    out = torch.zeros(*y.shape, fm.d)
    for i in range(params.shape[0]):
        torch.nn.utils.vector_to_parameters(params[i].clone(), fm.module.parameters())
        for b in range(y.shape[1]):
            fm.module.zero_grad(set_to_none=True)
            F.cross_entropy(fm.module(x[i, b:b + 1]), y[i, b:b + 1]).backward()
            out[i, b] = torch.cat([p.grad.reshape(-1) for p in fm.module.parameters()])
    return out


@pytest.mark.parametrize("name", MODELS.names())
def test_per_sample_grads_match_loop(name):
    torch.manual_seed(0)
    fm = build_model(name, (1, 8, 8), 10)
    gen = torch.Generator().manual_seed(1)
    params = torch.stack([fm.init(gen) for _ in range(3)])  # 3 different nodes
    x, y = torch.rand(3, 4, 1, 8, 8, generator=gen), torch.randint(0, 10, (3, 4), generator=gen)
    vec = per_sample_grads(fm, params, x, y)
    ref = _loop_grads(fm, params, x, y)
    assert vec.shape == (3, 4, fm.d)
    assert (vec - ref).abs().max().item() <= 1e-5


@pytest.mark.parametrize("name", ["mlp", "lenet"])
def test_batch_grads_is_masked_mean_of_per_sample(name):
    fm = build_model(name, (1, 8, 8), 10)
    gen = torch.Generator().manual_seed(2)
    params = torch.stack([fm.init(gen) for _ in range(2)])
    x, y = torch.rand(2, 5, 1, 8, 8, generator=gen), torch.randint(0, 10, (2, 5), generator=gen)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    per = per_sample_grads(fm, params, x, y)
    expect = (per * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
    assert torch.allclose(batch_grads(fm, params, x, y, mask), expect, atol=1e-6)


def test_flat_view_roundtrip_and_forward():
    fm = build_model("cnn", (1, 8, 8), 10)
    flat = fm.init(torch.Generator().manual_seed(0))
    assert flat.shape == (fm.d,)
    assert torch.equal(fm.flatten(fm.unflatten(flat)), flat)
    torch.nn.utils.vector_to_parameters(flat, fm.module.parameters())
    x = torch.rand(7, 1, 8, 8)
    assert torch.allclose(fm.forward(flat, x), fm.module(x), atol=1e-6)


def test_init_is_deterministic_per_generator():
    fm = build_model("mlp", (1, 8, 8), 10)
    a = fm.init(torch.Generator().manual_seed(5))
    b = fm.init(torch.Generator().manual_seed(5))
    c = fm.init(torch.Generator().manual_seed(6))
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_sizes_match_the_papers_models():
    # LeNet-5 on MNIST (the DPDL paper's model) has d = 61,706; the FedAvg CNN (Dyn-D2P's,
    # DeFL-VP's) 1,663,370.
    assert build_model("lenet5", (1, 28, 28), 10).d == 61_706
    assert build_model("cnn", (1, 28, 28), 10).d == 1_663_370


def test_model_that_does_not_fit_the_input_is_a_config_error():
    with pytest.raises(ConfigError, match="does not fit"):
        build_model("lenet5", (1, 2, 2), 10)


def test_slice_of_selects_named_layers():
    fm = build_model("mlp", (1, 8, 8), 10)
    mask = fm.slice_of(["1."])  # first Linear after Flatten
    assert int(mask.sum()) == 64 * 128 + 128
