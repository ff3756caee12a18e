"""Detection power of the shipped gate: the smallest overspend it catches, per defense and class.

For every registered DP defense and each class of overspend that applies to it, a mutant of
`tests/mechanism/mutants.py` weakens the mechanism by a factor f of its own parameter while the
ledger keeps its claim:

* noise scale: every Gaussian / Laplace noise draw divided by f (randomized response: the
  per-coordinate ε multiplied by f, on its own grid: its claim is about 10⁻⁶ per coordinate);
* clip bound: the bound the defense clips with multiplied by f, the noise drawn for the old one;
* sampling rate: Poisson rates (fixed batch sizes) multiplied by f, the ledger's rate kept;
* coverage: the noise of the bias tensors (every parameter tensor named "*bias") divided by f.

Each audit is the quick preset's run at ε = 1 with the mechanism audit alone, judged by the
mechanism rules of the shipped policy (`tests/regression/policy.toml`: its bound that holds
`require_mechanism`, with the policy's `[inconclusive]` factor and action: an INCONCLUSIVE that
warns is not a catch). A level is caught when every one of the n seeds is caught. The levels
are tried in increasing order, each stopping at its first escape, up to the first caught in
every seed: most classes are caught near the bottom of the grid, where an upward search costs
n runs and an escape about one, fewer than a search that visits several caught levels. n
caught of n bounds the catch rate from below by (1 - 0.95)^(1/n) with 95 % confidence
(one-sided Clopper-Pearson): 0.55 for n = 5, 0.86 for n = 20.

`python -m tests.mechanism.power [defense ...] [--seeds N] [--jobs J] [--json FILE] [--out FILE]`
writes the JSON (every level's seeds and verdicts) and renders the markdown table from it; a
defense already in the JSON is kept unless named again. `--jobs` measures J defenses at once, each
in its own process with one thread (the verdicts do not depend on J: every audit is seeded).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import math
import multiprocessing
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from privbench.audit.mechanism import audit_mechanism
from privbench.report import gate
from privbench.report.gate_mechanism import MECHANISM_RULES, num
from tests.mechanism.mutants import (
    DP_DEFENSES,
    MECHANISMS,
    NotApplicableError,
    bias_draws,
    cell,
    noise_draws,
    quick_run,
    scaled_clip,
    scaled_flips,
    scaled_rate,
)

POLICY = Path("tests/regression/policy.toml")
LEVELS = (1.1, 1.2, 1.3, 1.5, 2.0, 3.0, 5.0, 10.0)
RR_LEVELS = (10.0, 100.0, 1e3, 1e4, 2e4, 5e4, 1e5)  # x the claimed per-coordinate ε
EPSILON = 1.0
CLASSES = ("noise scale", "clip bound", "sampling rate", "coverage")
Mutant = Callable[[str], contextlib.AbstractContextManager[Any]]


def _family(defense: str) -> str:
    return MECHANISMS[defense].family


def mutant(kind: str, factor: float) -> Mutant:
    """The class `kind` at overspend `factor` (see the module docstring)."""
    if kind == "noise scale":
        def noise(defense: str) -> contextlib.AbstractContextManager[Any]:
            if _family(defense) == "rr":
                return scaled_flips(factor)(defense)
            return noise_draws(_family(defense), lambda u: u / factor)
        return noise
    if kind == "clip bound":
        return scaled_clip(factor)
    if kind == "sampling rate":
        return scaled_rate(factor)

    def coverage(defense: str) -> contextlib.AbstractContextManager[Any]:
        if _family(defense) == "rr":
            raise NotApplicableError("randomized response's flip rate is one quantity pooled "
                                     "over every coordinate (the noise scale class)")
        return bias_draws(defense, lambda u: u / factor)
    return coverage


def levels(defense: str, kind: str) -> tuple[float, ...]:
    return RR_LEVELS if kind == "noise scale" and _family(defense) == "rr" else LEVELS


def shipped_rules(path: Path = POLICY) -> tuple[dict[str, Any], float, str]:
    """The shipped policy's mechanism rules (of its bound that holds them), its inconclusive
    factor and action."""
    policy = gate.load_policy(path)
    bound = next(b for b in policy["bound"] if any(k in MECHANISM_RULES for k in b))
    rules = {k: v for k, v in bound.items() if k in MECHANISM_RULES}
    undecided = policy.get("inconclusive", {})
    return rules, float(undecided.get("factor", 2.0)), undecided.get("action", "fail")


def judged(defense: str, seed: int, change: Mutant | None,
           policy: tuple[dict[str, Any], float, str]) -> dict[str, Any]:
    """One audit of `defense` at ε = 1 (mutated by `change`), judged by the shipped rules."""
    rules, factor, action = policy
    with change(defense) if change else contextlib.nullcontext():
        res = audit_mechanism(quick_run(EPSILON, seed), defense, {})
    checks = gate.check_bound(rules, cell(defense, EPSILON, res), factor=factor)
    failing = [c for c in checks if not c.passed and not (c.inconclusive and action == "warn")]
    e = res.get("epsilon", {})
    return {"seed": seed, "caught": bool(failing),
            "rules": sorted(c.name.split(" ", 1)[1] for c in failing),
            "inconclusive": sorted(c.name.split(" ", 1)[1] for c in checks if c.inconclusive),
            "ratio": e.get("ratio") if e.get("applicable") else None}


def level_runs(defense: str, kind: str, factor: float, seeds: int,
               policy: tuple[dict[str, Any], float, str]) -> list[dict[str, Any]]:
    """Seeds 0.. at one level, up to the first escape."""
    out = []
    for seed in range(seeds):
        out.append(judged(defense, seed, mutant(kind, factor), policy))
        if not out[-1]["caught"]:
            break
    return out


def smallest_caught(defense: str, kind: str, seeds: int,
                    policy: tuple[dict[str, Any], float, str]) -> dict[str, Any]:
    """The class's levels in increasing order, each up to its first escape, until one is caught
    in every seed: every level below the answer has an escape on record."""
    grid = levels(defense, kind)
    try:
        mutant(kind, grid[0])(defense)
    except NotApplicableError as why:
        return {"applicable": False, "reason": str(why)}
    tried: dict[str, list[dict[str, Any]]] = {}
    for factor in grid:
        runs = level_runs(defense, kind, factor, seeds, policy)
        tried[f"{factor:g}"] = runs
        if len(runs) == seeds and all(r["caught"] for r in runs):
            return {"applicable": True, "levels": list(grid), "tried": tried,
                    "smallest": factor, "seeds": seeds}
    return {"applicable": True, "levels": list(grid), "tried": tried, "smallest": None,
            "seeds": seeds}


def _defense_row(defense: str, seeds: int) -> dict[str, Any]:
    """Every class of one defense, and the seconds it took (one thread: the measurement's
    setting, whatever process runs it)."""
    torch.set_num_threads(1)
    policy = shipped_rules()
    start = time.monotonic()
    row: dict[str, Any] = {kind: smallest_caught(defense, kind, seeds, policy) for kind in CLASSES}
    row["seconds"] = round(time.monotonic() - start, 1)
    return row


def measure(defenses: tuple[str, ...], seeds: int, store: dict[str, Any], save: Callable[[], None],
            jobs: int = 1) -> None:
    """Every class of every defense into `store` (saved after each defense), `jobs` defenses at
    a time in worker processes."""
    def done(d: str, row: dict[str, Any]) -> None:
        store[d] = row
        save()
        print(f"{d}: {row['seconds']} s", file=sys.stderr, flush=True)

    if jobs == 1:
        for d in defenses:
            done(d, _defense_row(d, seeds))
        return
    spawn = multiprocessing.get_context("spawn")  # no forked torch state in the workers
    with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=spawn) as pool:
        running = {pool.submit(_defense_row, d, seeds): d for d in defenses}
        for future in concurrent.futures.as_completed(running):
            done(running[future], future.result())


def lower_bound(n: int, level: float = 0.05) -> float:
    """One-sided Clopper-Pearson lower bound of a rate caught n times of n."""
    return level ** (1 / n)


def _level_text(factor: str, runs: list[dict[str, Any]]) -> str:
    caught = [r["seed"] for r in runs if r["caught"]]
    missed = [r["seed"] for r in runs if not r["caught"]]
    ratios = [r["ratio"] for r in runs if r["ratio"] is not None and math.isfinite(r["ratio"])]
    ratio = f", ε/claim {num(statistics.median(ratios))}" if ratios else ""
    return (f"x{factor}: {len(caught)}/{len(runs)}"
            + (f" (escaped seed {missed[0]})" if missed else "") + ratio)


def cell_text(res: dict[str, Any]) -> str:
    """One table cell: the smallest level caught in all seeds, then every level tried."""
    if not res.get("applicable"):
        return f"n/a: {res.get('reason')}"
    top = res["levels"][-1]
    head = (f"**x{res['smallest']:g}**" if res["smallest"] is not None
            else f"**none up to x{top:g}**")
    tried = sorted(res["tried"].items(), key=lambda kv: float(kv[0]))
    return head + " (" + "; ".join(_level_text(f, r) for f, r in tried) + ")"


def _smallest(res: dict[str, Any]) -> str:
    if not res.get("applicable"):
        return "n/a"
    return (f"x{res['smallest']:g}" if res["smallest"] is not None
            else f"none up to x{res['levels'][-1]:g}")


def summary(store: dict[str, Any], seeds: int) -> str:
    """The smallest factor caught per class, defenses with the same row together (the README
    quotes it)."""
    rows: dict[tuple[str, ...], list[str]] = {}
    for d in sorted(store):
        rows.setdefault((_family(d), *(_smallest(store[d][k]) for k in CLASSES)), []).append(d)
    lines = [f"| defenses ({seeds} of {seeds} seeds caught; catch rate >= "
             f"{lower_bound(seeds):.2f} at 95 %) | family | " + " | ".join(CLASSES) + " |",
             "|---" * (2 + len(CLASSES)) + "|"]
    for key, names in sorted(rows.items(), key=lambda kv: kv[1][0]):
        lines.append(f"| {', '.join(names)} | {key[0]} | " + " | ".join(key[1:]) + " |")
    return "\n".join(lines)


SUMMARY = ("<!-- power-summary:begin -->", "<!-- power-summary:end -->")


def render(store: dict[str, Any], seeds: int, jobs: int = 1) -> str:
    """The markdown report (`jobs`: the defenses the command measured at once)."""
    lines = [
        "# Detection power of the shipped gate",
        "",
        f"The smallest overspend the shipped policy's mechanism rules catch in every one of "
        f"n = {seeds} seeds (0-{seeds - 1}), per DP defense and class, on the quick preset at "
        f"ε = {EPSILON:g} (the mechanism audit alone). The factor is the mechanism's own "
        "parameter: noise std (or Laplace scale) divided by f, clip bound times f, sampling "
        "rate times f, the bias tensors' noise divided by f; for randomized response the "
        "per-coordinate ε times f. Each cell gives the smallest factor caught in all seeds, "
        "then every factor tried, smallest first: seeds caught / run (a factor stops at its "
        "first escape, so every factor below the answer has an escape on record) and the "
        "median measured ε / claim.",
        "",
        f"What it can claim: caught in {seeds} of {seeds} seeds bounds the catch rate at that "
        f"factor from below by {lower_bound(seeds):.2f} (one-sided Clopper-Pearson, 95 %)"
        + (": each factor shown is caught with probability at least 0.95, at 95 % confidence."
           if lower_bound(seeds) >= 0.95 else "; a 95 % catch rate itself needs 59 of 59."),
        "",
        "The command that makes it (one thread per defense, "
        + (f"{jobs} defenses at a time in worker processes" if jobs > 1 else "one at a time")
        + "; the seconds per defense are in the JSON):",
        "",
        "<!-- illustrative -->",
        "```bash",
        f"python -m tests.mechanism.power --seeds {seeds}"
        + (f" --jobs {jobs}" if jobs > 1 else ""),
        "```",
        "",
        "## Summary",
        "",
        SUMMARY[0],
        summary(store, seeds),
        SUMMARY[1],
        "",
        "## Every level tried",
        "",
        "| defense | family | " + " | ".join(CLASSES) + " |",
        "|---" * (2 + len(CLASSES)) + "|",
    ]
    for d in sorted(store):
        cells = [cell_text(store[d][k]).replace("|", "/") for k in CLASSES]
        lines.append(f"| {d} | {_family(d)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _refuse(what: str) -> int:
    """Bad input: one line on stderr, exit status 2."""
    print(f"error: {what}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.mechanism.power",
                                     description="The shipped gate's detection power.")
    parser.add_argument("defenses", nargs="*",
                        help=f"DP defenses (default: all: {' '.join(DP_DEFENSES)})")
    parser.add_argument("--seeds", type=int, default=5, help="seeds per level (default 5)")
    parser.add_argument("--jobs", type=int, default=1,
                        help="defenses measured at once, one process each (default 1)")
    parser.add_argument("--json", type=Path, default=Path("reports/mechanism/power.json"))
    parser.add_argument("--out", type=Path, default=Path("reports/mechanism/power.md"))
    parser.add_argument("--render", action="store_true", help="only render the JSON")
    args = parser.parse_args(argv)
    unknown = [d for d in args.defenses if d not in MECHANISMS]
    if unknown:
        return _refuse(f"unknown DP defense {', '.join(unknown)} (accepted: "
                       f"{' '.join(DP_DEFENSES)})")
    if args.seeds < 1:
        return _refuse(f"--seeds must be >= 1, got {args.seeds}")
    if args.jobs < 1:
        return _refuse(f"--jobs must be >= 1, got {args.jobs}")
    store = json.loads(args.json.read_text()) if args.json.exists() else {}
    if store and store.get("seeds", args.seeds) != args.seeds:
        store = {}  # another n: measured again
    rows: dict[str, Any] = store.setdefault("defenses", {})
    store["seeds"] = args.seeds

    def save() -> None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(store, indent=1) + "\n")
        args.out.write_text(render(rows, args.seeds, store.get("jobs", 1)))

    if not args.render:
        store["jobs"] = args.jobs
        measure(tuple(args.defenses) or DP_DEFENSES, args.seeds, rows, save, args.jobs)
    save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
