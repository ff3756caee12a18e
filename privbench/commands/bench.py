"""`privbench bench`: speed of the vectorized engine against the way peers' code runs.

Sections (each prints a table and, with `--json FILE`, writes it as JSON):

* `engine`: one generic DP round (clipped sum + Gaussian noise + push-sum mixing) for n nodes,
  on the same samples, every way of `privbench.commands.bench_rounds.METHODS`: privbench
  (`engine.clipped_grad_sum`: all nodes at once, no per-sample gradients), Opacus in each of
  its per-sample modes (hooks, functorch, ExpandedWeights) and with ghost clipping, looped over
  the nodes (optional `bench` extra; "Opacus not installed" otherwise), `torch.func` per node,
  the non-private floor, and the naive per-sample loop only as a labelled reference
  (`--method naive_loop`); plus one real `trainer.round(t)` of every private defense
  (`--defense`, default: all registered with `private = True`) built by
  `privbench.engine.runner.build` with `RecordPolicy.none()`. All methods and defenses are
  interleaved (`time_interleaved`: untimed warm-up, then passes in rotated order); JSON rows per
  (model, n, method) with median, quartiles, min, max and every time (wall), and the median
  CPU time; per (model, n) the ratios fastest Opacus mode / privbench and privbench / floor,
  by wall and by CPU time.
* `attacks`: K batched Geiping attacks (one vmapped program) vs a sequential loop over the same K
  problems (`bench_attacks`).
* `audit`: wall time of `privbench attack --preset P` run in-process through `sweep.Sweep` (into a
  temporary folder), with its `timings.json` breakdown (build, train, summary, each attack,
  report; the parts sum to the wall time).
* `contention`: the audit beside `--busy` busy processes, the default thread choice against one
  thread and one thread per core (`bench_contention`).
* `plans`: seconds to compose every registered privacy plan for `--rounds` rounds, cold (empty
  accountant cache) and warm (on-disk cache).
* `scale`: time per round as n grows to 256: the generic DP round through
  `engine.clipped_grad_sum` (chunked, so memory is bounded in n) and one real defense round
  (`--defense`, default dp_sgp; skipped where its (n, B, d) per-sample stack would exceed
  `--max-stack-gib`), with the message log disabled (`RecordPolicy.none()`: the log is what
  grows with rounds); reports time / n (flat when the cost is linear in n), peak memory, and a
  PNG plot (`--plot`, dotted line: linear through the largest n).

* `distributed`: seconds per round of `privbench train` in one process (`--backend local`) and
  under `torchrun --nproc-per-node P ... --backend distributed` for each `--ranks` P, with the
  machine's threads split evenly over the ranks (`--threads`, default all cores), the message log
  off; the time is rank 0's round loop, collectives included.

Data and graph: digits (its training set tiled k times, `digits_xk`, where n nodes would hold
fewer than 2B members each, so every node has a full batch of B at n = 64 and 256), on a
`random_out` graph of out-degree max(2, ceil(log2 n)) (k = 2 cannot be drawn strongly connected
at n >= 64). On CPU the process's address space is capped (`--memory-limit-gib`), so a defense
round that would not fit is reported as skipped instead of waking the OOM killer.

Times are medians over `--repeats` repeats after one untimed warm-up (a call slower than
`--round-budget-s` is timed once). `--threads N` sets torch.set_num_threads(N) and
OMP_NUM_THREADS (recorded in the JSON with the load average); without it the process's default
applies. The header and the JSON say how host memory is allocated (`privbench.engine.hostmem`:
the CLI keeps glibc's freed memory in the process unless `PRIVBENCH_HOST_MALLOC=system`), one
setting for every method of a section. Benchmark code lives here and in `bench_rounds.py` and calls
library functions only (never `privbench.cli`, never `attacks` but through the registry).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import resource
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch

from privbench.commands import bench_measure
from privbench.commands.bench_contention import (
    CONTENTION_DEFENSES,
    ContentionPayload,
    bench_contention,
)
from privbench.commands.bench_measure import (
    PLAN_COMPOSERS,
    SCALE_DEFENSE,
    bench_attacks,
    bench_audit,
    bench_engine,
    bench_plans,
    bench_scale,
    engine_ratios,
    limit_memory,
    resolve_defenses,
)
from privbench.commands.bench_rounds import METHODS
from privbench.commands.bench_rows import (
    AttacksPayload,
    AuditBench,
    DistributedPayload,
    DistributedRow,
    EnginePayload,
    EngineRatios,
    EngineRow,
    Payload,
    PlansPayload,
    ScalePayload,
    ScaleRow,
)
from privbench.device import device_description, resolve_device
from privbench.engine import hostmem
from privbench.engine.threads import machine
from privbench.errors import ConfigError, PrivbenchError
from privbench.results.provenance import code_provenance
from privbench.results.store import write_json

ENGINE_MODELS = ("lenet", "cnn")
ENGINE_NODES = (4, 16, 64)
ATTACK_K = (1, 8, 32, 128)
SCALE_NODES = (4, 16, 64, 128, 256)


def run_plans(args: argparse.Namespace, device: torch.device) -> PlansPayload:
    """Section `plans`: composition time of every privacy plan, cold and warm cache; with
    `--method privbench,dp_accounting` against dp-accounting's PLDAccountant, interleaved."""
    named = [k.strip() for m in args.method or [] for k in m.split(",") if k.strip()]
    composers = tuple(dict.fromkeys(named)) or ("privbench",)
    for k in composers:
        if k not in PLAN_COMPOSERS:
            raise ConfigError(f"unknown --method {k!r} for plans; accepted: "
                              f"{', '.join(PLAN_COMPOSERS)}")
    rows = bench_plans(args.rounds, repeats=args.repeats, composers=composers)
    print(_header(f"plans: seconds to compose each {args.rounds}-round privacy plan, cold "
                  f"(empty accountant cache; median [min-max] of {args.repeats}, composers "
                  "interleaved) and warm (on-disk cache)", device))
    print(f"{'plan':<12} {'eps':>5} {'composer':<14} {'cold':>9} {'min-max':>15} {'warm':>9}"
          "  noise")
    for r in rows:
        noise = ", ".join(f"{k}={v:.4g}" for k, v in r["noise"].items())
        spread = f"{r['cold_min_s']:.2f}-{r['cold_max_s']:.2f}s"
        warm = "-" if r["warm_s"] is None else f"{r['warm_s']:.3f}s"
        print(f"{r['plan']:<12} {r['epsilon']:>5g} {r['composer']:<14} {r['cold_s']:>8.2f}s "
              f"{spread:>15} {warm:>9}  {noise}")
    return {"rows": rows}


