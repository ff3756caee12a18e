"""DP self-check over every registered defense: the noise really reaches the covered messages.

Each defense's own tests check that the noise in its released payloads has the calibrated scale
(tests/defenses/). This contract test covers every registered defense generically: two runs with
the same seed, one with the DP noise removed by the test-only `disable_noise` switch, must
differ in the covered, data-dependent messages of a private defense (a defense that silently
drops its noise would produce identical messages and fail here) and must not differ at all for a
non-private one (the switch touches nothing but the DP noise).
"""

from __future__ import annotations

import pytest
import torch

from privbench.config import RunConfig
from privbench.engine.loop import train
from privbench.engine.runner import build
from privbench.plugins import load_plugins
from privbench.registry import DEFENSES
from privbench.testing import disable_noise

load_plugins()


def _log(name: str, noise: bool):
    run = RunConfig(rounds=2, nodes=4, device="cpu", eval_every=2, epsilon=1.0)
    if noise:
        built = build(run, name)
        train(built.trainer)
    else:
        with disable_noise():
            built = build(run, name)
            train(built.trainer)
    return built


@pytest.mark.parametrize("name", DEFENSES.names())
def test_noise_reaches_the_covered_messages(name):
    noisy, clean = _log(name, True), _log(name, False)
    kinds = {k.name: k for k in noisy.trainer.kinds}
    diffs = {}
    for key, rec in noisy.ctx.bus.log.records.items():
        other = clean.ctx.bus.log.records[key]
        a, b = rec.payload.double(), other.payload.double()
        both = torch.isfinite(a) & torch.isfinite(b)
        diffs[key] = float((a - b)[both].abs().max()) if both.any() else 0.0
    guarded = [d for (t, kind), d in diffs.items()
               if kinds[kind].covered and kinds[kind].data_dependent]
    if noisy.trainer.private:
        assert guarded and max(guarded) > 0, f"{name}: covered messages carry no DP noise"
    else:
        assert max(diffs.values()) == 0, f"{name}: disable_noise changed a non-private run"
