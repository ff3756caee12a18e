"""Moved to `privbench.engine` (`privbench.engine.messages`); kept for one release so that a
plugin written against the old path still imports."""

from privbench.engine.messages import MessageBus, MessageKind, MessageLog, RecordPolicy
from privbench.engine.truth import GroundTruth

__all__ = ["GroundTruth", "MessageBus", "MessageKind", "MessageLog", "RecordPolicy"]
