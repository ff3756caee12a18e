"""Grid search of a defense's step size and clip bound on a validation split (`privbench tune`),
and the tuned values an audit's cells look up.

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
charging it; privbench does the same and says so, per cell, wherever tuned values are used
(`privacy_cost`: the rule, the number of candidates, what "not charged" leaves out).

An entry is tuned for one cell: the run settings (MATCH_FIELDS), the ε (a private defense's
entry holds at that ε only; a non-private defense's, or one tuned at a fixed paper setting such
as PartPSP's b, holds at every ε and records none) and the defense values held fixed while
tuning (`fixed`, e.g. DeFL-VP's paper reading `eps_mode = "per_coordinate"`). A cell with no
entry at its own ε runs the untuned defaults and says so; it never borrows another ε's values.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NotRequired, TypedDict, cast

from privbench.config import FieldValue, Overrides, RunConfig, read_toml, replace_checked
from privbench.errors import ConfigError
from privbench.registry import DEFENSES

TUNED_FILE = Path(__file__).parents[1] / "presets" / "tuned.toml"
PRIVACY_NOTE = ("the tuning's own privacy cost is not charged (as usual in the literature; see "
                "Papernot & Steinke 2022, Hyperparameter Tuning with Renyi Differential Privacy)")
# Run fields a tuned entry must match to apply (what the values were tuned for).
MATCH_FIELDS = ("dataset", "model", "nodes", "rounds", "batch_size", "partition", "topology")


class TrainedJSON(TypedDict):
    """`Trained` as tune.json holds it (`untuned_test`, `tuned_test`)."""

    status: str
    accuracy: float | None
    seconds: float
    models_sha256: str


@dataclass(frozen=True)
class Trained:
    """One configuration trained by `train_once`."""

    status: str  # "ok" or "diverged at round R"
    accuracy: float | None  # None when diverged
    seconds: float
    # the (n, d) final models, hashed: two candidates with the same digest trained the same models
    models_sha256: str

    def to_json(self) -> TrainedJSON:
        return {"status": self.status, "accuracy": self.accuracy, "seconds": self.seconds,
                "models_sha256": self.models_sha256}


class CandidateRow(TypedDict):
    """One candidate's line of tune.json."""

    run: Overrides
    defense: Overrides
    label: str
    validation_accuracy: float | None
    status: str
    seconds: float
    models_sha256: str | None


class TuneResult(TypedDict):
    """tune.json as `tune` returns it (`privbench tune` adds the command, run and environment;
    `tune --all` the cell, its fingerprint and command)."""

    defense: str
    epsilon: float
    validation: float
    candidates: list[CandidateRow]
    best: int | None  # index into candidates; None when none finished
    inert: list[str]
    privacy_note: str
    untuned_test: NotRequired[TrainedJSON]  # absent without test accuracies (--skip-test)
    tuned_test: NotRequired[TrainedJSON]  # absent as well when no candidate finished


class TunedEntry(TypedDict, total=False):
    """One `[[preset.defense]]` entry of the tuned-values file, as TOML reads it (`toml_entry`
    writes it; entries written before a field lack it); `preset` is added by its readers."""

    epsilon: float  # absent: the entry holds at every ε
    fixed: Overrides
    run: Overrides
    defense: Overrides
    candidates: int
    validation_accuracy: float
    validation: float
    settings: Overrides
    command: str
    preset: str


class PrivacyCost(TypedDict):
    """The tuning's privacy cost for one cell (`privacy_cost`)."""

    rule: str  # "none" or "not charged"
    meaning: str
    candidates: NotRequired[int | None]


class TunedUse(TypedDict, total=False):
    """The record of one tuned-entry lookup (`apply_tuned`): the entry used, or `entry` None
    with the reason (then only `entry`, `reason` and `privacy_cost`)."""

    entry: str | None
    reason: str
    run: Overrides
    defense: Overrides
    tuned_at_epsilon: float | None
    fixed: Overrides
    command: str | None
    validation_accuracy: float | None
    source: str
    note: str
    privacy_cost: PrivacyCost


