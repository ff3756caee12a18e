"""The results files between computation and presentation: atomic writes, strict JSON, the
schema-checked readers (`read_audit` gives the typed `AuditRun` record) and the readers of an
audit's cells shared by the report, the terminal summary and the gate.

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
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypedDict

from privbench.errors import DataError, PrivbenchError
from privbench.results.outcome import Word
from privbench.results.records import (
    AttackResult,
    AuditCell,
    AuditRun,
    JsonObject,
    PrivacyReport,
    TrainedCell,
    as_cell,
    as_run,
)

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
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; a report is for others to read
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


def _umask() -> int:
    """The process's umask (read by setting it and restoring it at once)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


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
    from privbench.results.schema import check_results

    problem = check_results(data)
    if problem:
        raise DataError(f"results file {path} does not match the results schema: {problem}")
    return data



def read_audit(path: str | Path, wrong_kind: str = "") -> AuditRun:
    """An audit's results.json as its record (`read_results`, then `AuditRun.from_json`)."""
    return AuditRun.from_json(read_results(path, "audit", wrong_kind))


def write_audit(path: str | Path, run: AuditRun) -> None:
    """Atomically write an audit's results.json (the record's JSON, strict, key-sorted)."""
    atomic_write_text(path, dumps(run.to_json()))


# Readers of audit results, shared by the report and the CI gate (pure functions of records;
# a results.json object given instead is read with `AuditCell.from_json` / `AuditRun.from_json`).


def finite_or_none(x: object) -> float | None:
    """x as a float when it is a finite number, else None."""
    return float(x) if isinstance(x, (int, float)) and math.isfinite(float(x)) else None


def headline_reports(privacy: Sequence[PrivacyReport], mode: str) -> dict[int, PrivacyReport]:
    """node -> its headline report in `mode`: the realized reading where the defense reports one
    (`reading: "realized"`, DPPS / PartPSP: the ε of the noise actually drawn w.r.t. the true
    sensitivity), else the node's first report of that mode."""
    out: dict[int, PrivacyReport] = {}
    for r in privacy:
        if r.get("mode") != mode:
            continue
        node = r.get("node", 0)
        if node not in out or (r.get("reading") == "realized"
                               and out[node].get("reading") != "realized"):
            out[node] = r
    return out


def _privacy(cell: AuditCell | TrainedCell | JsonObject) -> Sequence[PrivacyReport]:
    if isinstance(cell, (AuditCell, TrainedCell)):
        return cell.privacy
    return cell.get("privacy") or []


def claimed_eps(cell: AuditCell | TrainedCell | JsonObject, mode: str) -> float | None:
    """The largest over nodes of each node's headline ε in `mode` ("paper" or "calibrated").

    A defense may report several readings per mode (e.g. DeFL-VP's per-coordinate and
    per-vector paper readings); the first one of each node is its headline claim, unless the
    node reports a realized reading (`headline_reports`); the others appear in the report's
    privacy table. An infinite claim is returned as inf. `cell`: a record, or any object with
    a `privacy` list.
    """
    first = {node: r.get("epsilon")
             for node, r in headline_reports(_privacy(cell), mode).items()}
    values = []
    for v in first.values():
        if v in ("inf", float("inf")):
            return float("inf")
        if finite_or_none(v) is not None:
            values.append(float(v))  # type: ignore[arg-type]
    return max(values) if values else None


def claim_rows(cell: AuditCell | TrainedCell | JsonObject) -> list[PrivacyReport]:
    """The privacy-claims table's rows of a cell: one per reading (mode, reading, accountant,
    unit), in the ledger's order, with the largest ε and δ over the nodes that report it and
    the union of what they leave uncovered; `nodes` counts them.

    Nodes can differ (DPDL's per-node graph accounting, Dyn-D2P's degrees), so a row that showed
    one node's ε would understate the reading's worst case.
    """
    rows: dict[tuple[object, ...], PrivacyReport] = {}
    for rep in _privacy(cell):
        key = (rep.get("mode"), rep.get("reading"), rep.get("accountant"), rep.get("unit"))
        row = rows.get(key)
        if row is None:
            rows[key] = {**rep, "nodes": 1, "uncovered": list(rep.get("uncovered") or [])}
            continue
        row["nodes"] += 1
        row["epsilon"] = _worse(row.get("epsilon"), rep.get("epsilon"))
        row["delta"] = _worse(row.get("delta"), rep.get("delta"))
        row["uncovered"] += [k for k in rep.get("uncovered") or [] if k not in row["uncovered"]]
        row["approximate"] = bool(row.get("approximate") or rep.get("approximate"))
    return list(rows.values())


