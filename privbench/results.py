"""The `RunResult` JSON contract between computation and presentation, with atomic writes.

Every file privbench writes goes through `atomic_write_text`: a temporary file in the same folder,
flushed and renamed over the target, so an interrupted run never leaves a half-written file.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

from privbench.errors import DataError, PrivbenchError

SCHEMA_VERSION = 1


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write `text` to `path` atomically (temp file + rename); one-line error if not writable."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        raise PrivbenchError(f"cannot write {path}: {exc.strerror or exc}") from None


def write_json(path: str | Path, obj: Any) -> None:
    """Atomically write `obj` as indented, key-sorted JSON (byte-stable for the same content)."""
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, allow_nan=True) + "\n")


def read_results(path: str | Path) -> dict[str, Any]:
    """Read a results JSON and check its schema version."""
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise DataError(f"results file {path} not found") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataError(f"results file {path} is not valid JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("schema_version") != SCHEMA_VERSION:
        found = data.get("schema_version") if isinstance(data, dict) else None
        raise DataError(f"results file {path} has schema_version {found!r}; "
                        f"this privbench reads schema_version {SCHEMA_VERSION}")
    return data


# Readers of audit results, shared by the report and the CI gate (pure functions of dicts).


def finite_or_none(x: Any) -> float | None:
    """x as a float when it is a finite number, else None."""
    return float(x) if isinstance(x, (int, float)) and math.isfinite(float(x)) else None


def headline_reports(privacy: list[dict[str, Any]], mode: str) -> dict[Any, dict[str, Any]]:
    """node -> its headline report in `mode`: the realized reading where the defense reports one
    (`reading: "realized"`, DPPS / PartPSP: the ε of the noise actually drawn w.r.t. the true
    sensitivity), else the node's first report of that mode."""
    out: dict[Any, dict[str, Any]] = {}
    for r in privacy:
        if r.get("mode") != mode:
            continue
        node = r.get("node", 0)
        if node not in out or (r.get("reading") == "realized"
                               and out[node].get("reading") != "realized"):
            out[node] = r
    return out


def claimed_eps(cell: dict[str, Any], mode: str) -> float | None:
    """The largest over nodes of each node's headline ε in `mode` ("paper" or "calibrated").

    A defense may report several readings per mode (e.g. DeFL-VP's per-coordinate and
    per-vector paper readings); the first one of each node is its headline claim, unless the
    node reports a realized reading (`headline_reports`); the others appear in the report's
    privacy table. An infinite claim is returned as inf.
    """
    first = {node: r.get("epsilon")
             for node, r in headline_reports(cell.get("privacy", []), mode).items()}
    values = []
    for v in first.values():
        if v in ("inf", float("inf")):
            return float("inf")
        if finite_or_none(v) is not None:
            values.append(float(v))
    return max(values) if values else None


# Metrics where a smaller value means the attack recovered more.
LOWER_MEANS_LEAKIER = frozenset({"mse", "lpips"})


def attack_metric(cell: dict[str, Any], key: str) -> float | None:
    """The worst case (most leaking) value of a metric over a cell's attacks."""
    vals = [finite_or_none(a.get("metrics", {}).get(key)) for a in cell.get("attacks", {}).values()
            if str(a.get("status", "")).startswith("ok")]
    vals = [v for v in vals if v is not None]
    if not vals:
        return None
    return min(vals) if key in LOWER_MEANS_LEAKIER else max(vals)


def uncovered_leaks(cell: dict[str, Any]) -> list[str]:
    """Message kinds that carry data-dependent content outside the DP guarantee."""
    return [m["name"] for m in cell.get("messages", [])
            if not m.get("covered") and m.get("data_dependent", True)]