@dataclass(frozen=True)
class Candidate:
    """One grid point: run-field and defense-field overrides."""

    run: Overrides
    defense: Overrides

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
    axes: list[tuple[str, str, list[FieldValue]]] = []
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


def train_once(run: RunConfig, defense: str, overrides: Mapping[str, object],
               validation: float, label: str | None = None) -> Trained:
    """Train one configuration; its average-model accuracy on the validation split (validation
    > 0) or on the test set (validation == 0), with its status and time. With `label`, its
    rounds show as a bar on a terminal, a heartbeat line in a log (`privbench.progress`)."""
    from privbench.engine.loop import train
    from privbench.engine.messages import RecordPolicy
    from privbench.engine.runner import build
    from privbench.engine.trainer import node_models
    from privbench.progress import Phase
    from privbench.results.fingerprint import tensors_sha256

    start = time.perf_counter()
    with Phase(label or "", run.rounds, "round", enabled=label is not None) as bar:
        built = build(run, defense, overrides, policy=RecordPolicy.none(),
                      validation=validation)
        res = train(built.trainer, progress=bar.update)
    status = "ok" if res.diverged_round is None else f"diverged at round {res.diverged_round}"
    acc = res.average_accuracy if res.diverged_round is None else None
    return Trained(status, acc, time.perf_counter() - start,
                   tensors_sha256([node_models(built.trainer)]))


def inert_keys(rows: list[CandidateRow]) -> list[str]:
    """Grid keys that changed nothing: every set of candidates that differ in that key alone
    trained bit-identical models (e.g. Dyn-D2P's `clip_bar`, which only its `const` and
    `dyn_mu` variants read). A key with no two candidates differing in it alone is not judged."""
    def settings(r: CandidateRow) -> Overrides:
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
         base_overrides: Mapping[str, object] | None = None,
         progress: bool = True, test: bool = True) -> TuneResult:
    """Score every candidate on the validation split; the best, and (`test`) the test accuracy
    of the untuned and the chosen setting trained on the full members (two more full runs).

    Returns:
        tune.json's content; `untuned_test` and `tuned_test` absent without `test`.
    """
    if not 0 < validation < 1:
        raise ConfigError(f"--validation must be in (0, 1), got {validation}")
    base_overrides = dict(base_overrides or {})
    private = DEFENSES.get(defense).private
    where = f"tune {defense}" + (f" ε={run.epsilon:g}" if private else "")

    def label(what: str) -> str | None:  # a phase's label, None without progress
        return f"{where}: {what}" if progress else None

    rows: list[CandidateRow] = []
    for i, cand in enumerate(candidates, 1):
        cand_run = replace_checked(run, cand.run, where="run")
        res = train_once(cand_run, defense, {**base_overrides, **cand.defense}, validation,
                         label(f"candidate {i} of {len(candidates)} ({cand.label()})"))
        rows.append({"run": cand.run, "defense": cand.defense, "label": cand.label(),
                     "validation_accuracy": res.accuracy, "status": res.status,
                     "seconds": res.seconds, "models_sha256": res.models_sha256})
        if progress:
            acc = res.accuracy
            print(f"  {cand.label():<40} validation accuracy "
                  f"{'-' if acc is None else f'{acc:.4f}'}  {res.status}", flush=True)
    scored = [(acc, -i) for i, r in enumerate(rows)
              if (acc := r["validation_accuracy"]) is not None and math.isfinite(acc)]
    best = -max(scored)[1] if scored else None
    out: TuneResult = {"defense": defense, "epsilon": run.epsilon, "validation": validation,
                           "candidates": rows, "best": best, "inert": inert_keys(rows),
                           "privacy_note": PRIVACY_NOTE}
    if not test:
        return out
    out["untuned_test"] = train_once(run, defense, base_overrides, 0.0,
                                     label("test accuracy of the untuned defaults")).to_json()
    if best is not None:
        chosen = rows[best]
        out["tuned_test"] = train_once(replace_checked(run, chosen["run"], where="run"), defense,
                                       {**base_overrides, **chosen["defense"]}, 0.0,
                                       label(f"test accuracy of the chosen {chosen['label']}"),
                                       ).to_json()
    return out


