"""The attacker's side of a run: threat models and placements, what they observe
(`Observation`), the gradient views derived from it, the attacker's rebuild of push-sum releases,
gossip inversion beyond the victim's neighbours, and the model-level membership signals."""

from privbench.errors import NotApplicable
from privbench.threat.observation import (
    GradientView,
    Observation,
    ThreatModel,
    observe,
    placed,
    threat_for,
)

__all__ = ["GradientView", "NotApplicable", "Observation", "ThreatModel", "observe", "placed",
           "threat_for"]
