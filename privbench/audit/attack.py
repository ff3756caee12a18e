"""The Attack contract: what every registered attack declares, so that one dispatch
(`privbench.audit.dispatch.run_attack`) runs any of them without probing its class.

An attack is `attacks/<name>.py`, registered in `ATTACKS` under its file stem, a subclass of
`Attack` (usually through `attacks._inversion.InversionAttack` or `attacks._mia.ModelAttack` /
`MessageAttack`) that declares:

| member | meaning |
|---|---|
| `Config` | a frozen dataclass, every field with a default (`audit.attack_config.<name>`) |
| `kind` | how it is run and graded: one of `KINDS` |
| `needs` | what it consumes beyond public context, a subset of `NEEDS` |

`kind`: "inversion" reconstructs the victim's batch from gradient views (graded by image
metrics against the drawn batch); "membership" scores candidates (graded by ROC against who was
a member); "canary" retrains the defense with inserted gradient canaries (one-run audit);
"mechanism" replays audited rounds and measures the noise, sampling and sensitivity drawn.

`needs`: "messages" (the victim's gradient views, from what the threat model observed),
"model" (a model the threat model observed), "reference_systems" (models the attacker trains
itself on public data), "retrain" (the defense trained again under the audit's control). An
attack's `run` is its kind's entry in the dispatch's table (`privbench.audit.dispatch.RUNNERS`).
"""

from __future__ import annotations

from typing import Any, ClassVar

KINDS = ("inversion", "membership", "canary", "mechanism")
NEEDS = frozenset({"messages", "model", "reference_systems", "retrain"})


class Attack:
    """Base of every registered attack: `Config`, `kind` and `needs` (module docstring).

    Args:
        cfg: the attack's `Config` instance (None: its defaults).
    """

    Config: ClassVar[type]
    kind: ClassVar[str]
    needs: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, cfg: Any | None = None) -> None:
        self.cfg = cfg if cfg is not None else self.Config()


def reads_messages(attack: type[Attack]) -> bool:
    """Whether an attack is scored on gradient views derived from observed messages."""
    return "messages" in attack.needs


def trains_its_own_run(attack: type[Attack]) -> bool:
    """Whether an attack reads nothing of the trained cell's run but trains its own (the canary
    and mechanism audits): it runs on a cell whose training diverged as on any other."""
    return attack.needs == frozenset({"retrain"})