def load_tuned(path: Path = TUNED_FILE) -> dict[str, dict[str, list[TunedEntry]]]:
    """The tuned-values file: {preset: {defense: [entry, ...]}} (empty when absent)."""
    data = read_toml(path, "tuned-values file") if path.is_file() else {}
    return cast(dict[str, dict[str, list[TunedEntry]]], data)  # `toml_entry`'s layout


def tuned_entries(presets: Collection[str] | None, run_keys: Collection[str],
                  defense_keys: Collection[str]) -> dict[str, list[TunedEntry]]:
    """Per defense, the entries of `presets` (None: every preset) in the tuned-values file, each
    with its `preset` and without the run keys `run_keys` and the defense keys `defense_keys`
    (the values the user set win over tuned ones)."""
    out: dict[str, list[TunedEntry]] = {}
    tuned = load_tuned()
    for preset in tuned if presets is None else presets:
        for defense, entries in tuned.get(preset, {}).items():
            out.setdefault(defense, []).extend(
                {**e, "preset": preset,
                 "run": {k: v for k, v in e.get("run", {}).items() if k not in run_keys},
                 "defense": {k: v for k, v in e.get("defense", {}).items()
                             if k not in defense_keys}} for e in entries)
    return out


def fixed_values(defense: str, overrides: Mapping[str, object]) -> Overrides:
    """`overrides` typed by `defense`'s config, those equal to its defaults left out: the values
    a tuned entry's `fixed` table is compared with (`"5"` from `--set` equals `5.0`)."""
    from privbench.plugins import load_plugins

    load_plugins()
    default = DEFENSES.get(defense).Config()
    typed = replace_checked(default, dict(overrides), where="defense")
    return {k: getattr(typed, k) for k in overrides if getattr(typed, k) != getattr(default, k)}


def _eps_free(entry: TunedEntry, defense: str) -> bool:
    """Whether an entry holds at every ε: a non-private defense's, or one with no `epsilon`
    (tuned at a fixed paper setting, whose noise no ε target sets)."""
    return not DEFENSES.get(defense).private or "epsilon" not in entry


def entry_for(entries: list[TunedEntry], run: RunConfig, eps: float | None,
              defense: str, fixed: Mapping[str, object] | None = None,
              ) -> tuple[TunedEntry | None, str]:
    """The tuned entry that applies to `run` of `defense` at `eps`, or None with the reason.

    An entry applies when the run's MATCH_FIELDS (topology "auto" resolved to the defense's
    graph, as it trains) equal those it was tuned with, its `fixed` values equal `fixed` (the
    cell's paper setting or reading, `fixed_values`; none for a calibrated cell), and it was
    tuned at the cell's own ε (`eps`; an ε-free entry, `_eps_free`, at any). A cell whose ε has
    no entry gets None and the ε values that have one: never another ε's values.
    """
    mine = tuned_settings(run, defense)
    want = fixed_values(defense, fixed or {})
    at_eps = "" if eps is None else f" at ε = {eps:g}"
    here = [e for e in entries
            if all(e.get("settings", {}).get(k) == mine[k] for k in MATCH_FIELDS)]
    if not here:
        return None, (f"no tuned entry{at_eps} for these settings" if entries
                      else f"no tuned entry{at_eps} (none for {defense})")
    fits = [e for e in here if fixed_values(defense, e.get("fixed", {})) == want]
    free = [e for e in fits if _eps_free(e, defense)]
    if free:
        return free[0], ""
    at = [e for e in fits if eps is not None and math.isclose(e["epsilon"], eps, rel_tol=1e-9)]
    if at:
        return at[0], ""
    where = f" with {_pairs(want)}" if want else ""
    have = ", ".join(dict.fromkeys(_describe(e, defense) for e in sorted(
        here, key=lambda e: (not _eps_free(e, defense), e.get("epsilon", 0.0)))))
    return None, f"no tuned entry{at_eps}{where} (entries: {have})"


