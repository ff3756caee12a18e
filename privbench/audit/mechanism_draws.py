"""Random draws a run makes outside its named streams, and whether they repeat across rounds.

The mechanism audit tells noise from message by silencing the run's "noise" streams
(`privbench.seeding.noise_off`). Noise drawn from a generator the run's `Streams` never made
(one created, or re-seeded, inside a round) is not silenced: the noisy and clean replays carry it
alike, so the message reads as unnoised. Recording what such generators draw in each round tells
the two apart: a draw that repeats, value for value, in two rounds is one noise reused, not an
absent one.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

from privbench.seeding import Streams, is_noise_generator

# the draws a DP mechanism makes (Gaussian, uniform for randomized response, exponential for
# Laplace): (owner, attribute)
_DRAWS: tuple[tuple[Any, str], ...] = ((torch, "randn"), (torch, "normal"), (torch, "rand"),
                                       (torch.Tensor, "exponential_"))
MIN_VALUES = 64  # a draw shorter than this may repeat by chance (a scalar, a coin)


class OutsideDraws:
    """Per round, the digests of the draws made with a generator that is not one of `streams`'
    (nor a "noise" stream's, which the audit silences itself)."""

    def __init__(self, streams: Streams) -> None:
        self.known = {id(g) for g in vars(streams).get("_cache", {}).values()}
        self.round = -1
        self.digests: dict[int, set[str]] = {}

    def at(self, t: int) -> None:
        """Draws from now on belong to round t."""
        self.round = t

    def _seen(self, gen: object, out: torch.Tensor) -> None:
        if (not isinstance(gen, torch.Generator) or id(gen) in self.known
                or is_noise_generator(gen) or out.numel() < MIN_VALUES or self.round < 0):
            return
        digest = hashlib.sha1(out.detach().cpu().contiguous().numpy().tobytes()).hexdigest()
        self.digests.setdefault(self.round, set()).add(f"{tuple(out.shape)}:{digest}")

    def _wrap(self, draw: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
        def recorded(*args: Any, **kwargs: Any) -> torch.Tensor:
            out = draw(*args, **kwargs)
            self._seen(kwargs.get("generator"), out)
            return out
        return recorded

    @contextlib.contextmanager
    def recording(self) -> Iterator[None]:
        """Record inside the block."""
        with contextlib.ExitStack() as stack:
            for owner, name in _DRAWS:
                stack.enter_context(_patched(owner, name, self._wrap(getattr(owner, name))))
            yield

    def repeated(self) -> tuple[int, int] | None:
        """Two rounds (first, second) that drew one identical value vector, or None."""
        seen: dict[str, int] = {}
        for t in sorted(self.digests):
            for d in self.digests[t]:
                if d in seen:
                    return seen[d], t
                seen[d] = t
        return None


@contextlib.contextmanager
def _patched(owner: Any, name: str, value: Any) -> Iterator[None]:
    original = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, original)


def reused_finding(draws: OutsideDraws) -> str | None:
    """The finding when a generator outside the run's streams drew the same values in two
    rounds."""
    pair = draws.repeated()
    if pair is None:
        return None
    return (f"noise reused across rounds: a generator outside the run's noise stream (made or "
            f"re-seeded inside the round) drew the same values in rounds {pair[0]} and "
            f"{pair[1]}; the audit cannot silence it, so the messages it reaches read as "
            "unnoised")
