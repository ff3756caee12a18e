"""Named, independent `torch.Generator` streams derived from one seed.

Library code never seeds globally: it takes a generator. Each purpose (data split, model init,
batch sampling, DP noise, topology, attack) has its own stream, so changing how many random
numbers one part draws does not change another part's draws.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator, Mapping
from typing import Any
from unittest import mock

import torch

STREAMS = ("data", "init", "batch", "noise", "topology", "attack", "mia")

# Every generator of the "noise" stream (the DP mechanisms' randomness) by id, so that the
# test-only switch `privbench.testing.disable_noise` can recognise them (`is_noise_generator`).
# Strong references, not a WeakSet: torch 2.11's generators cannot be weakly referenced (a
# WeakSet raised TypeError for every DP run there); holding them also keeps an id from being
# reused by another generator. A generator is a few hundred bytes, a run makes a few.
NOISE_GENERATORS: dict[int, torch.Generator] = {}


def is_noise_generator(gen: torch.Generator | None) -> bool:
    """Whether `gen` was made for a "noise" stream."""
    return gen is not None and NOISE_GENERATORS.get(id(gen)) is gen


def mark_noise(gen: torch.Generator) -> torch.Generator:
    """Register `gen` as a "noise" stream's generator (one made by `Streams`, or restored from
    a checkpoint of one) and return it."""
    NOISE_GENERATORS[id(gen)] = gen
    return gen


def derive_seed(seed: int, *names: str | int) -> int:
    """A 63-bit seed derived from `seed` and a path of names (stable across runs and platforms)."""
    text = "/".join([str(seed), *map(str, names)])
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little") >> 1


class Streams:
    """Factory of named generators for one run.

    Args:
        seed: the run's seed.
        device: where generators for on-device sampling live (noise, batches).
    """

    def __init__(self, seed: int, device: torch.device | str = "cpu") -> None:
        self.seed = int(seed)
        self.device = torch.device(device)
        self._cache: dict[tuple, torch.Generator] = {}

    def get(self, name: str, *sub: str | int,
            device: torch.device | str | None = None) -> torch.Generator:
        """The generator for stream `name` (optionally a sub-stream); the same object each call."""
        dev = torch.device(device) if device is not None else self.device
        key = (name, *sub, str(dev))
        if key not in self._cache:
            self._cache[key] = self.fresh(name, *sub, device=dev)
        return self._cache[key]

    def fresh(self, name: str, *sub: str | int,
              device: torch.device | str | None = None) -> torch.Generator:
        """A new generator for `name` at its initial state (not cached)."""
        gen = torch.Generator(device=torch.device(device) if device is not None else self.device)
        gen.manual_seed(derive_seed(self.seed, name, *sub))
        return mark_noise(gen) if name == "noise" else gen


@contextlib.contextmanager
def noise_off() -> Iterator[None]:
    """Every draw from a "noise" stream generator returns its noiseless value inside the block.

    Gaussian draws become 0, uniform draws 0 (randomized response then never flips), and
    exponential draws 1 (a Laplace draw as a difference of two exponentials becomes 0). The
    draws are still made, so generator states advance as in a noisy run. The mechanism audit
    replays a round with it (the message without the noise the defense added); tests use it to
    prove that a privacy check catches a defense that drops its noise.
    """
    randn, rand, normal, exponential = (torch.randn, torch.rand, torch.normal,
                                        torch.Tensor.exponential_)

    def is_noise(kwargs: Mapping[str, object]) -> bool:
        gen = kwargs.get("generator")
        return isinstance(gen, torch.Generator) and is_noise_generator(gen)

    def fake_randn(*args: Any, **kwargs: Any) -> torch.Tensor:
        out = randn(*args, **kwargs)
        return out.zero_() if is_noise(kwargs) else out

    def fake_rand(*args: Any, **kwargs: Any) -> torch.Tensor:
        out = rand(*args, **kwargs)
        return out.zero_() if is_noise(kwargs) else out

    def fake_normal(*args: Any, **kwargs: Any) -> torch.Tensor:
        out = normal(*args, **kwargs)
        if is_noise(kwargs):
            mean = kwargs.get("mean", args[0] if args else 0.0)
            out = torch.zeros_like(out) + mean
        return out

    def fake_exponential(self: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        out = exponential(self, *args, **kwargs)
        return out.fill_(1.0) if is_noise(kwargs) else out

    with mock.patch("torch.randn", fake_randn), mock.patch("torch.rand", fake_rand), \
            mock.patch("torch.normal", fake_normal), \
            mock.patch.object(torch.Tensor, "exponential_", fake_exponential):
        yield