def _describe(entry: TunedEntry, defense: str) -> str:
    """'ε = 8', 'every ε', 'every ε with b=5'."""
    at = "every ε" if _eps_free(entry, defense) else f"ε = {entry['epsilon']:g}"
    fixed = fixed_values(defense, entry.get("fixed", {}))
    return at + (f" with {_pairs(fixed)}" if fixed else "")


def _pairs(values: Mapping[str, object]) -> str:
    return " ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
                    for k, v in values.items())


def candidate_count(entry: TunedEntry) -> int | None:
    """How many candidates the entry was chosen among: its `candidates`, or the product of the
    value counts of its command's `--grid` items (entries written before the field)."""
    if isinstance(entry.get("candidates"), int):
        return int(entry["candidates"])
    import shlex

    words = shlex.split(entry.get("command") or "")
    grids = [words[i + 1] for i, w in enumerate(words[:-1]) if w == "--grid"]
    grids += [w.removeprefix("--grid=") for w in words if w.startswith("--grid=")]
    if not grids:
        return None
    return math.prod(len({v for v in g.partition("=")[2].split(",") if v.strip()})
                     for g in grids)


def privacy_cost(entry: TunedEntry | None, defense: str) -> PrivacyCost:
    """The tuning's privacy cost for a cell that used `entry` (None: untuned defaults): the
    rule applied and what it means for the cell's ε."""
    if entry is None:
        return {"rule": "none", "meaning": "untuned defaults: no value was chosen on the data"}
    if not DEFENSES.get(defense).private:
        return {"rule": "none", "meaning": "a non-private defense makes no privacy claim"}
    k = candidate_count(entry)
    among = f"{k} candidates" if k is not None else "the candidates of its grid"
    return {"rule": "not charged", "candidates": k, "meaning": (
        f"the cell's ε covers one training run at fixed values; choosing them among {among} "
        "by their accuracy on a validation split of the same members is not accounted (the "
        "score is read without noise, so the choice carries no DP guarantee for the "
        "validation members; Papernot & Steinke 2022 bound tuning whose runs and score are "
        "private)")}


def entry_label(entry: TunedEntry, defense: str) -> str:
    """'quick.dyn_d2p at ε = 1' (the preset when known; 'at every ε' for an ε-free entry)."""
    name = f"{entry['preset']}.{defense}" if entry.get("preset") else defense
    at = "at every ε" if _eps_free(entry, defense) else f"at ε = {entry['epsilon']:g}"
    fixed = entry.get("fixed") or {}
    return f"{name} {at}" + (f" with {_pairs(fixed)}" if fixed else "")


def apply_tuned(entries: list[TunedEntry], run: RunConfig, eps: float | None,
                defense: str, fixed: Mapping[str, object] | None = None,
                ) -> tuple[RunConfig, Overrides, TunedUse]:
    """`run` with the applicable tuned entry's run values, its defense overrides, and the
    record of the lookup: the entry used (`entry` its label, the values, where they came from,
    the command, the tuning's privacy cost), or `entry` None with the reason (no change).
    """
    entry, why = entry_for(entries, run, eps, defense, fixed)
    if entry is None:
        return run, {}, {"entry": None, "reason": f"{why}: untuned defaults",
                         "privacy_cost": privacy_cost(None, defense)}
    used: TunedUse = {"entry": entry_label(entry, defense),
            "run": dict(entry.get("run", {})), "defense": dict(entry.get("defense", {})),
            "tuned_at_epsilon": None if _eps_free(entry, defense) else entry["epsilon"],
            "fixed": dict(entry.get("fixed", {})), "command": entry.get("command"),
            "validation_accuracy": entry.get("validation_accuracy"),
            "source": "privbench/presets/tuned.toml", "note": PRIVACY_NOTE,
            "privacy_cost": privacy_cost(entry, defense)}
    return replace_checked(run, used["run"], where="run"), used["defense"], used


