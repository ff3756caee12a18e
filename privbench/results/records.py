"""Typed records of what an audit computes: a trained cell and an attack result.

An audit cell file (`cells/<defense>@<ε>/train.json`, `<attack>.json`) and each cell of
`results.json` hold a record's `to_json()`; a reader rebuilds it with `from_json`. The schema
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
  before: `from_json(to_json(r)) == r` and `to_json(from_json(d)) == d` for every file this
  version writes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

Json = Any  # a JSON value (strict: no NaN, written key-sorted by `privbench.results.store`)


@dataclass(frozen=True)
class AttackResult:
    """One attack's outcome on one cell.

    Attributes:
        status: "ok", "not applicable: ...", "skipped: ...", or "failed: ..." (why, in words).
        uses: the data-dependent message kinds the attack's input was derived from.
        metrics: headline numbers by name (`auc`, `psnr`, `empirical_epsilon`, ...); a value
            that is not a finite number means "not measured".
        kind: the attack's kind (`privbench.audit.attack.KINDS`); None for a result that never
            ran (skipped, failed).
        threat: who observed (a threat model, or one per victim for pooled membership).
        intervals: confidence intervals of metrics, by metric name.
        detail: everything else the attack reports, by key.
    """

    status: str
    uses: tuple[str, ...] = ()
    metrics: Mapping[str, Json] = field(default_factory=dict)
    kind: str | None = None
    threat: Json = None
    intervals: Mapping[str, Json] | None = None
    detail: Mapping[str, Json] = field(default_factory=dict)

    TYPED = ("status", "uses", "metrics", "kind", "threat", "intervals")

    @property
    def ok(self) -> bool:
        """Whether the attack ran and was graded."""
        return self.status == "ok"

    def to_json(self) -> dict[str, Json]:
        """The JSON object of a cell file (optional fields written only when set)."""
        out: dict[str, Json] = {"status": self.status, "uses": list(self.uses),
                                "metrics": dict(self.metrics)}
        for key in ("kind", "threat", "intervals"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return {**out, **self.detail}

    @classmethod
    def from_json(cls, data: Mapping[str, Json]) -> AttackResult:
        """The record of a cell file's object (a `fingerprint` stays in `detail`)."""
        typed = {k: data[k] for k in cls.TYPED if k in data}
        return cls(**{**typed, "uses": tuple(typed.get("uses", ()))},
                   detail={k: v for k, v in data.items() if k not in cls.TYPED})

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
    """One (defense, ε or paper setting) of an audit, trained.

    Attributes:
        defense: the defense's registry key.
        epsilon: the target ε the run was calibrated for (None: not private, or a fixed paper
            setting).
        status: "ok", or how training ended otherwise ("diverged in round r ...").
        accuracy: the average model's test accuracy (None: not measured).
        privacy: the per-node ε reports (`privbench.accounting`), as written.
        messages: every message kind the defense sends, with its DP coverage.
        detail: everything else (node accuracies, config, history, sampling drawn, ...).
    """

    defense: str
    epsilon: float | None
    status: str
    accuracy: float | None
    privacy: tuple[Mapping[str, Json], ...] = ()
    messages: tuple[Mapping[str, Json], ...] = ()
    detail: Mapping[str, Json] = field(default_factory=dict)

    TYPED = ("defense", "epsilon", "status", "accuracy", "privacy", "messages")

    @property
    def ok(self) -> bool:
        """Whether training ended normally (attacks run on it)."""
        return self.status == "ok"

    def to_json(self) -> dict[str, Json]:
        """The JSON object of `train.json` (and of a results cell, without its attacks)."""
        return {"defense": self.defense, "epsilon": self.epsilon, "status": self.status,
                "accuracy": self.accuracy, "privacy": list(self.privacy),
                "messages": list(self.messages), **self.detail}

    @classmethod
    def from_json(cls, data: Mapping[str, Json]) -> TrainedCell:
        """The record of a `train.json` object."""
        return cls(defense=data["defense"], epsilon=data["epsilon"], status=data["status"],
                   accuracy=data["accuracy"], privacy=tuple(data.get("privacy", ())),
                   messages=tuple(data.get("messages", ())),
                   detail={k: v for k, v in data.items() if k not in cls.TYPED})

    def with_detail(self, **more: Json) -> TrainedCell:
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