def _fmt(v: float | None, scale: float = 1e3, digits: int = 1, unit: str = "ms") -> str:
    return "-" if v is None else f"{v * scale:.{digits}f}{unit}"


def _ratio(v: float | None, digits: int = 1) -> str:
    return "-" if v is None else f"{v:.{digits}f}x"


def _header(section: str, device: torch.device) -> str:
    load = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    return (f"{section}: device {device_description(device)}, torch {torch.__version__}, "
            f"threads {torch.get_num_threads()}, load average {load}, host memory "
            f"{hostmem.describe()}")


def resolve_methods(names: list[str] | None) -> list[str]:
    """`--method` values (repeatable, comma-separated; default: every method but the naive
    loop), each checked against `bench_rounds.METHODS`."""
    if not names:
        return [k for k in METHODS if k != "naive_loop"]
    out = [k.strip() for item in names for k in item.split(",") if k.strip()]
    for k in out:
        if k not in METHODS:
            raise ConfigError(f"unknown --method {k!r}; accepted: {', '.join(METHODS)}")
    return list(dict.fromkeys(out))


def run_engine(args: argparse.Namespace, device: torch.device) -> EnginePayload:
    """Section `engine`: print and return the rows (one per model, n, method) and ratios."""
    defenses = resolve_defenses(args.defense)
    methods = resolve_methods(args.method)
    print(_header(f"engine: one DP round (clipped sum + noise + push-sum), methods interleaved, "
                  f"median [quartiles] of {args.repeats}", device))
    print(f"{'model':6} {'n':>4} {'B':>3} {'method':<44} {'median':>10} {'q1-q3':>19} "
          f"{'x/privbench':>11} {'CPU median':>10}", flush=True)
    rows: list[EngineRow] = []
    summary: list[EngineRatios] = []
    for m in args.model or ENGINE_MODELS:
        for n in args.nodes or ENGINE_NODES:  # print each (model, n) as soon as it is measured
            mine = bench_engine(m, n, args.batch_size, args.repeats, device, defenses, methods)
            rows.extend(mine)
            ours = next((r["median_s"] for r in mine if r["method"] == "privbench"), None)
            for r in mine:
                rel = None if ours is None or r["median_s"] is None else r["median_s"] / ours
                quart = "" if r["q1_s"] is None else f"{_fmt(r['q1_s'])}-{_fmt(r['q3_s'])}"
                print(f"{m:6} {n:>4} {args.batch_size:>3} {r['label']:<44} "
                      f"{_fmt(r['median_s']):>10} {quart:>19} {_ratio(rel, 2):>11} "
                      f"{_fmt(r['cpu_median_s']):>10}"
                      + (f"  skipped: {r['skipped']}" if r["skipped"] else ""))
            ratios: EngineRatios = {"model": m, "nodes": n, **engine_ratios(mine)}
            summary.append(ratios)
            print(f"{m:6} {n:>4} ratios (wall; CPU): fastest Opacus "
                  f"({ratios['fastest_opacus'] or '-'}) / privbench "
                  f"{_ratio(ratios['fastest_opacus_over_privbench'], 2)}; "
                  f"{_ratio(ratios['fastest_opacus_over_privbench_cpu'], 2)}, privbench / floor "
                  f"{_ratio(ratios['privbench_over_floor'], 2)}; "
                  f"{_ratio(ratios['privbench_over_floor_cpu'], 2)}", flush=True)
    return {"rows": rows, "ratios": summary, "methods": methods, "repeats": args.repeats}