def tuned_settings(run: RunConfig, defense: str) -> Overrides:
    """The run fields a tuned entry records (and must match to apply), with topology "auto"
    resolved to the graph `defense` trains on (so "auto" and its resolution match alike)."""
    from privbench.engine.runner import with_default_topology
    from privbench.plugins import load_plugins
    from privbench.registry import DEFENSES

    load_plugins()
    resolved = with_default_topology(run, DEFENSES.get(defense))
    return {k: getattr(resolved, k) for k in MATCH_FIELDS}


def toml_entry(preset: str, defense: str, run: RunConfig, result: TuneResult,
               command: str, fixed: Mapping[str, object] | None = None, eps_free: bool = False,
               written_by: str | None = None) -> str:
    """One `[[preset.defense]]` table for tuned.toml from a tune result (best candidate).

    `fixed`: the defense values held fixed while tuning (recorded, and matched on lookup);
    `eps_free`: the entry holds at every ε (no `epsilon` line: a non-private defense, or a
    fixed paper setting); `written_by`: the whole-preset command this entry is one cell of.
    """
    assert result["best"] is not None, "toml_entry needs a tune result with a best candidate"
    chosen = result["candidates"][result["best"]]

    def value(v: object) -> str:
        return repr(v) if isinstance(v, float) else f'"{v}"' if isinstance(v, str) else str(v)

    def table(d: Mapping[str, object]) -> str:
        return "{ " + ", ".join(f"{k} = {value(v)}" for k, v in d.items()) + " }"

    from privbench.results.provenance import code_digest, code_revision

    tested = (f"untuned {result['untuned_test']['accuracy']}, tuned "
              f"{result.get('tuned_test', {}).get('accuracy')}" if "untuned_test" in result
              else "not measured (--skip-test)")
    return "\n".join([
        f"[[{preset}.{defense}]]",
        *([] if eps_free else [f"epsilon = {run.epsilon!r}"]),
        *([f"fixed = {table(fixed)}"] if fixed else []),
        f"run = {table(chosen['run'])}",
        f"defense = {table(chosen['defense'])}",
        f"candidates = {len(result['candidates'])}",
        f"validation_accuracy = {chosen['validation_accuracy']!r}",
        f"validation = {result['validation']!r}",
        f"settings = {table(tuned_settings(run, defense))}",
        f"command = {value(command)}",
        *([f"# one cell of `{written_by}`"] if written_by else []),
        f"# test accuracy (reported, not used for the choice): {tested}",
        *(f"# {key} changed nothing here (identical models for each of its values)"
          for key in result.get("inert", [])),
        # The numbers above hold for this code only: a later change to a trainer or its noise
        # moves them (re-run `command` to check).
        f"# tuned by {code_revision()} (code sha256 {code_digest()})",
        "",
    ])


def entry_key(defense: str, entry: TunedEntry) -> tuple[float | None, list[tuple[str, FieldValue]]]:
    """What one entry is tuned for: (ε or None when ε-free, the fixed values)."""
    eps = None if _eps_free(entry, defense) else float(entry["epsilon"])
    return eps, sorted(fixed_values(defense, entry.get("fixed", {})).items())


def save_entry(path: Path, text: str, preset: str, defense: str, eps: float | None = None,
               ) -> None:
    """Append `text` (one `toml_entry`) to the tuned-values file, replacing the entry of the
    same preset, defense, ε and fixed values (`entry_key`; other entries are kept as they are).
    `eps` is read from `text` and kept for callers that pass it."""
    import re
    import tomllib

    from privbench.plugins import load_plugins
    from privbench.results.store import atomic_write_text

    load_plugins()
    new = tomllib.loads(text)[preset][defense][0]
    old = path.read_text() if path.is_file() else ""
    header, *blocks = re.split(r"(?m)^(?=\[\[)", old)  # the comment header, then each entry

    def same(block: str) -> bool:
        if not block.startswith(f"[[{preset}.{defense}]]\n"):
            return False
        entry = tomllib.loads(block)[preset][defense][0]
        return entry_key(defense, entry) == entry_key(defense, new)

    kept = [b.rstrip("\n") + "\n\n" for b in blocks if not same(b)]
    atomic_write_text(path, header + "".join(kept) + text)
