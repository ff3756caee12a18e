"""Typed records of what an audit computes: a trained cell, an attack result, and the whole
audit run (`AuditRun`: its configuration, environment and cells, each cell a `TrainedCell` with
its `AttackResult`s by attack name).

An audit cell file (`cells/<defense>@<ε>/train.json`, `<attack>.json`) and each cell of
`results.json` hold a record's `to_json()`, `results.json` an `AuditRun`'s; a reader rebuilds
it with `from_json`, once, where it reads the file. The schema
the files are checked against when read (`privbench.results.schema`) takes its required fields
from these records, so the two cannot drift apart.

Compatibility rule (as for any results file a later version must still read):
- a field may be added, with a default, and written only when set; readers of an older file
  get the default;
- a field is never removed or renamed, and never changes its meaning or its unit (an ε stays
  the ε of the same accountant and δ, a rate stays a fraction in [0, 1]); a changed meaning is
  a new field;
- `detail` holds everything an attack or a training run adds beyond the typed fields (ROC
  curves, galleries, per-node audits), written at the top level of the record's JSON as
  before (an `AuditRun`'s and its `AuditSettings`' other keys alike): `from_json(to_json(r))
  == r` and `to_json(from_json(d)) == d` for every file this version writes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NotRequired, TypedDict

from privbench.results.outcome import OK, Status

Json = Any  # a JSON value (strict: no NaN, written key-sorted by `privbench.results.store`)
# A results file's object as read, before `from_json` makes it a record (the file boundary).
JsonObject = Mapping[str, Json]
Metrics = Mapping[str, float | None]  # headline numbers by name; None: not measured
Interval = list[float]  # [low, high] of a confidence interval
# A configuration value as TOML, the command line or a results file gives it.
ConfigValue = bool | int | float | str | None | list["ConfigValue"] | dict[str, "ConfigValue"]


class Fingerprint(TypedDict):
    """What determined a cell file (`privbench.results.fingerprint`): its hash and fields."""

    sha256: str
    fields: dict[str, ConfigValue]


class PrivacyReport(TypedDict, total=False):
    """One per-node ε report of a defense's ledger (`privbench.accounting`), as written."""

    node: int
    mode: str  # "paper", "calibrated" or "realized"
    epsilon: float | str | None  # "inf" for an unbounded ε
    delta: float | None
    accountant: str
    unit: str
    uncovered: list[str]
    sampling: str | None
    reading: str  # "assumed" / "realized" (DPPS, PartPSP)
    realized: dict[str, float]  # {epsilon, delta} of the noise actually drawn
    note: str
    mu: float
    approximate: bool
    epsilon_round: float
    sensitivity_check: dict[str, float | bool | list[int] | None]
    noise_feedback: dict[str, float | int]
    nodes: int  # a claims-table row (`claim_rows`): how many nodes report this reading


class MessageRecord(TypedDict, total=False):
    """One message kind a defense sends, with its DP coverage."""

    name: str
    covered: bool
    data_dependent: bool
    per_edge: bool
    description: str


class ThreatRecord(TypedDict, total=False):
    """Who observed, as a result records it (one per victim for pooled membership)."""

    kind: str
    observers: list[int]
    placement: str
    victim: int


class MeasuredEpsilon(TypedDict, total=False):
    """The mechanism audit's measured ε where it applies (`privbench.audit.mechanism_epsilon`,
    `privbench.audit.mechanism_node`): the node where measured / claimed is largest, its point
    and interval, the claim, and what the reading rests on (a Gaussian recomposition, a
    randomized-response flip rate, node-level rounds, or findings that void every claim)."""

    node: int
    epsilon: float
    interval: Interval
    claimed: float
    ratio: float
    ratio_interval: Interval
    basis: str
    accountant: str
    note: str
    resolved: bool
    delta: float
    ledger_delta: float
    composed_rounds: int
    sampling: str
    ledger_recomputed: float
    z_ratio: float
    z_ratio_interval: Interval
    rate: float
    ledger_rate: float
    nodes: list[int]
    flip_rate: float
    flip_trials: int
    flip_interval: Interval
    ledger_flip_rate: float
    rounds: list[dict[str, Any]]


class MechanismEpsilon(MeasuredEpsilon, total=False):
    """The measured ε as the mechanism report writes it: the measurement with `applicable`
    true, or `applicable` false with the reason and what was measured on the way (`flips`: the
    randomized-response reading that ruled the flip rate out; `rounds`: the node-level rounds
    read)."""

    applicable: bool
    reason: str
    flips: dict[str, Any]