def _worse(a: float | str | None, b: float | str | None) -> float | str | None:
    """The larger of two reported ε (or δ): "inf" beats any number, a number beats None."""
    if "inf" in (a, b) or float("inf") in (a, b):
        return "inf"
    if finite_or_none(a) is None:
        return b
    if finite_or_none(b) is None:
        return a
    return max(float(a), float(b))  # type: ignore[arg-type]


def eps_label(eps: float) -> str:
    """ε as a short, lossless label: `:g` where that is exact, else repr (1, 8, 1.0000001)."""
    short = f"{eps:g}"
    return short if float(short) == eps else repr(float(eps))


# Metrics where a smaller value means the attack recovered more.
LOWER_MEANS_LEAKIER = frozenset({"mse", "lpips"})


def attack_metric(cell: AuditCell | JsonObject, key: str) -> float | None:
    """The worst case (most leaking) value of a metric over a cell's attacks."""
    vals = [finite_or_none(a.metrics.get(key)) for a in as_cell(cell).attacks.values()
            if a.status.measured]
    found = [v for v in vals if v is not None]
    if not found:
        return None
    return min(found) if key in LOWER_MEANS_LEAKIER else max(found)


def attack_interval(cell: AuditCell | JsonObject, key: str) -> list[float] | None:
    """The 95 % interval stored with the attack whose `key` is the cell's worst case (the value
    `attack_metric` reports), or None when that attack stores none."""
    cell = as_cell(cell)
    worst = attack_metric(cell, key)
    if worst is None:
        return None
    for a in cell.attacks.values():
        if a.status.measured and finite_or_none(a.metrics.get(key)) == worst:
            ci = (a.intervals or {}).get(key)
            if ci is not None:
                return [float(ci[0]), float(ci[1])]
    return None


def uncovered_leaks(cell: AuditCell) -> list[str]:
    """Message kinds that carry data-dependent content outside the DP guarantee."""
    return [m["name"] for m in cell.messages
            if not m.get("covered") and m.get("data_dependent", True)]


# What happened to a cell's training, read alike by the report, the terminal summary and the
# gate: "trained", "diverged" (a non-finite model or messages: the attacks that need them did
# not run), or "uninformative" (the model learned nothing: its accuracy's 95 % interval reaches
# chance, so an attack failing on it says nothing of the defense).
CELL_STATES = ("trained", "diverged", "uninformative")
DATASET_CLASSES = {"digits": 10, "cifar10": 10}


class CellState(TypedDict):
    """What happened to a cell's training: `kind` one of CELL_STATES, `text` a short sentence
    for people, `round` the 1-based round that went non-finite (or None)."""

    kind: str
    text: str
    round: int | None


def dataset_classes(results: AuditRun | JsonObject) -> int | None:
    """The number of labels of the audit's dataset (None when privbench does not know it)."""
    from privbench.data.files import IDX_DATASETS

    name = as_run(results).dataset
    if name in IDX_DATASETS:
        return IDX_DATASETS[name].classes
    return DATASET_CLASSES.get(name)


def accuracy_interval(cell: AuditCell) -> list[float] | None:
    """The 95 % Clopper-Pearson interval of the cell's test accuracy over the test samples its
    last evaluation counted, or None without an accuracy or a count."""
    from privbench.metrics.binomial import clopper_pearson

    acc = finite_or_none(cell.accuracy)
    last = (cell.trained.history or [{}])[-1]
    n = last.get("test_samples") if isinstance(last, Mapping) else None
    if acc is None or not isinstance(n, int) or n < 1:
        return None
    return clopper_pearson(round(acc * n), n)


