"""privbench.mixing, the earlier import path of the gossip and push-sum mixing: every name it
exports is the object of privbench.engine.mixing."""

from __future__ import annotations

import privbench.mixing as old
from privbench.engine import mixing


def test_every_exported_name_is_the_engines_object() -> None:
    assert sorted(old.__all__) == ["Mixer", "gossip", "push_sum"]
    for name in old.__all__:
        assert getattr(old, name) is getattr(mixing, name), name
