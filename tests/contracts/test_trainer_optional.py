"""The optional members of the Trainer contract: declared on `Trainer` with their defaults, so
that a defense that leaves them out is attacked as "not applicable", never probed."""

from __future__ import annotations

import pytest

from privbench.engine.trainer import Trainer, provides
from privbench.errors import NotApplicable
from privbench.plugins import load_plugins
from privbench.registry import DEFENSES

load_plugins()
OPTIONAL = ("gradient_views", "all_views", "linear_gossip", "release_noise",
            "sensitivity_trace")


class Minimal(Trainer):
    """A trainer with only the required members."""

    kinds = ()

    def round(self, t: int) -> None:
        pass

    def models(self) -> None:
        pass


class Obs:
    defense = "minimal"


def test_the_defaults_say_not_applicable_or_none() -> None:
    with pytest.raises(NotApplicable, match="defense 'minimal' provides no gradient views"):
        Minimal.gradient_views(Obs(), 0, [1])
    assert Minimal.all_views(Obs(), 0) is None and Minimal.linear_gossip(Obs()) is None
    trainer = Minimal(None, None)
    assert trainer.release_noise() is None and trainer.sensitivity_trace() is None
    assert not any(provides(Minimal, m) for m in OPTIONAL)


@pytest.mark.parametrize("name", DEFENSES.names())
def test_every_defense_derives_gradient_views(name: str) -> None:
    # every shipped defense is attackable by the gradient attacks (its own views or a base's)
    assert provides(DEFENSES.get(name), "gradient_views")


def test_linear_gossip_and_release_noise_come_together_for_network_dp() -> None:
    both = [n for n in DEFENSES.names() if provides(DEFENSES.get(n), "linear_gossip")
            and provides(DEFENSES.get(n), "release_noise")]
    assert {"dp_sgp", "dp_dpsgd", "dyn_d2p", "adp_vrsgp"} <= set(both)
    assert provides(DEFENSES.get("dpps"), "sensitivity_trace")
    assert not provides(DEFENSES.get("sgp"), "release_noise")
