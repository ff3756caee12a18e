"""What an audit sweeps: its defenses, ε grid, attacks, threat model and attack settings."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from privbench.config import replace_checked
from privbench.errors import ConfigError
from privbench.registry import ATTACKS

# The default grid: the non-private baselines and the five papers' algorithms (their variants
# and ablations are registered too and run with `--defense all` or by name).
DEFAULT_DEFENSES = ("sgp", "d_psgd", "adp_vrsgp", "defl_vp", "dyn_d2p", "partpsp", "dpdl")


@dataclass(frozen=True)
class AuditConfig:
    """What to sweep.

    Attributes:
        defenses: registry keys ("all" = every registered defense).
        eps: target ε grid for private defenses (non-private ones run once).
        attacks: attack registry keys.
        threat: "eavesdropper", "neighbour" (the victim's first out-neighbour) or "colluding"
            (all of the victim's in-neighbours).
        victim: the attacked node.
        inversion_rounds: rounds whose released gradient is inverted.
        reference_models: reference systems trained for LiRA / RMIA.
        attack_config: per-attack config overrides.
        inversion_batch_sizes: batch sizes of the inversion views: for each, the cell's defense
            (same ε, same rounds, so the same calibration per round) is run with that batch size
            for the first `max(inversion_rounds) + 2` rounds and its released gradients are
            inverted; empty: invert the cell's own run.
        pool_victims: membership attacks pool the candidates of every node, each scored against
            its own node (False: `victim` only). The colluding threat always uses `victim`.
        paper_settings: per defense, defense overrides of the paper's own setting, audited as
            one extra cell (e.g. PartPSP at the paper's b) next to the calibrated-ε cells.
        paper_readings: per defense, defense overrides under which the run's ε means what the
            paper's claim means (DeFL-VP: ε per coordinate per round), audited at every ε of
            the grid as extra cells next to the calibrated-ε cells, each with the ε it
            composes to. A setting or reading the sweep's own overrides already apply adds no
            cell.
    """

    defenses: tuple[str, ...] = DEFAULT_DEFENSES
    eps: tuple[float, ...] = (1.0, 8.0)
    attacks: tuple[str, ...] = ("idlg", "geiping", "mia_threshold", "mia_message")
    threat: str = "eavesdropper"
    victim: int = 0
    inversion_rounds: tuple[int, ...] = (1,)
    reference_models: int = 4
    # per attack, config values over its defaults (checked when `attack_cfg` builds it)
    attack_config: Mapping[str, Mapping[str, object]] = dataclasses.field(default_factory=dict)
    inversion_batch_sizes: tuple[int, ...] = ()
    pool_victims: bool = False
    # per defense, defense config values (checked when the cell's defense is built)
    paper_settings: Mapping[str, Mapping[str, object]] = dataclasses.field(default_factory=dict)
    paper_readings: Mapping[str, Mapping[str, object]] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        from privbench.threat.observation import PLACEMENTS, THREATS, is_threat

        if any(b < 1 for b in self.inversion_batch_sizes):
            raise ConfigError(f"inversion_batch_sizes must be >= 1, got "
                              f"{list(self.inversion_batch_sizes)}")
        if not is_threat(self.threat):
            raise ConfigError(f"unknown threat model {self.threat!r}; accepted: "
                              f"{', '.join(THREATS)} or a placement {', '.join(PLACEMENTS)}")
        for e in self.eps:
            if not (e > 0 and math.isfinite(e)):
                raise ConfigError(f"every --eps must be a finite number > 0, got {e}")
        if not self.eps:
            raise ConfigError("--eps needs at least one value")
        if not self.defenses:
            raise ConfigError("--defense needs at least one defense (see `privbench list`)")
        if not self.attacks:
            raise ConfigError("--attack needs at least one attack (see `privbench list`)")
        if self.reference_models < 1:
            raise ConfigError(f"audit.reference_models must be >= 1, got {self.reference_models}")
        if self.victim < 0:
            raise ConfigError(f"audit.victim must be >= 0, got {self.victim}")
        if any(r < 0 for r in self.inversion_rounds):
            raise ConfigError(f"audit.inversion_rounds must be >= 0, got {self.inversion_rounds}")
        # Equal values are one cell (1 and 1.0): keep the first of each.
        object.__setattr__(self, "eps", tuple(dict.fromkeys(float(e) for e in self.eps)))

    def attack_cfg(self, attack: str) -> Any:
        """The attack's config: its defaults with this audit's `attack_config` overrides."""
        return replace_checked(ATTACKS.get(attack).Config(), self.attack_config.get(attack) or {},
                               where="attack")