def _diverged_attacks(cell: AuditCell) -> list[str]:
    """Attacks that could not run because the run's model or messages were non-finite."""
    return sorted(a for a, att in cell.attacks.items()
                  if att.status.not_applicable and att.status.non_finite)


def cell_state(cell: AuditCell | JsonObject, classes: int | None = None) -> CellState:
    """What happened to a cell's training (`CellState`).

    diverged: training stopped on a non-finite model (a diverged `status`, in round r), the
    accuracy is not finite, or an attack found the run's messages non-finite. uninformative:
    the accuracy's interval reaches chance (1 / `classes`). Otherwise trained.
    """
    cell = as_cell(cell)
    if cell.status.word is Word.DIVERGED:
        r = cell.status.round
        return {"kind": "diverged", "round": r,
                "text": f"diverged in round {r}" if r else "diverged"}
    bad = _diverged_attacks(cell)
    if bad or (finite_or_none(cell.accuracy) is None and cell.trained.history):
        seen = f" (seen by {', '.join(bad)})" if bad else ""
        return {"kind": "diverged", "round": None,
                "text": f"diverged: non-finite messages{seen}"}
    ci = accuracy_interval(cell)
    if classes and ci is not None and ci[0] <= 1.0 / classes:
        return {"kind": "uninformative", "round": None,
                "text": f"did not learn: accuracy {fmt_num(cell.accuracy)} "
                        f"[{fmt_num(ci[0])}, {fmt_num(ci[1])}] reaches chance "
                        f"{fmt_num(1.0 / classes)}"}
    return {"kind": "trained", "round": None, "text": "trained"}


# One number formatter for the terminal table, the HTML report and the leakage map.
SCIENTIFIC_FROM = 1e4
SCIENTIFIC_BELOW = 1e-3


def fmt_num(x: object, digits: int = 3, missing: str = "–") -> str:
    """A number for people, to `digits` significant digits: fixed point from 1e-3 to 1e4 in
    magnitude (85.0, 0.908, 5000), scientific notation outside it (1.03e+06, 3.17e-09: a tiny ε
    is not no ε), "0" for zero, "∞" / "-∞" for an infinite value and `missing` for anything
    else (None, NaN, text)."""
    if x in ("inf", float("inf")):
        return "∞"
    if x in ("-inf", float("-inf")):
        return "-∞"
    v = finite_or_none(x)
    if v is None:
        return missing
    if v == 0:
        return "0"
    digits = max(1, digits)
    if not SCIENTIFIC_BELOW <= abs(v) < SCIENTIFIC_FROM:
        return f"{v:.{digits - 1}e}"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(v))))
    text = f"{v:.{decimals}f}"
    if abs(float(text)) >= SCIENTIFIC_FROM:  # rounding carried it over the threshold
        return f"{v:.{digits - 1}e}"
    return text



def counted(n: int, noun: str) -> str:
    """"1 run", "2 runs": a count with its noun (a regular plural)."""
    return f"{n} {noun}{'s' * (n != 1)}"


def duration(seconds: float) -> str:
    """"45 s", "12 min": a run's time for people (seconds up to a minute and a half)."""
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def eps_text(eps: object) -> str:
    """A target ε for people: "ε=1", "ε=1.03e+06", or "no DP" when there is none."""
    if not isinstance(eps, (int, float)):
        return "no DP"
    return f"ε={eps:g}" if abs(eps) < SCIENTIFIC_FROM else f"ε={fmt_num(eps)}"


def privacy_line(rep: PrivacyReport) -> str:
    """One privacy report entry as a sentence: ε, δ, accountant, unit, what it does not cover."""
    delta = rep.get("delta")
    reading = f" ({rep['reading']})" if rep.get("reading") else ""  # DPPS: assumed / realized
    text = f"{rep.get('mode', '?')}{reading} ε = {fmt_num(rep.get('epsilon'))}"
    text += f" at δ = {delta:g}" if isinstance(delta, (int, float)) else ""
    text += f" ({rep.get('accountant', '?')}, {rep.get('unit', '?')}"
    text += ", approximate" if rep.get("approximate") else ""
    text += ")"
    if rep.get("uncovered"):
        text += "; NOT covered: " + ", ".join(rep["uncovered"])
    return text


