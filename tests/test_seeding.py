"""Named generator streams, and the registry that lets the test-only `disable_noise` switch
recognise the DP noise generators."""

from __future__ import annotations

import pytest
import torch

from privbench.config import RunConfig
from privbench.engine.loop import train
from privbench.engine.runner import build
from privbench.plugins import load_plugins
from privbench.registry import DEFENSES
from privbench.seeding import NOISE_GENERATORS, Streams, is_noise_generator

load_plugins()


def test_noise_generators_are_recognised_and_no_others():
    s = Streams(3)
    noise, fresh, batch = s.get("noise", 1), s.fresh("noise", 2), s.get("batch")
    assert is_noise_generator(noise) and is_noise_generator(fresh)
    assert not is_noise_generator(batch) and not is_noise_generator(None)
    assert not is_noise_generator(torch.Generator())
    # by identity, not by id alone: the registry holds each one, so its id is never reused
    assert NOISE_GENERATORS[id(noise)] is noise


def test_the_same_seed_gives_the_same_noise_stream():
    a = torch.randn(5, generator=Streams(7).get("noise", 0))
    b = torch.randn(5, generator=Streams(7).get("noise", 0))
    c = torch.randn(5, generator=Streams(8).get("noise", 0))
    assert torch.equal(a, b) and not torch.equal(a, c)


@pytest.mark.gpu
@pytest.mark.parametrize("name", DEFENSES.names())
def test_every_defense_trains_on_cuda(name):
    """Each defense builds its noise generators and trains two rounds on the GPU (torch 2.11's
    CUDA generators cannot be weakly referenced: a WeakSet registry broke every DP run there)."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    built = build(RunConfig(rounds=2, nodes=4, device="cuda", eval_every=2, epsilon=1.0), name)
    res = train(built.trainer)
    assert built.ctx.device.type == "cuda" and len(res.node_accuracy) in (0, 4)
