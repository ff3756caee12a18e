"""The `RunResult` JSON contract between computation and presentation, with atomic writes.

Every file privbench writes goes through `atomic_write_text`: a temporary file in the same folder,
flushed and renamed over the target, so an interrupted run never leaves a half-written file (the
temporary file is removed whatever stops the write; `remove_stale_temps` clears those a kill -9
left behind).

JSON is strict (RFC 8259): a non-finite float is written as the string "nan", "inf" or "-inf"
(never a bare NaN / Infinity, which `jq`, `JSON.parse` and most CI tools reject) and read back as
the same float by `read_json_file` / `read_results`, so a round trip is lossless.
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


TEMP_SUFFIX = ".tmp"


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write `text` to `path` atomically (temp file + rename); one-line error if not writable.

    The temporary file never survives: it is renamed over `path` or removed, whatever stops the
    write (an error, Ctrl-C, a full disk).
    """
    path = Path(path)
    tmp: str | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TEMP_SUFFIX)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        raise PrivbenchError(f"cannot write {path}: {exc.strerror or exc}") from None
    finally:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)


def remove_stale_temps(folder: str | Path, patterns: tuple[str, ...] = ("", "cells/*/")) -> int:
    """Delete the temporary files `atomic_write_text` left when a process was killed mid-write,
    in `folder` and the subfolders matching `patterns` only, and only privbench's own (of a
    .json or .html target; call it while holding the folder's lock); returns how many."""
    stale = [p for pat in patterns for ext in (".json", ".html")
             for p in Path(folder).glob(f"{pat}.*{ext}.*{TEMP_SUFFIX}") if p.is_file()]
    for p in stale:
        p.unlink(missing_ok=True)
    return len(stale)


NONFINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def strict(obj: Any) -> Any:
    """`obj` with every non-finite float replaced by "nan", "inf" or "-inf" (strict JSON)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return "nan" if math.isnan(obj) else "inf" if obj > 0 else "-inf"
    if isinstance(obj, dict):
        return {k: strict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [strict(v) for v in obj]
    return obj


def unstrict(obj: Any) -> Any:
    """The inverse of `strict`: "nan" / "inf" / "-inf" strings back to floats."""
    if isinstance(obj, str):
        return NONFINITE.get(obj, obj)
    if isinstance(obj, dict):
        return {k: unstrict(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [unstrict(v) for v in obj]
    return obj


def dumps(obj: Any) -> str:
    """Indented, key-sorted strict JSON (byte-stable for the same content)."""
    return json.dumps(strict(obj), indent=2, sort_keys=True, allow_nan=False) + "\n"


def write_json(path: str | Path, obj: Any) -> None:
    """Atomically write `obj` as indented, key-sorted strict JSON."""
    atomic_write_text(path, dumps(obj))


def _reject_constant(name: str) -> Any:
    raise ValueError(f"bare {name} is not JSON")


def read_json_file(path: str | Path, what: str) -> Any:
    """Parse a strict JSON file (non-finite strings decoded); one-line DataError otherwise."""
    try:
        text = Path(path).read_text(encoding="utf-8")
        return unstrict(json.loads(text, parse_constant=_reject_constant))
    except FileNotFoundError:
        raise DataError(f"{what} {path} not found") from None
    except OSError as exc:
        raise DataError(f"{what} {path} cannot be read: {exc.strerror or exc}") from None
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        reason = str(exc).replace("\n", " ")[:200]
        raise DataError(f"{what} {path} is not valid JSON ({reason})") from None


def read_results(path: str | Path, kind: str | None = None, wrong_kind: str = ""
                 ) -> dict[str, Any]:
    """Read a results JSON and check its schema version, its `kind` (when given; `wrong_kind`
    says what the caller reads instead) and its schema."""
    data = read_json_file(path, "results file")
    if not isinstance(data, dict) or data.get("schema_version") != SCHEMA_VERSION:
        found = data.get("schema_version") if isinstance(data, dict) else None
        raise DataError(f"results file {path} has schema_version {found!r}; "
                        f"this privbench reads schema_version {SCHEMA_VERSION}")
    if kind is not None and data.get("kind") != kind:
        raise DataError(f"{path} is a {data.get('kind')!r} result; "
                        f"{wrong_kind or f'expected a {kind!r} result'}")
    from privbench.schema import check_results

    problem = check_results(data)
    if problem:
        raise DataError(f"results file {path} does not match the results schema: {problem}")
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


def eps_label(eps: float) -> str:
    """ε as a short, lossless label: `:g` where that is exact, else repr (1, 8, 1.0000001)."""
    short = f"{eps:g}"
    return short if float(short) == eps else repr(float(eps))


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


def attack_interval(cell: dict[str, Any], key: str) -> list[float] | None:
    """The 95 % interval stored with the attack whose `key` is the cell's worst case (the value
    `attack_metric` reports), or None when that attack stores none."""
    worst = attack_metric(cell, key)
    if worst is None:
        return None
    for a in cell.get("attacks", {}).values():
        if (str(a.get("status", "")).startswith("ok")
                and finite_or_none(a.get("metrics", {}).get(key)) == worst):
            ci = (a.get("intervals") or {}).get(key)
            if ci is not None:
                return [float(ci[0]), float(ci[1])]
    return None


def uncovered_leaks(cell: dict[str, Any]) -> list[str]:
    """Message kinds that carry data-dependent content outside the DP guarantee."""
    return [m["name"] for m in cell.get("messages", [])
            if not m.get("covered") and m.get("data_dependent", True)]