def noise_feedback_text(reps: Sequence[PrivacyReport]) -> str | None:
    """Why a DPPS-style run diverged, when its privacy report predicts it (`noise_feedback`:
    the noise grows the next round's sensitivity by more than 1 per round), else None."""
    loop = next((r["noise_feedback"] for r in reps if r.get("noise_feedback")), None)
    if not loop or loop.get("growth_per_round", 0.0) <= 1.0:
        return None
    return (f"the noise is in the next round's sensitivity: it grows it about "
            f"{loop['growth_per_round']:.3g}x per round, bounded only for a per-round ε "
            f"above {fmt_num(loop['stable_above_epsilon_round'], 0)} "
            f"({loop['shared_coordinates']} shared coordinates)")


def auc_interval(attack: AttackResult | JsonObject, z: float = 1.96
                 ) -> tuple[float, float] | None:
    """The AUC's 95% interval of one membership attack result.

    The attack's own interval when it has one (`intervals.auc` or `auc_ci` = [lo, hi], top
    level or in `metrics`),
    else the normal approximation of Hanley & McNeil (1982) from the member / non-member counts:
    SE^2 = (A(1-A) + (n1-1)(Q1-A^2) + (n0-1)(Q2-A^2)) / (n1 n0), Q1 = A/(2-A), Q2 = 2A^2/(1+A).
    None when the attack has no AUC or no counts.
    """
    att = attack if isinstance(attack, AttackResult) else AttackResult.from_json(
        {"status": "", **attack})
    metrics = att.metrics
    ci = (att.intervals or {}).get("auc") or att.detail.get("auc_ci", metrics.get("auc_ci"))
    if isinstance(ci, (list, tuple)) and len(ci) == 2 and all(finite_or_none(v) is not None
                                                              for v in ci):
        return float(ci[0]), float(ci[1])
    a = finite_or_none(metrics.get("auc"))
    n1, n0 = att.n_members, att.n_nonmembers
    if a is None or not isinstance(n1, int) or not isinstance(n0, int) or n1 < 1 or n0 < 1:
        return None
    q1, q2 = a / (2 - a), 2 * a * a / (1 + a)
    var = (a * (1 - a) + (n1 - 1) * (q1 - a * a) + (n0 - 1) * (q2 - a * a)) / (n1 * n0)
    se = math.sqrt(max(var, 0.0))
    return max(0.0, a - z * se), min(1.0, a + z * se)


def claimed_for_audit(cell: AuditCell | JsonObject
                      ) -> tuple[float | None, float | None, str]:
    """(ε, δ, which) the audit holds a cell to: the largest over nodes of a `realized` ε when the
    privacy report has one (the ε of the noise actually drawn, e.g. DPPS / PartPSP: a report
    with mode "realized", a `realized` {epsilon, delta} entry, or a note starting "realized"),
    else the calibrated claim; δ from the same reports."""
    reps = _privacy(cell)
    realized = [p for p in (_realized_part(r) for r in reps) if p is not None]
    chosen = realized or [r for r in reps if r.get("mode") == "calibrated"]
    which = "realized" if realized else "calibrated"
    eps = [float("inf") if r.get("epsilon") in ("inf", float("inf")) else
           finite_or_none(r.get("epsilon")) for r in chosen]
    eps_v = [e for e in eps if e is not None]
    delta_v = [d for d in (finite_or_none(r.get("delta")) for r in chosen) if d is not None]
    return (max(eps_v) if eps_v else None), (max(delta_v) if delta_v else None), which


def _realized_part(rep: PrivacyReport) -> PrivacyReport | None:
    if isinstance(rep.get("realized"), dict):
        return {"delta": rep.get("delta"), **rep["realized"]}  # type: ignore[typeddict-item]
    if (rep.get("reading") == "realized" or rep.get("mode") == "realized"
            or str(rep.get("note", "")).startswith("realized")):
        return rep
    return None
