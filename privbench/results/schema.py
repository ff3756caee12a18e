"""Schemas of the JSON files privbench reads back: audit cell files and results files.

Every file is checked when read, before anything uses it, so a truncated, hand-edited or damaged
file is reported in one line (which file, which field, what is wrong) instead of being merged into
an aggregate or ending in a traceback deep inside the report or the gate. A schema is a small tree
of checkers: each takes a value and returns None when it fits, or what is wrong with it.

The fields a cell file must carry are the typed fields of its record
(`privbench.results.records`: `TrainedCell`, `AttackResult`), each with its checker here; the
typed fields of an audit's results (`AuditRun`) are checked where present.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from privbench.results.records import AttackResult, AuditRun, TrainedCell, required_fields

Checker = Callable[[Any], str | None]


def _kind(v: Any) -> str:
    return "null" if v is None else {dict: "object", list: "array", str: "string",
                                     bool: "boolean"}.get(type(v), "number")


def _typed(name: str, ok: Callable[[Any], bool]) -> Checker:
    return lambda v: None if ok(v) else f"expected {name}, got {_kind(v)}"


STR = _typed("a string", lambda v: isinstance(v, str))
BOOL = _typed("a boolean", lambda v: isinstance(v, bool))
INT = _typed("an integer", lambda v: isinstance(v, int) and not isinstance(v, bool))
NUM = _typed("a number", lambda v: isinstance(v, (int, float)) and not isinstance(v, bool))
ANY: Checker = lambda v: None  # noqa: E731
# A number, or the string "inf" that privacy reports use for an unbounded ε.
EPS = _typed("a number or \"inf\"", lambda v: v == "inf" or (isinstance(v, (int, float))
                                                               and not isinstance(v, bool)))


def optional(check: Checker) -> Checker:
    """`check`, or null."""
    return lambda v: None if v is None else check(v)


def array(item: Checker) -> Checker:
    """An array whose every item fits `item`."""
    def check(v: Any) -> str | None:
        if not isinstance(v, list):
            return f"expected an array, got {_kind(v)}"
        for i, x in enumerate(v):
            problem = item(x)
            if problem:
                return f"[{i}]: {problem}"
        return None
    return check


def mapping(value: Checker) -> Checker:
    """An object with any keys whose every value fits `value`."""
    def check(v: Any) -> str | None:
        if not isinstance(v, dict):
            return f"expected an object, got {_kind(v)}"
        for k, x in v.items():
            problem = value(x)
            if problem:
                return f".{k}: {problem}"
        return None
    return check


def record(required: dict[str, Checker], optional_keys: dict[str, Checker] | None = None
           ) -> Checker:
    """An object with these required keys (and these optional ones; other keys are allowed)."""
    def check(v: Any) -> str | None:
        if not isinstance(v, dict):
            return f"expected an object, got {_kind(v)}"
        for k, c in required.items():
            if k not in v:
                return f"missing field {k!r}"
            problem = c(v[k])
            if problem:
                return f".{k}: {problem}"
        for k, c in (optional_keys or {}).items():
            problem = c(v[k]) if k in v else None
            if problem:
                return f".{k}: {problem}"
        return None
    return check


FINGERPRINT = record({"sha256": STR, "fields": mapping(ANY)})
PRIVACY = record({"mode": STR, "epsilon": optional(EPS)}, {"node": INT, "delta": optional(NUM),
                                                 "accountant": STR, "unit": STR,
                                                 "uncovered": array(STR)})
MESSAGE = record({"name": STR}, {"covered": BOOL, "data_dependent": BOOL})
ROC = record({"fpr": array(NUM), "tpr": array(NUM)})
GALLERY = record({"true": array(ANY), "reconstructed": array(ANY)})
# Metric values are read through `finite_or_none` (anything not a finite number is "not
# measured"), so a metric may also be a structure (an interval, a detail record).
# The checker of each typed field of a record (a typed field without one fails at import).
FIELD_CHECKS: dict[str, Checker] = {
    "status": STR, "uses": array(STR), "metrics": mapping(ANY), "defense": STR,
    "epsilon": optional(NUM), "accuracy": optional(NUM), "privacy": array(PRIVACY),
    "messages": array(MESSAGE), "command": STR, "environment": mapping(ANY),
    "config": mapping(ANY),
}
_ATTACK_FIELDS = {k: FIELD_CHECKS[k] for k in required_fields(AttackResult)}
_ATTACK_OPTIONAL = {"roc": optional(ROC), "gallery": optional(GALLERY), "kind": STR}
_CELL_FIELDS = {k: FIELD_CHECKS[k] for k in required_fields(TrainedCell)}
_CELL_OPTIONAL = {"node_accuracy": array(optional(NUM)), "defense_config": mapping(ANY),
                  "history": array(ANY)}
# The files of one audit cell, as `privbench attack` writes them under cells/<defense>@<ε>/:
# every field required.
TRAIN_FILE = record({**_CELL_FIELDS, "fingerprint": FINGERPRINT}, _CELL_OPTIONAL)
ATTACK_FILE = record({**_ATTACK_FIELDS, "fingerprint": FINGERPRINT}, _ATTACK_OPTIONAL)
# results.json of `privbench attack` (cells as assembled; results may be merged or written by
# other tools, so only what identifies a cell is required, the rest is typed where present) and
# of `privbench train`.
ATTACK = record({}, {**_ATTACK_FIELDS, **_ATTACK_OPTIONAL})
CELL = record({"defense": STR, "attacks": mapping(ATTACK)},
              {**_CELL_FIELDS, **_CELL_OPTIONAL, "fingerprint": STR})
AUDIT = record({"kind": STR, "cells": array(CELL)},
               {k: FIELD_CHECKS[k] for k in AuditRun.TYPED
                if k not in ("cells", "kind", "schema_version")})
TRAIN = record({"kind": STR, "defense": STR, "run": mapping(ANY),
                "accuracy": record({"average_model": optional(NUM),
                                    "per_node": array(optional(NUM))}),
                "privacy": array(PRIVACY), "messages": array(MESSAGE)},
               {"defense_config": mapping(ANY), "history": array(ANY),
                "diverged_round": optional(INT)})


def check_results(data: dict[str, Any]) -> str | None:
    """What is wrong with a results dict (schema by its `kind`), or None."""
    kind = data.get("kind")
    if kind == "audit":
        return AUDIT(data)
    if kind == "train":
        return TRAIN(data)
    return f"kind must be 'audit' or 'train', got {kind!r}"
