"""attacks.mechanism: the mechanism audit's configuration, as `privbench attack --set` reaches it
(registered as "mechanism", replaying rounds rather than attacking messages), refusing settings
the audit cannot run and handing the rest to the audit unchanged."""

from __future__ import annotations

import pytest

from attacks.mechanism import MechanismAudit, MechanismConfig
from privbench.audit.mechanism_replay import MechanismSettings
from privbench.config import replace_checked
from privbench.errors import ConfigError
from privbench.registry import ATTACKS


def test_it_is_the_registered_mechanism_audit_and_needs_its_own_replays() -> None:
    assert ATTACKS.get("mechanism") is MechanismAudit
    assert MechanismAudit.Config is MechanismConfig
    assert MechanismAudit.kind == "mechanism" and MechanismAudit.needs == {"retrain"}


def test_the_settings_are_the_configured_values() -> None:
    cfg = replace_checked(MechanismConfig(), {"rounds": 12, "level": 1e-3}, where="mechanism")
    assert cfg.settings() == MechanismSettings(rounds=12, level=1e-3)
    assert MechanismConfig().settings() == MechanismSettings(rounds=8, level=1e-5)


@pytest.mark.parametrize(("fields", "needle"), [
    ({"rounds": 1}, "mechanism.rounds must be >= 2, got 1"),
    ({"level": 0.0}, r"mechanism.level must be in \(0, 1\), got 0.0"),
    ({"level": 1.0}, r"mechanism.level must be in \(0, 1\), got 1.0"),
])
def test_settings_the_audit_cannot_run_are_refused(fields, needle) -> None:
    with pytest.raises(ConfigError, match=needle):
        MechanismConfig(**fields)
