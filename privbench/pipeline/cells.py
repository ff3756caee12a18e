"""An audit's cells: their names (defense@ε, the paper's setting or reading), the rounds each
records, its cell files read back, and the clock that times them."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypedDict

import torch

from privbench.audit.attack import reads_messages
from privbench.audit.config import AuditConfig
from privbench.config import JSONObject, RunConfig, json_ready
from privbench.device import resolve_device
from privbench.engine.messages import RecordPolicy
from privbench.engine.runner import Built
from privbench.errors import DataError
from privbench.registry import ATTACKS, DEFENSES
from privbench.results.records import PaperSetting
from privbench.results.store import (
    eps_label,
    eps_text,
    read_json_file,
)


def eps_key(eps: float | None) -> str:
    """The cell name of ε: short when that is exact, else repr (lossless: distinct ε, distinct
    names, e.g. 1.0000001 and 1.0000004)."""
    return "none" if eps is None else eps_label(eps)


def placed_extra(run: RunConfig, audit: AuditConfig) -> int:
    """Rounds beyond an inversion target that a threat placed anywhere in the graph needs: its
    gossip inversion identifies a victim H hops away from about H + 1 rounds (H < nodes)."""
    return run.nodes if ":" in audit.threat else 0


def needed_rounds(run: RunConfig, audit: AuditConfig, defense: str) -> RecordPolicy:
    """Rounds to record: up to the last inversion target (gossip views need round t+1, a placed
    threat's gossip inversion more), the last rounds for model-level MIA, and for message-level
    MIA the whole run, or its attacked rounds with the rounds a view of each reads when it
    attacks a subset (`mia_message.rounds`: from t - `view_lookback` of the defense, for the
    victim's pre-step model, to t + 1, gossip's next message; a placed threat's gossip
    inversion still needs every round)."""
    rounds = set(range(max(audit.inversion_rounds, default=0) + 2 + placed_extra(run, audit)))
    rounds |= {run.rounds - 1, run.rounds - 2}
    for name in (a for a in audit.attacks if ATTACKS.get(a).kind == "membership"
                 and reads_messages(ATTACKS.get(a))):
        picked = ATTACKS.get(name)(audit.attack_cfg(name)).attacked_rounds(run.rounds)
        if picked is None or placed_extra(run, audit):
            return RecordPolicy()
        back = DEFENSES.get(defense).view_lookback
        rounds |= {t + k for t in picked for k in range(-back, 2)}
    return RecordPolicy(rounds=frozenset(r for r in rounds if 0 <= r < run.rounds))


class Laps:
    """Consecutive laps of one clock: every instant since creation lands in exactly one lap."""

    def __init__(self) -> None:
        self.start = self.last = time.perf_counter()

    def lap(self) -> float:
        """Seconds since the previous lap (or creation)."""
        now = time.perf_counter()
        out, self.last = now - self.last, now
        return out

    def total(self) -> float:
        """Seconds since creation."""
        return time.perf_counter() - self.start


class SensitivityTrace(TypedDict):
    """A cell's estimated vs real sensitivity per round (`sensitivity_trace`), non-finite
    values as None."""

    S_est: list[float | None]
    S_real: list[float | None]
    sync: list[bool]


def sensitivity_trace(built: Built) -> SensitivityTrace | None:
    """Per round, a data-dependent sensitivity estimate vs the real value (DPPS / PartPSP's
    `sensitivity_trace`: S_est, S_real, sync), non-finite values as None (strict JSON)."""
    tr = built.trainer.sensitivity_trace()
    if not tr or not tr.get("S_est"):
        return None

    def clean(xs: list[float]) -> list[float | None]:
        return [float(x) if math.isfinite(x) else None for x in xs]

    return {"S_est": clean(tr["S_est"]), "S_real": clean(tr["S_real"]), "sync": tr["sync"]}


def file_problem(path: Path, schema: Any) -> str | None:
    """What is wrong with a cell file (unreadable, not strict JSON, off-schema), or None."""
    try:
        data = read_json_file(path, "cell file")
    except DataError as exc:
        return str(exc).split(f"{path} ", 1)[-1]
    return schema(data)


def read_cell_file(path: Path, schema: Any) -> JSONObject:
    problem = file_problem(path, schema)
    if problem:
        raise DataError(f"{path} is damaged ({problem}); rerun with --resume to recompute it")
    return read_json_file(path, "cell file")


PAPER = "paper"


def cell_key_for(eps: float | None, setting: str | None) -> str:
    """A cell's name after "defense@": its ε ("none" without DP), "paper" (a fixed paper
    setting) or "paper-eps8" (the paper's reading of ε = 8)."""
    if not setting:
        return eps_key(eps)
    return setting if eps is None else f"{setting}-eps{eps_key(eps)}"


def cell_key(cell: JSONObject) -> str:
    """`cell_key_for` of a cell of results.json."""
    setting = cell.get("setting") or {}
    return str(setting["name"]) if setting else eps_key(cell.get("epsilon"))


def setting_label(eps: float | None, setting: str | None) -> str:
    if not setting:
        return eps_text(eps)
    return "at the paper's setting" if eps is None else f"at the paper's reading of {eps_text(eps)}"


def paper_setting(overrides: Mapping[str, object], cell: JSONObject, eps: float | None
                   ) -> PaperSetting:
    """The paper cell's description: its overrides, the ε the paper reads the run as (None for
    a fixed setting) and the ε the run composes to."""
    from privbench.results.store import claimed_eps

    knobs = ", ".join(f"{k} = {v:g}" if isinstance(v, float) else f"{k} = {v}"
                      for k, v in sorted(overrides.items()))
    label = f"paper {knobs}" if eps is None else f"paper {knobs}, {eps_text(eps)}"
    out: PaperSetting = {"name": cell_key_for(eps, PAPER), "label": label, "overrides": overrides,
           "composed_epsilon": json_ready(claimed_eps(cell, "calibrated"))}
    return out if eps is None else {**out, "epsilon": eps}


def cell_device(name: str) -> torch.device:
    """The device a cell's run trains on (`cpu` without probing CUDA)."""
    return torch.device("cpu") if name == "cpu" else resolve_device(name)


def holds(path: Path, text: str) -> bool:
    """Whether `path` exists and holds exactly `text`."""
    try:
        return path.read_text(encoding="utf-8") == text
    except OSError:
        return False