def run_attacks(args: argparse.Namespace, device: torch.device) -> AttacksPayload:
    """Section `attacks`: medians of `bench_attacks` per K."""
    rows = []
    for k in args.k or ATTACK_K:  # medians over --repeats calls (each warms up once itself)
        runs = [bench_attacks([k], device, steps=args.steps)[0] for _ in range(args.repeats)]
        row = runs[0].copy()
        row["batched_s"] = statistics.median(r["batched_s"] for r in runs)
        row["sequential_s"] = statistics.median(r["sequential_s"] for r in runs)
        row["ratio"] = row["sequential_s"] / row["batched_s"]
        row["repeats"] = args.repeats
        rows.append(row)
    print(_header(f"attacks: K Geiping attacks, {args.steps} steps, batched vs sequential, "
                  f"median of {args.repeats}", device))
    print(f"{'K':>5} {'batched':>10} {'sequential':>11} {'seq/batched':>12}")
    for r in rows:
        print(f"{r['k']:>5} {_fmt(r['batched_s']):>10} {_fmt(r['sequential_s']):>11} "
              f"{_ratio(r['ratio']):>12}")
    return {"rows": rows}


def run_audit(args: argparse.Namespace, device: torch.device) -> AuditBench:
    """Section `audit`: time `privbench attack` in-process; print its timing breakdown."""
    res = bench_audit(device, args.audit_preset, resolve_defenses(args.defense)
                      if args.defense else None, threads=args.threads, jobs=args.jobs)
    print(_header(f"audit: wall time of `privbench attack --preset {res['preset']}`", device))
    t = res["timings"]
    print(f"wall {res['seconds']:.1f} s measured here; timings.json: wall {t['wall_s']:.1f} s, "
          f"sum of parts {t['sum_s']:.1f} s")
    load = " -> ".join(f"{v[0]:.2f}" for v in (res["load_before"], res["load_after"]))
    print(f"threads {t['threads']['threads']} ({t['threads']['reason']}), {t['jobs']} worker "
          f"process(es), load average (1 min) {load}, peak memory "
          + ", ".join(f"{k} {v:.0f} MiB" for k, v in t["peak_rss_mib"].items()))
    print(f"tuned values (privbench/presets/tuned.toml) in: {', '.join(res['tuned_cells']) or '-'}")
    print(f"  {'report':<20} {t['report_s']:.2f}s")
    for cell, parts in t["cells"].items():
        print(f"  {cell:<20} " + " ".join(f"{k}={v:.2f}s" for k, v in parts.items()))
    return res


def run_contention(args: argparse.Namespace, device: torch.device) -> ContentionPayload:
    """Section `contention`: the audit under busy processes, default threads vs one thread."""
    from privbench.engine.threads import machine

    defenses = resolve_defenses(args.defense) if args.defense else list(CONTENTION_DEFENSES)
    res = bench_contention(defenses, args.busy, args.repeats, machine().usable)
    print(_header(f"contention: `privbench attack --defense {','.join(defenses)} --eps 1 "
                  f"--jobs 1` beside {args.busy} busy process(es), variants interleaved, "
                  f"median of {args.repeats}", device))
    print(f"load average (1 min) {res['load_before'][0]:.2f} before, "
          f"{res['load_after'][0]:.2f} after")
    print(f"{'threads':<28} {'chose':>6} {'median':>9}  every run")
    for r in res["rows"]:
        print(f"{r['variant']:<28} {','.join(map(str, r['threads'])):>6} {r['median_s']:>8.1f}s"
              f"  {', '.join(f'{v:.1f}' for v in r['seconds'])}")
    print(f"default / one thread: {res['default_over_one_thread']:.2f}x")
    return res