class MechanismReport(TypedDict, total=False):
    """The mechanism audit of a run (`privbench.audit.mechanism.audit_mechanism`), as written:
    the rounds replayed, what they measured, the findings and the measured ε."""

    applicable: bool
    rounds: list[int]
    diverged_round: int | None
    replay_exact: bool | None
    noise: list[dict[str, object]]
    coverage: list[dict[str, object]]
    kinds: dict[str, object]
    freshness: dict[str, float | int | None]
    probes: list[dict[str, object]]
    sampling: list[dict[str, object]]
    sampling_findings: list[str]
    epsilon: MechanismEpsilon
    sensitivity: dict[str, object] | None
    findings: list[str]
    request: dict[str, float | int | None]
    ledger_findings: list[str]
    settings: dict[str, object]


class PaperSetting(TypedDict):
    """A paper cell's `setting` in results.json: its name and label, the overrides it runs
    with, the ε it composes to and (for a reading of the grid's ε) that ε."""

    name: str  # the cell's key after "defense@"
    label: str
    overrides: Mapping[str, object]  # the paper's defense values
    composed_epsilon: float | str | None  # the calibrated ε the run composes to ("inf": infinite)
    epsilon: NotRequired[float]  # the ε the paper reads the run as (none: a fixed setting)


@dataclass(frozen=True)
class AttackResult:
    """One attack's outcome on one cell.

    Attributes:
        status: measured, not applicable, failed or inconclusive, with its reason
            (`privbench.results.outcome`).
        uses: the data-dependent message kinds the attack's input was derived from.
        metrics: headline numbers by name (`auc`, `psnr`, `empirical_epsilon`, ...); a value
            that is not a finite number means "not measured".
        kind: the attack's kind (`privbench.audit.attack.KINDS`); None for a result that never
            ran (skipped, failed).
        threat: who observed (a threat model, or one per victim for pooled membership).
        intervals: confidence intervals of metrics, by metric name.
        detail: everything else the attack reports, by key.
    """

    status: Status
    uses: tuple[str, ...] = ()
    metrics: Metrics = field(default_factory=dict)
    kind: str | None = None
    threat: ThreatRecord | list[ThreatRecord] | None = None
    intervals: Mapping[str, Interval | None] | None = None
    detail: Mapping[str, object] = field(default_factory=dict)

    TYPED = ("status", "uses", "metrics", "kind", "threat", "intervals")

    @property
    def ok(self) -> bool:
        """Whether the attack ran and was graded, with no note."""
        return self.status == OK

    def to_json(self) -> JsonObject:
        """The JSON object of a cell file (optional fields written only when set)."""
        out: dict[str, object] = {"status": self.status.text, "uses": list(self.uses),
                                "metrics": dict(self.metrics)}
        for key in ("kind", "threat", "intervals"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return {**out, **self.detail}

    @classmethod
    def from_json(cls, data: JsonObject) -> AttackResult:
        """The record of a cell file's object (a `fingerprint` stays in `detail`)."""
        typed = {k: data[k] for k in cls.TYPED if k in data}
        return cls(**{**typed, "uses": tuple(typed.get("uses", ())),
                      "status": Status.parse(typed["status"])},
                   detail={k: v for k, v in data.items() if k not in cls.TYPED})

    @property
    def n_members(self) -> int | None:
        """Members the membership attack scored (None: not a membership attack)."""
        return self.detail.get("n_members")

    @property
    def n_nonmembers(self) -> int | None:
        """Non-members the membership attack scored."""
        return self.detail.get("n_nonmembers")

    @property
    def roc(self) -> Mapping[str, list[float]] | None:
        """The plotted ROC curve ({fpr, tpr} on a grid), if any."""
        return self.detail.get("roc")

    @property
    def roc_steps(self) -> Mapping[str, list[float]] | None:
        """The exact ROC corners ({fpr, tpr}), if stored."""
        return self.detail.get("roc_steps")

    @property
    def tpr_at_fpr(self) -> list[Mapping[str, float | bool]]:
        """Exact TPR readings ({fpr, tpr, resolved}) at fixed FPRs, if stored."""
        return self.detail.get("tpr_at_fpr") or []

    @property
    def views(self) -> list[Mapping[str, object]] | None:
        """An inversion's results per batch-size view (None: the cell's own run only)."""
        return self.detail.get("views")

    @property
    def gallery(self) -> Mapping[str, object] | None:
        """True and reconstructed images of an inversion, if any."""
        return self.detail.get("gallery")

    @property
    def mechanism(self) -> MechanismReport | None:
        """The mechanism audit's report (`privbench.audit.mechanism`), if this is one."""
        return self.detail.get("mechanism")

    def without(self, *keys: str) -> AttackResult:
        """The record without these detail keys, in it and in each of its inversion views
        (timings are written to timings.json, not with the results)."""
        detail = {k: v for k, v in self.detail.items() if k not in keys}
        if isinstance(detail.get("views"), list):
            detail["views"] = [{k: v for k, v in view.items() if k not in keys}
                               for view in detail["views"]]
        return dataclasses.replace(self, detail=detail)


@dataclass(frozen=True)
class TrainedCell:
    """A trained run: one (defense, ε or paper setting) of an audit, or a `privbench train` run
    (whose results.json is `privbench.engine.runner.run_file` of it).

    Attributes:
        defense: the defense's registry key.
        epsilon: the target ε the run was calibrated for (None: not private, or a fixed paper
            setting).
        status: measured ("ok"), or how training ended otherwise (diverged in round r).
        accuracy: the average model's test accuracy (None: not measured).
        privacy: the per-node ε reports (`privbench.accounting`), as written.
        messages: every message kind the defense sends, with its DP coverage.
        detail: everything else (node accuracies, config, history, sampling drawn, ...).
    """

    defense: str
    epsilon: float | None
    status: Status
    accuracy: float | None
    privacy: tuple[PrivacyReport, ...] = ()
    messages: tuple[MessageRecord, ...] = ()
    detail: Mapping[str, object] = field(default_factory=dict)

    TYPED = ("defense", "epsilon", "status", "accuracy", "privacy", "messages")

    @property
    def ok(self) -> bool:
        """Whether training ended normally (attacks run on it)."""
        return self.status == OK

    @property
    def setting(self) -> PaperSetting | None:
        """The paper setting or reading the cell runs (None: a calibrated or non-private
        cell)."""
        return self.detail.get("setting") or None

    @property
    def history(self) -> list[Mapping[str, float | int | None]]:
        """The evaluations during training (round, accuracy, test_samples, ...)."""
        return self.detail.get("history") or []

    @property
    def sampling_drawn(self) -> list[str] | None:
        """The sampling schemes the trainer drew (None: not recorded)."""
        return self.detail.get("sampling_drawn")

    @property
    def sensitivity_trace(self) -> Mapping[str, list[float | bool | None]] | None:
        """Per round, the estimated and the real sensitivity (DPPS-style defenses)."""
        return self.detail.get("sensitivity_trace") or None

    def to_json(self) -> JsonObject:
        """The JSON object of `train.json` (and of a results cell, without its attacks)."""
        return {"defense": self.defense, "epsilon": self.epsilon, "status": self.status.text,
                "accuracy": self.accuracy, "privacy": list(self.privacy),
                "messages": list(self.messages), **self.detail}

    @classmethod
    def from_json(cls, data: JsonObject) -> TrainedCell:
        """The record of a `train.json` object."""
        return cls(defense=data["defense"], epsilon=data["epsilon"],
                   status=Status.parse(data["status"]),
                   accuracy=data["accuracy"], privacy=tuple(data.get("privacy", ())),
                   messages=tuple(data.get("messages", ())),
                   detail={k: v for k, v in data.items() if k not in cls.TYPED})

    def with_detail(self, **more: object) -> TrainedCell:
        """The record with these detail keys set (added or replaced)."""
        return dataclasses.replace(self, detail={**self.detail, **more})

    def without(self, *keys: str) -> TrainedCell:
        """The record without these detail keys."""
        return dataclasses.replace(self, detail={k: v for k, v in self.detail.items()
                                                 if k not in keys})


def required_fields(record: type) -> tuple[str, ...]:
    """The typed fields every object of `record` carries in its JSON (those without a default
    that may be left out): what the schema requires of a cell file."""
    return tuple(f.name for f in dataclasses.fields(record) if f.name in record.TYPED
                 and f.name not in ("kind", "threat", "intervals"))


class TunedSummary(TypedDict, total=False):
    """Per cell, the tuned entry it ran with (`cells`) or why none applied (`missing`)."""

    source: str
    cells: dict[str, dict[str, ConfigValue]]
    missing: dict[str, dict[str, ConfigValue]]
    privacy_note: str


@dataclass(frozen=True)
class AuditCell:
    """One cell of an audit: the trained (defense, ε or paper setting) and its attacks' results
    by attack name. Its JSON is the `TrainedCell`'s with an `attacks` object."""

    trained: TrainedCell
    attacks: Mapping[str, AttackResult] = field(default_factory=dict)

    @property
    def defense(self) -> str:
        return self.trained.defense

    @property
    def epsilon(self) -> float | None:
        return self.trained.epsilon

    @property
    def status(self) -> Status:
        return self.trained.status

    @property
    def accuracy(self) -> float | None:
        return self.trained.accuracy

    @property
    def privacy(self) -> tuple[PrivacyReport, ...]:
        return self.trained.privacy

    @property
    def messages(self) -> tuple[MessageRecord, ...]:
        return self.trained.messages

    @property
    def setting(self) -> PaperSetting | None:
        return self.trained.setting

    def to_json(self) -> JsonObject:
        """The cell's object in results.json."""
        return {**self.trained.to_json(),
                "attacks": {name: att.to_json() for name, att in self.attacks.items()}}

    @classmethod
    def from_json(cls, data: JsonObject) -> AuditCell:
        """The record of a results.json cell. Only `defense` and `attacks` are required there
        (results merged or written by other tools): a missing name reads as "", a missing ε
        or accuracy as None, a missing status as "ok", a missing attack status as "" (not
        graded)."""
        trained = {"defense": "", "epsilon": None, "status": "ok", "accuracy": None,
                   **{k: v for k, v in data.items() if k != "attacks"}}
        return cls(TrainedCell.from_json(trained),
                   {name: AttackResult.from_json({"status": "", **att})
                    for name, att in (data.get("attacks") or {}).items()})


@dataclass(frozen=True)
class AuditSettings:
    """What an audit ran with (results.json's `config`): the base run config and the defense
    overrides as written, the audit's config, the threat model, the fingerprint of every cell
    file, the threads, and the tuned values used (if any); `detail`: any other key."""

    run: Mapping[str, ConfigValue] | None = None
    defense_overrides: Mapping[str, ConfigValue] | None = None
    audit: Mapping[str, ConfigValue] | None = None
    threat: str | None = None
    fingerprint: str | None = None
    threads: int | None = None
    tuned: TunedSummary | None = None
    detail: Mapping[str, object] = field(default_factory=dict)

    TYPED = ("run", "defense_overrides", "audit", "threat", "fingerprint", "threads", "tuned")

    def to_json(self) -> JsonObject:
        """results.json's `config` object (a field written only when set)."""
        typed = {k: getattr(self, k) for k in self.TYPED if getattr(self, k) is not None}
        return {**typed, **self.detail}

    @classmethod
    def from_json(cls, data: JsonObject) -> AuditSettings:
        """The record of results.json's `config` object."""
        typed = {k: data[k] for k in cls.TYPED if data.get(k) is not None}
        return cls(**typed, detail={k: v for k, v in data.items() if k not in cls.TYPED})


@dataclass(frozen=True)
class AuditRun:
    """A whole audit (results.json of `privbench attack`): its cells in the grid's order, the
    command that ran it, its settings and environment; `detail`: any other top-level key.

    Attributes:
        cells: one `AuditCell` per (defense, ε or paper setting).
        schema_version: the results schema (`privbench.results.store.SCHEMA_VERSION`).
        kind: "audit".
        command: the command line, as run.
        config: the audit's settings (None: a file without them).
        environment: versions, device and code identity (`privbench.engine.runner.environment`).
    """

    cells: tuple[AuditCell, ...]
    schema_version: int = 1
    kind: str = "audit"
    command: str | None = None
    config: AuditSettings | None = None
    environment: Mapping[str, ConfigValue] | None = None
    detail: Mapping[str, object] = field(default_factory=dict)

    TYPED = ("cells", "schema_version", "kind", "command", "config", "environment")

    @property
    def dataset(self) -> str:
        """The audit's dataset registry key ("" when the file does not say)."""
        run = (self.config.run if self.config else None) or {}
        return str(run.get("dataset", ""))

    def to_json(self) -> JsonObject:
        """results.json's object (written key-sorted, strict, by `privbench.results.store`)."""
        out: dict[str, object] = {"schema_version": self.schema_version, "kind": self.kind}
        if self.command is not None:
            out["command"] = self.command
        if self.config is not None:
            out["config"] = self.config.to_json()
        if self.environment is not None:
            out["environment"] = dict(self.environment)
        return {**out, "cells": [c.to_json() for c in self.cells], **self.detail}

    @classmethod
    def from_json(cls, data: JsonObject) -> AuditRun:
        """The record of results.json's object (checked against the schema by the reader)."""
        config = data.get("config")
        return cls(tuple(AuditCell.from_json(c) for c in data.get("cells") or ()),
                   schema_version=data.get("schema_version", 1),
                   kind=data.get("kind", "audit"), command=data.get("command"),
                   config=None if config is None else AuditSettings.from_json(config),
                   environment=data.get("environment"),
                   detail={k: v for k, v in data.items() if k not in cls.TYPED})


def as_run(results: AuditRun | JsonObject) -> AuditRun:
    """The record of an audit run, or of its results.json object."""
    return results if isinstance(results, AuditRun) else AuditRun.from_json(results)


def as_cell(cell: AuditCell | JsonObject) -> AuditCell:
    """The record of an audit cell, or of its results.json object."""
    return cell if isinstance(cell, AuditCell) else AuditCell.from_json(cell)
