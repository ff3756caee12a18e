"""The attacker's side of a run: threat models and placements, what they observe
(`Observation`), the gradient views derived from it, the attacker's rebuild of push-sum releases,
gossip inversion beyond the victim's neighbours, and the model-level membership signals."""

from __future__ import annotations

from typing import TYPE_CHECKING

from privbench.errors import NotApplicable
from privbench.plugins import lazy_names

_WHERE = {name: "observation" for name in
          ("GradientView", "Observation", "ThreatModel", "observe", "placed", "threat_for")}
__all__ = ["GradientView", "NotApplicable", "Observation", "ThreatModel", "observe", "placed",
           "threat_for"]
__getattr__ = lazy_names(__name__, _WHERE)


if TYPE_CHECKING:
    from privbench.threat.observation import (
        GradientView,
        Observation,
        ThreatModel,
        observe,
        placed,
        threat_for,
    )