def run_scale(args: argparse.Namespace, device: torch.device) -> ScalePayload:
    """Section `scale`: time per round vs n, optional PNG plot."""
    defenses = resolve_defenses(args.defense) if args.defense else [SCALE_DEFENSE]
    defense = defenses[0] if defenses else None
    rows = [bench_scale(m, n, args.batch_size, args.repeats, device, defense, args.max_stack_gib)
            for m in (args.model or ENGINE_MODELS) for n in sorted(args.nodes or SCALE_NODES)]
    print(_header(f"scale: seconds per round vs n (message log off; defense {defense})", device))
    print(f"{'model':6} {'n':>4} {'fused':>10} {'/node':>9} {'defense':>10} {'/node':>9} "
          f"{'peak MiB':>9}")
    for r in rows:
        print(f"{r['model']:6} {r['nodes']:>4} {_fmt(r['fused_s']):>10} "
              f"{_fmt(r['fused_per_node_ms'], 1, 2):>9} {_fmt(r['defense_s']):>10} "
              f"{_fmt(r['defense_per_node_ms'], 1, 2):>9} {r['peak_mib']:>9.0f}"
              + (f"  {defense}: skipped, {r['defense_skipped']}" if r["defense_skipped"] else ""))
    if args.plot:
        plot_scale(rows, args.plot, device_description(device))
        print(f"wrote {args.plot}")
    return {"rows": rows, "defense": defense}


