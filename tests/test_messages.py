"""privbench.messages, the earlier import path of the message types: every name it exports is
the object of privbench.engine, so a plugin written against either path sees one type."""

from __future__ import annotations

import privbench.messages as old
from privbench.engine import messages, truth


def test_every_exported_name_is_the_engines_object() -> None:
    assert sorted(old.__all__) == ["GroundTruth", "MessageBus", "MessageKind", "MessageLog",
                                   "RecordPolicy"]
    for name in old.__all__:
        source = truth if name == "GroundTruth" else messages
        assert getattr(old, name) is getattr(source, name), name
