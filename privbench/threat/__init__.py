"""The attacker's side of a run: threat models and placements, what they observe
(`Observation`), the gradient views derived from it, the attacker's rebuild of push-sum releases,
gossip inversion beyond the victim's neighbours, and the model-level membership signals."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from privbench.errors import NotApplicable

_WHERE = {name: "observation" for name in
          ("GradientView", "Observation", "ThreatModel", "observe", "placed", "threat_for")}
__all__ = ["GradientView", "NotApplicable", "Observation", "ThreatModel", "observe", "placed",
           "threat_for"]


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(f"privbench.threat.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'privbench.threat' has no attribute {name!r}")


if TYPE_CHECKING:
    from privbench.threat.observation import (
        GradientView,
        Observation,
        ThreatModel,
        observe,
        placed,
        threat_for,
    )
