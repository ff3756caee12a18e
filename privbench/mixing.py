"""Moved to `privbench.engine` (`privbench.engine.mixing`); kept for one release so that a
plugin written against the old path still imports."""

from privbench.engine.mixing import Mixer, gossip, push_sum

__all__ = ["Mixer", "gossip", "push_sum"]
