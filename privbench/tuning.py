"""`privbench tune`: grid search of a defense's step size and clip bound on a validation split.

Each candidate is trained on the nodes' training members minus a validation fraction carved from
them (`data.carve_validation`: the same carve for every candidate, never the test set, never the
held-out non-members) and scored by its average model's accuracy on that validation split. Every
candidate's result is written (`tune.json`); the best one (highest validation accuracy; ties: the
first in grid order) can be saved as the preset's tuned values (`--save`, the committed file is
`privbench/presets/tuned.toml`), which `privbench attack` then applies and reports.

Only afterwards, for the record, the untuned defaults and the chosen candidate are trained on the
full members and their test accuracy is reported: the test set never takes part in the choice.

The tuning's own privacy cost is not charged: every candidate's run is (ε, δ)-DP, but choosing the
best of k runs on private data leaks more (Papernot & Steinke, "Hyperparameter Tuning with Renyi
Differential Privacy", ICLR 2022, bound and mitigate this). The literature usually tunes without
charging it; privbench does the same and says so wherever tuned values are used.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from privbench.config import RunConfig, read_toml, replace_checked
from privbench.errors import ConfigError
from privbench.registry import DEFENSES

TUNED_FILE = Path(__file__).parent / "presets" / "tuned.toml"
PRIVACY_NOTE = ("the tuning's own privacy cost is not charged (as usual in the literature; see "
                "Papernot & Steinke 2022, Hyperparameter Tuning with Renyi Differential Privacy)")
# Run fields a tuned entry must match to apply (what the values were tuned for).
MATCH_FIELDS = ("dataset", "model", "nodes", "rounds", "batch_size", "partition", "topology")


@dataclass(frozen=True)
class Candidate:
    """One grid point: run-field and defense-field overrides."""

    run: dict[str, Any]
    defense: dict[str, Any]

    def label(self) -> str:
        """'lr=0.1 clip=1' in grid order."""
        return " ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
                        for k, v in {**self.run, **self.defense}.items())


def parse_grid(items: list[str], defense: str) -> list[Candidate]:
    """`KEY=V1,V2,...` items -> the Cartesian product of candidates, in order.

    A key is a field of the defense's config (e.g. `clip`, `lr_constant`) or of the run
    (`lr`); `defense.` / `run.` prefixes force one. Values are checked against the field's type.
    """
    if not items:
        raise ConfigError("--grid needs at least one KEY=V1,V2,... (e.g. --grid lr=0.05,0.2 "
                          "--grid clip=0.1,1)")
    cls = DEFENSES.get(defense)
    defense_fields = {f.name for f in dataclasses.fields(cls.Config)}
    run_fields = {f.name for f in dataclasses.fields(RunConfig)}
    axes: list[tuple[str, str, list[Any]]] = []
    for item in items:
        key, sep, values = item.partition("=")
        key = key.strip()
        where = "defense" if key.startswith("defense.") else "run" if key.startswith("run.") else ""
        key = key.removeprefix("defense.").removeprefix("run.")
        if not where:
            where = "defense" if key in defense_fields else "run" if key in run_fields else ""
        fields = defense_fields if where == "defense" else run_fields
        if not sep or not values.strip() or key not in fields:
            raise ConfigError(f"bad --grid item {item!r}: expected KEY=V1,V2,... with KEY a run "
                              f"field (lr, ...) or a {defense} field "
                              f"({', '.join(sorted(defense_fields))})")
        base = cls.Config() if where == "defense" else RunConfig()
        vals = [getattr(replace_checked(base, {key: v.strip()}, where=where), key)
                for v in values.split(",") if v.strip()]
        axes.append((where, key, list(dict.fromkeys(vals))))
    out = []
    for combo in itertools.product(*(vals for _, _, vals in axes)):
        picked = [(w, k, v) for (w, k, _), v in zip(axes, combo, strict=True)]
        out.append(Candidate({k: v for w, k, v in picked if w == "run"},
                             {k: v for w, k, v in picked if w == "defense"}))
    return out


def train_once(run: RunConfig, defense: str, overrides: dict[str, Any],
               validation: float) -> dict[str, Any]:
    """Train one configuration; its average-model accuracy on the validation split (validation
    > 0) or on the test set (validation == 0), with its status and time."""
    from privbench.engine import node_models, train
    from privbench.fingerprint import tensors_sha256
    from privbench.messages import RecordPolicy
    from privbench.runner import build

    start = time.perf_counter()
    built = build(run, defense, overrides, policy=RecordPolicy.none(), validation=validation)
    res = train(built.trainer)
    status = "ok" if res.diverged_round is None else f"diverged at round {res.diverged_round}"
    acc = res.average_accuracy if res.diverged_round is None else None
    # the (n, d) final models, hashed: two candidates with the same digest trained the same models
    return {"status": status, "accuracy": acc, "seconds": time.perf_counter() - start,
            "models_sha256": tensors_sha256([node_models(built.trainer)])}


def inert_keys(rows: list[dict[str, Any]]) -> list[str]:
    """Grid keys that changed nothing: every set of candidates that differ in that key alone
    trained bit-identical models (e.g. Dyn-D2P's `clip_bar`, which only its `const` and
    `dyn_mu` variants read). A key with no two candidates differing in it alone is not judged."""
    def settings(r: dict[str, Any]) -> dict[str, Any]:
        return {**r["run"], **r["defense"]}

    out = []
    for key in dict.fromkeys(k for r in rows for k in settings(r)):
        groups: dict[str, list[str | None]] = {}
        for r in rows:
            rest = sorted((k, repr(v)) for k, v in settings(r).items() if k != key)
            groups.setdefault(repr(rest), []).append(r.get("models_sha256"))
        judged = [g for g in groups.values() if len(g) > 1]
        if judged and all(None not in g and len(set(g)) == 1 for g in judged):
            out.append(key)
    return out


def tune(run: RunConfig, defense: str, candidates: list[Candidate], validation: float,
         base_overrides: dict[str, Any] | None = None,
         progress: bool = True, test: bool = True) -> dict[str, Any]:
    """Score every candidate on the validation split; the best, and (`test`) the test accuracy
    of the untuned and the chosen setting trained on the full members (two more full runs).

    Returns:
        {"candidates": [...], "best": index or None, "untuned_test", "tuned_test", ...}; the
        last two absent without `test`.
    """
    if not 0 < validation < 1:
        raise ConfigError(f"--validation must be in (0, 1), got {validation}")
    base_overrides = dict(base_overrides or {})
    rows = []
    for cand in candidates:
        cand_run = replace_checked(run, cand.run, where="run")
        res = train_once(cand_run, defense, {**base_overrides, **cand.defense}, validation)
        rows.append({"run": cand.run, "defense": cand.defense, "label": cand.label(),
                     "validation_accuracy": res["accuracy"], "status": res["status"],
                     "seconds": res["seconds"], "models_sha256": res["models_sha256"]})
        if progress:
            acc = res["accuracy"]
            print(f"  {cand.label():<40} validation accuracy "
                  f"{'-' if acc is None else f'{acc:.4f}'}  {res['status']}", flush=True)
    scored = [(r["validation_accuracy"], -i) for i, r in enumerate(rows)
              if r["validation_accuracy"] is not None and math.isfinite(r["validation_accuracy"])]
    best = -max(scored)[1] if scored else None
    out: dict[str, Any] = {"defense": defense, "epsilon": run.epsilon, "validation": validation,
                           "candidates": rows, "best": best, "inert": inert_keys(rows),
                           "privacy_note": PRIVACY_NOTE}
    if not test:
        return out
    out["untuned_test"] = train_once(run, defense, base_overrides, 0.0)
    if best is not None:
        chosen = rows[best]
        out["tuned_test"] = train_once(replace_checked(run, chosen["run"], where="run"), defense,
                                       {**base_overrides, **chosen["defense"]}, 0.0)
    return out


def load_tuned(path: Path = TUNED_FILE) -> dict[str, Any]:
    """The tuned-values file: {preset: {defense: [entry, ...]}} (empty when absent)."""
    return read_toml(path, "tuned-values file") if path.is_file() else {}


def entry_for(entries: list[dict[str, Any]], run: RunConfig, eps: float | None,
              defense: str) -> tuple[dict[str, Any] | None, str]:
    """The tuned entry that applies to `run` of `defense` at `eps`, or None with the reason.

    An entry applies when the run's MATCH_FIELDS (topology "auto" resolved to the defense's
    graph, as it trains) equal those it was tuned with; among those the entry tuned at the
    nearest ε (in log scale) is used.
    """
    mine = tuned_settings(run, defense)
    fits = [e for e in entries
            if all(e.get("settings", {}).get(k) == mine[k] for k in MATCH_FIELDS)]
    if not fits:
        return None, ("no tuned values for these settings" if entries else "no tuned values")
    if eps is None:
        return fits[0], ""
    best = min(fits, key=lambda e: abs(math.log(e["epsilon"]) - math.log(eps)))
    return best, ""


def apply_tuned(entries: list[dict[str, Any]], run: RunConfig, eps: float | None,
                defense: str) -> tuple[RunConfig, dict[str, Any], dict[str, Any] | None]:
    """`run` with the applicable tuned entry's run values, its defense overrides, and what was
    used (the values, where they came from, the command; None and no change when none applies).
    """
    entry, _ = entry_for(entries, run, eps, defense)
    if entry is None:
        return run, {}, None
    used = {"run": dict(entry.get("run", {})), "defense": dict(entry.get("defense", {})),
            "tuned_at_epsilon": entry["epsilon"], "command": entry.get("command"),
            "validation_accuracy": entry.get("validation_accuracy"),
            "source": "privbench/presets/tuned.toml", "note": PRIVACY_NOTE}
    return replace_checked(run, used["run"], where="run"), used["defense"], used


def tuned_settings(run: RunConfig, defense: str) -> dict[str, Any]:
    """The run fields a tuned entry records (and must match to apply), with topology "auto"
    resolved to the graph `defense` trains on (so "auto" and its resolution match alike)."""
    from privbench.registry import DEFENSES, load_plugins
    from privbench.runner import with_default_topology

    load_plugins()
    resolved = with_default_topology(run, DEFENSES.get(defense))
    return {k: getattr(resolved, k) for k in MATCH_FIELDS}


def toml_entry(preset: str, defense: str, run: RunConfig, result: dict[str, Any],
               command: str) -> str:
    """One `[[preset.defense]]` table for tuned.toml from a tune result (best candidate)."""
    chosen = result["candidates"][result["best"]]

    def value(v: Any) -> str:
        return repr(v) if isinstance(v, float) else f'"{v}"' if isinstance(v, str) else str(v)

    def table(d: dict[str, Any]) -> str:
        return "{ " + ", ".join(f"{k} = {value(v)}" for k, v in d.items()) + " }"

    from privbench.provenance import code_digest, code_revision

    tested = (f"untuned {result['untuned_test']['accuracy']}, tuned "
              f"{result.get('tuned_test', {}).get('accuracy')}" if "untuned_test" in result
              else "not measured (--skip-test)")
    return "\n".join([
        f"[[{preset}.{defense}]]",
        f"epsilon = {run.epsilon!r}",
        f"run = {table(chosen['run'])}",
        f"defense = {table(chosen['defense'])}",
        f"validation_accuracy = {chosen['validation_accuracy']!r}",
        f"validation = {result['validation']!r}",
        f"settings = {table(tuned_settings(run, defense))}",
        f"command = {value(command)}",
        f"# test accuracy (reported, not used for the choice): {tested}",
        *(f"# {key} changed nothing here (identical models for each of its values)"
          for key in result.get("inert", [])),
        # The numbers above hold for this code only: a later change to a trainer or its noise
        # moves them (re-run `command` to check).
        f"# tuned by {code_revision()} (code sha256 {code_digest()})",
        "",
    ])


def save_entry(path: Path, text: str, preset: str, defense: str, eps: float) -> None:
    """Append (or replace the same preset/defense/ε) entry in the tuned-values file."""
    import re

    from privbench.results import atomic_write_text

    old = path.read_text() if path.is_file() else ""
    header, *blocks = re.split(r"(?m)^(?=\[\[)", old)  # the comment header, then each entry
    head = f"[[{preset}.{defense}]]\nepsilon = {eps!r}\n"
    kept = [b.rstrip("\n") + "\n\n" for b in blocks if not b.startswith(head)]
    atomic_write_text(path, header + "".join(kept) + text)