def plot_scale(rows: list[ScaleRow], path: str | Path, device: str) -> None:
    """Log-log plot of seconds per round vs n, one line per model and round kind."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for model in dict.fromkeys(r["model"] for r in rows):
        mine = [r for r in rows if r["model"] == model]
        ns = [r["nodes"] for r in mine]
        ax.plot(ns, [r["fused_s"] for r in mine], "o-", label=f"{model} generic DP round (fused)")
        done = [r for r in mine if r["defense_s"] is not None]
        if done:
            ax.plot([r["nodes"] for r in done], [r["defense_s"] for r in done], "s--",
                    label=f"{model} {done[0]['defense']}")
        t0, n0 = mine[-1]["fused_s"], ns[-1]
        ax.plot(ns, [t0 * k / n0 for k in ns], ":", color="grey", linewidth=1)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("simulated nodes n")
    ax.set_ylabel("seconds per round")
    ax.set_title(f"time per round vs n (dotted: linear)\n{device}", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def time_train(defense: str, model: str, n: int, rounds: int, ranks: int, threads: int,
               device: torch.device) -> float:
    """Seconds per round of `privbench train` (rank 0's round loop), `ranks` = 0: local backend.

    Runs in a subprocess (torchrun for ranks >= 1) with OMP_NUM_THREADS = threads // ranks.
    """
    import json
    import os
    import subprocess
    import sys

    train = ["-m", "privbench", "train", "--defense", defense, "--model", model, "--nodes",
             str(n), "--rounds", str(rounds), "--record", "none", "--device", str(device.type),
             "--quiet", "--set", f"eval_every={rounds}"]
    per = max(1, threads // max(1, ranks))
    env = dict(os.environ, OMP_NUM_THREADS=str(per))
    with tempfile.TemporaryDirectory() as tmp:
        launch = ([sys.executable] if ranks == 0 else
                  [sys.executable, "-m", "torch.distributed.run", "--standalone",
                   f"--nproc-per-node={ranks}"])
        extra = [] if ranks == 0 else ["--backend", "distributed"]
        proc = subprocess.run([*launch, *train, *extra, "--out", tmp], env=env,
                              capture_output=True, text=True)
        if proc.returncode != 0:
            tail = proc.stderr.strip().splitlines()[-1:] or ["no output"]
            raise ConfigError(f"bench distributed: {ranks} ranks failed ({tail[0]})")
        return json.loads((Path(tmp) / "results.json").read_text())["seconds"] / rounds


def run_distributed(args: argparse.Namespace, device: torch.device) -> DistributedPayload:
    """Section `distributed`: local vs P ranks, seconds per round."""
    import os

    threads = args.threads or os.cpu_count() or 1
    for what, values in (("--ranks", args.ranks or []), ("--threads", [threads]),
                         ("--rounds", [args.rounds])):
        if any(v < 1 for v in values):
            raise ConfigError(f"{what} must be >= 1, got {values}")
    defense = (resolve_defenses(args.defense) or [SCALE_DEFENSE])[0] if args.defense else \
        SCALE_DEFENSE
    print(_header(f"distributed: seconds per round of `privbench train --defense {defense}`, "
                  f"{threads} threads split over the ranks, {args.rounds} rounds", device))
    print(f"{'model':6} {'n':>4} {'backend':<14} {'round':>10} {'local/x':>8}", flush=True)
    rows: list[DistributedRow] = []
    for m in args.model or ENGINE_MODELS:
        for n in args.nodes or (16,):
            local = time_train(defense, m, n, args.rounds, 0, threads, device)
            rows.append({"model": m, "nodes": n, "ranks": 0, "round_s": local, "speedup": 1.0})
            print(f"{m:6} {n:>4} {'local':<14} {_fmt(local):>10} {_ratio(1.0):>8}", flush=True)
            for p in args.ranks or (1, 2):
                t = time_train(defense, m, n, args.rounds, p, threads, device)
                rows.append({"model": m, "nodes": n, "ranks": p, "round_s": t,
                             "speedup": local / t})
                print(f"{m:6} {n:>4} {f'{p} ranks':<14} {_fmt(t):>10} {_ratio(local / t):>8}",
                      flush=True)
    return {"rows": rows, "defense": defense, "threads": threads, "rounds": args.rounds}


SECTIONS: dict[str, Callable[[argparse.Namespace, torch.device], Payload]] = {
    "engine": run_engine, "attacks": run_attacks, "audit": run_audit, "scale": run_scale,
    "distributed": run_distributed, "plans": run_plans, "contention": run_contention,
}


def run_bench(args: argparse.Namespace) -> int:
    """Run the chosen section, print a table, optionally write JSON."""
    import logging

    logging.getLogger("absl").setLevel(logging.ERROR)  # dp-accounting's RDP-order warnings
    device = resolve_device(args.device)
    # before measuring: the code this process imported, for the JSON
    code = code_provenance() if args.json_out else None
    if args.repeats < 1:
        raise ConfigError(f"--repeats must be >= 1, got {args.repeats}")
    bench_measure.ROUND_BUDGET_S = args.round_budget_s  # read by the timing loops there
    if args.threads is not None and args.threads < 1:
        raise ConfigError(f"--threads must be >= 1, got {args.threads}")
    if args.threads and args.section not in ("distributed", "contention"):  # they pass them on
        torch.set_num_threads(args.threads)
        os.environ["OMP_NUM_THREADS"] = str(args.threads)
    before = resource.getrlimit(resource.RLIMIT_AS)
    try:
        if device.type == "cpu":
            limit_memory(args.memory_limit_gib)
        payload = SECTIONS[args.section](args, device)
    finally:
        resource.setrlimit(resource.RLIMIT_AS, before)  # in-process callers (tests) get it back
    if args.json_out:
        write_json(args.json_out, {"section": args.section, "device": device_description(device),
                                   "torch": torch.__version__, "code": code,
                                   "threads": torch.get_num_threads(),
                                   "machine": dataclasses.asdict(machine()),
                                   "load_average": list(os.getloadavg()),
                                   "host_malloc": hostmem.describe(), **payload})
        print(f"wrote {args.json_out}")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    """`privbench bench SECTION`: speed measurements (see privbench/commands/bench.py)."""
    from privbench.commands.bench import run_bench

    _check_bench_args(args)
    return run_bench(args)


# bench option -> (smallest accepted value, what it is); checked before anything is timed.
_BENCH_MINIMA = {"nodes": (2, "node counts"), "repeats": (1, "--repeats"),
                 "batch_size": (1, "--batch-size"), "k": (1, "--k"), "steps": (1, "--steps"),
                 "ranks": (1, "--ranks"), "threads": (1, "--threads"), "rounds": (1, "--rounds"),
                 "busy": (0, "--busy")}


def _check_bench_args(args: argparse.Namespace) -> None:

    for key, (low, what) in _BENCH_MINIMA.items():
        value = getattr(args, key, None)
        for v in value if isinstance(value, list) else [value]:
            if v is not None and v < low:
                raise PrivbenchError(f"bench {what} must be >= {low}, got {v}")
    for key in ("max_stack_gib", "round_budget_s", "memory_limit_gib"):
        v = getattr(args, key, None)
        positive = key != "memory_limit_gib"  # 0 GiB = no memory cap
        if v is not None and not (math.isfinite(v) and (v > 0 if positive else v >= 0)):
            raise PrivbenchError(f"bench --{key.replace('_', '-')} must be a finite number "
                                 f"{'> 0' if positive else '>= 0'}, got {v}")
