"""What `privbench bench` measures: a defense's round, the engine's gradient paths, the sweep, the
attacks, the privacy plans and the memory of large graphs, each timed as its section prescribes."""

from __future__ import annotations

import dataclasses
import math
import os
import resource
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from privbench.commands.bench_rounds import METHODS, OPACUS_METHODS, RoundInputs, round_privbench
from privbench.commands.bench_rows import (
    AttackRow,
    AuditBench,
    EngineRow,
    PlanRow,
    Ratios,
    ScaleRow,
    Spread,
)
from privbench.data.datasets import Dataset, load_dataset, load_digits, split_nodes
from privbench.errors import ConfigError
from privbench.models import FlatModel, build_model
from privbench.registry import DATASETS
from privbench.topology import build_topology

SCALE_DEFENSE = "dp_sgp"


def out_degree(n: int) -> int:
    """Out-degree of the benchmark's `random_out` graphs: max(2, ceil(log2 n)).

    With the default k = 2 a random out-graph on n >= 64 nodes is rarely strongly connected
    (a node has in-degree 0 with probability about e^-2), so `random_out` gives up; log2 n keeps
    it connected with high probability. Mixing is a dense (n, n) product either way.
    """
    return max(2, math.ceil(math.log2(n)))


def bench_dataset(n: int, batch: int) -> str:
    """Registry key of the data the benchmark uses at n nodes: digits, or digits' training set
    tiled k times (`digits_xk`, registered on first use) when n nodes would otherwise hold fewer
    than 2B members each (digits has 1,437 training images; 75% of a node's share are members).

    Timing only: duplicated images cost exactly what distinct ones do, and private defenses with
    Poisson sampling need B <= members per node. Accuracies on tiled data mean nothing.
    """
    train = len(load_digits().y_train)
    tiles = max(1, math.ceil(2 * batch * n / (0.75 * train)))
    if tiles == 1:
        return "digits"
    name = f"digits_x{tiles}"
    if name not in DATASETS:
        def loader(root: Any = None, download: bool = False, k: int = tiles) -> Dataset:
            """digits' training set tiled k times (timing only)."""
            ds = load_digits()
            return dataclasses.replace(ds, name=name, x_train=ds.x_train.repeat(k, 1, 1, 1),
                                       y_train=ds.y_train.repeat(k))

        DATASETS.add(name, loader)
    return name


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# A call slower than this many seconds is timed once: its warm-up run is the measurement
# (set by --round-budget-s; keeps pathological rows, e.g. DPDL's per-edge gradients of the CNN at
# n = 64, from taking the whole session).
ROUND_BUDGET_S = 5.0


def _median_time(fn: Callable[[], Any], repeats: int, device: torch.device) -> float:
    start = time.perf_counter()
    fn()  # warm-up (allocations, kernel selection)
    _sync(device)
    first = time.perf_counter() - start
    if first > ROUND_BUDGET_S:
        return first
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def private_defenses() -> list[str]:
    """Registry keys of every registered defense with `private = True`."""
    from privbench.plugins import load_plugins
    from privbench.registry import DEFENSES

    load_plugins()
    return [name for name in DEFENSES.names() if DEFENSES.get(name).private]


def resolve_defenses(names: list[str] | None) -> list[str]:
    """`--defense` values (repeatable, comma-separated; "all" / default: every private one,
    "none": no real defense rounds), each checked against the registry."""
    from privbench.plugins import load_plugins
    from privbench.registry import DEFENSES

    load_plugins()
    if not names:
        return private_defenses()
    out: list[str] = []
    for item in names:
        for name in filter(None, (s.strip() for s in item.split(","))):
            if name == "none":
                continue
            if name == "all":
                out.extend(private_defenses())
            else:
                DEFENSES.get(name)  # one-line error listing the known names
                out.append(name)
    return list(dict.fromkeys(out))


def _build_trainer(defense: str, model: str, n: int, batch: int, device: torch.device) -> Any:
    from privbench.config import RunConfig
    from privbench.engine.messages import RecordPolicy
    from privbench.engine.runner import build

    run = RunConfig(model=model, nodes=n, batch_size=batch, device=str(device), rounds=1000,
                    eval_every=1000, out_degree=out_degree(n), dataset=bench_dataset(n, batch))
    return build(run, defense, policy=RecordPolicy.none()).trainer


def time_defense_round(defense: str, model: str, n: int, batch: int, repeats: int,
                       device: torch.device) -> float:
    """Median seconds of one `trainer.round(t)` of a registered defense (rounds 0, 1, ...)."""
    trainer = _build_trainer(defense, model, n, batch, device)
    counter = iter(range(10**9))
    return _median_time(lambda: trainer.round(next(counter)), repeats, device)


def _engine_inputs(model: str, n: int, batch: int, device: torch.device,
                   ) -> tuple[FlatModel, Tensor, Tensor, Tensor, Tensor, torch.Generator]:
    ds = load_dataset(bench_dataset(n, batch))
    data = split_nodes(ds, n, seed=0).to(device)
    fm = build_model(model, ds.input_shape, ds.num_classes).to(device)
    gen = torch.Generator(device=device).manual_seed(0)
    slots, mask = data.sample(batch, gen)
    x, y = data.gather(slots)  # (n, B, C, H, W), (n, B)
    if not bool(mask.all()) or y.shape[1] != batch:  # every node must really hold B samples
        raise ConfigError(f"bench data holds fewer than {batch} samples on some of {n} nodes")
    params = fm.init(torch.Generator().manual_seed(0)).to(device).expand(n, -1).clone()  # (n, d)
    topo = build_topology("random_out", n, torch.Generator().manual_seed(0), k=out_degree(n))
    p = topo.mixing(0).to(device)  # (n, n) column-stochastic
    return fm, params, x, y, p, gen


def _timed(fn: Callable[[], Any], device: torch.device) -> tuple[float, float]:
    """Wall and CPU seconds (all of this process's threads) of one call."""
    start, cpu = time.perf_counter(), time.process_time()
    fn()
    _sync(device)
    return time.perf_counter() - start, time.process_time() - cpu


def time_interleaved(fns: dict[str, Callable[[], Any]], repeats: int, device: torch.device,
                     cpu: dict[str, list[float]] | None = None) -> dict[str, list[float]]:
    """Seconds of every call, methods interleaved: one untimed warm-up each (first-call set-up:
    lazy initialisation, allocations, Opacus hooks), then `repeats` passes over all methods, the
    order rotated by one each pass (load drifting over the run hits every method alike). A
    method whose first timed call exceeds ROUND_BUDGET_S is timed only once. `cpu`, when
    given, receives each call's CPU seconds (on a shared machine the wall time also counts
    the time other processes held the cores; the CPU time does not)."""
    names = list(fns)
    times: dict[str, list[float]] = {k: [] for k in names}
    cpu = {} if cpu is None else cpu
    for k in names:
        cpu[k] = []
        fns[k]()
        _sync(device)
    for r in range(repeats):
        for k in names[r % len(names):] + names[:r % len(names)]:
            if not times[k] or times[k][0] <= ROUND_BUDGET_S:
                wall, used = _timed(fns[k], device)
                times[k].append(wall)
                cpu[k].append(used)
    return times


def spread(times: list[float]) -> Spread:
    """Median, quartiles, min and max of a list of seconds."""
    qs = statistics.quantiles(times, n=4, method="inclusive") if len(times) > 1 else times * 3
    return {"median_s": statistics.median(times), "q1_s": qs[0], "q3_s": qs[2],
            "min_s": min(times), "max_s": max(times), "times_s": times}


def _defense_call(name: str, model: str, n: int, batch: int, device: torch.device,
                  ) -> tuple[Callable[[], Any] | None, str | None]:
    """A call running the next round of a built defense, or None and why it was skipped."""
    try:
        trainer = _build_trainer(name, model, n, batch, device)
    except (RuntimeError, MemoryError) as exc:
        if not _out_of_memory(exc):
            raise
        return None, "out of memory (see --memory-limit-gib)"
    counter = iter(range(10**9))
    return lambda: trainer.round(next(counter)), None


def _guarded(fn: Callable[[], Any], failed: dict[str, str], key: str) -> Callable[[], Any]:
    """fn, recording an allocation failure under `key` instead of raising (once failed: no-op)."""
    def call() -> None:
        if key in failed:
            return
        try:
            fn()
        except (RuntimeError, MemoryError) as exc:
            if not _out_of_memory(exc):
                raise
            failed[key] = "out of memory (see --memory-limit-gib)"
    return call


def bench_engine(model: str, n: int, batch: int, repeats: int, device: torch.device,
                 defenses: list[str] | None = None, methods: list[str] | None = None,
                 ) -> list[EngineRow]:
    """Time one DP round of `model` at `n` nodes every way in `methods` (keys of
    `bench_rounds.METHODS`, default all but the naive loop) and one real round of every defense
    in `defenses`, all interleaved (`time_interleaved`).

    Returns:
        one row per method and defense: model, nodes, batch, d, dataset, out_degree, method
        (a METHODS key or "defense:<name>"), label, median_s, q1_s, q3_s, min_s, max_s,
        times_s, skipped (why it did not run, or None; its times are then None).
    """
    methods = list(methods or [k for k in METHODS if k != "naive_loop"])
    fm, params, x, y, p, gen = _engine_inputs(model, n, batch, device)
    inp = RoundInputs(fm, params, x, y, p, gen)
    calls: dict[str, Callable[[], Any]] = {}
    skipped: dict[str, str] = {}
    labels = {}
    for k in methods:
        labels[k] = METHODS[k].label
        why = METHODS[k].missing()
        if why:
            skipped[k] = why
        else:
            calls[k] = _guarded(lambda fn=METHODS[k].fn: fn(inp), skipped, k)
    for name in defenses or []:
        key = f"defense:{name}"
        labels[key] = f"{name} (real round)"
        call, why = _defense_call(name, model, n, batch, device)
        if call is None:
            skipped[key] = why or "skipped"
        else:
            calls[key] = _guarded(call, skipped, key)
    cpu: dict[str, list[float]] = {}
    times = time_interleaved(calls, repeats, device, cpu)
    base = {"model": model, "nodes": n, "batch": batch, "d": fm.d,
            "dataset": bench_dataset(n, batch), "out_degree": out_degree(n)}
    rows: list[EngineRow] = []
    for key, label in labels.items():
        stats: Spread = (spread(times[key]) if key not in skipped else
                         {"median_s": None, "q1_s": None, "q3_s": None, "min_s": None,
                          "max_s": None, "times_s": None})
        cpu_med = statistics.median(cpu[key]) if key not in skipped else None
        rows.append({**base, "method": key, "label": label, **stats, "cpu_median_s": cpu_med,
                     "cpu_times_s": cpu[key] if key not in skipped else None,
                     "skipped": skipped.get(key)})
    return rows


def engine_ratios(rows: list[EngineRow]) -> Ratios:
    """Ratios of one (model, n)'s rows: fastest Opacus mode / privbench, privbench / floor,
    torch.func per node / privbench, by median wall time and (`_cpu`) by median CPU time (None
    where a method did not run); the fastest Opacus mode is the one of least median wall time."""
    med = {r["method"]: r["median_s"] for r in rows if r["median_s"] is not None}
    cpu = {r["method"]: r["cpu_median_s"] for r in rows if r["cpu_median_s"] is not None}
    opacus = min((k for k in OPACUS_METHODS if k in med), key=med.__getitem__, default=None)

    def ratio(times: dict[str, float], a: str | None, b: str) -> float | None:
        return times[a] / times[b] if a in times and b in times else None

    return {"fastest_opacus": opacus,
            "fastest_opacus_over_privbench": ratio(med, opacus, "privbench"),
            "privbench_over_floor": ratio(med, "privbench", "floor"),
            "func_per_node_over_privbench": ratio(med, "func_per_node", "privbench"),
            "fastest_opacus_over_privbench_cpu": ratio(cpu, opacus, "privbench"),
            "privbench_over_floor_cpu": ratio(cpu, "privbench", "floor")}


def _out_of_memory(exc: BaseException) -> bool:
    """Whether an exception is an allocation failure (CPU allocator, CUDA, or Python)."""
    return (isinstance(exc, MemoryError | torch.OutOfMemoryError)
            or "can't allocate memory" in str(exc) or "out of memory" in str(exc))


def limit_memory(gib: float) -> None:
    """Cap this process's address space at `gib` GiB (CPU runs), so an allocation that would
    not fit raises (and the row is reported as skipped) instead of invoking the OOM killer on a
    shared machine. The baseline of an imported torch is about 3 GiB of address space."""
    if gib > 0:
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        resource.setrlimit(resource.RLIMIT_AS, (int(gib * 2**30), hard))


def _peak_memory(device: torch.device) -> float:
    """Peak memory in MiB: CUDA allocator peak, else the process's max RSS (never decreases)."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def _time_fused(model: str, n: int, batch: int, repeats: int,
                device: torch.device) -> tuple[FlatModel, float]:
    fm, params, x, y, p, gen = _engine_inputs(model, n, batch, device)
    inp = RoundInputs(fm, params, x, y, p, gen)
    return fm, _median_time(lambda: round_privbench(inp), repeats, device)


def stack_gib(model: str, n: int, batch: int) -> float:
    """GiB of one float32 (n, B, d) per-sample gradient stack for `model` on digits."""
    ds = load_digits()
    d = build_model(model, ds.input_shape, ds.num_classes).d
    return n * batch * d * 4 / 2**30


def bench_scale(model: str, n: int, batch: int, repeats: int, device: torch.device,
                defense: str | None = SCALE_DEFENSE, max_stack_gib: float = 2.0,
                ) -> ScaleRow:
    """Seconds per round at n nodes: the generic DP round through `clipped_grad_sum` (chunked,
    memory bounded in n) and one real defense round (message log off), with the peak memory
    seen so far. The defense round is skipped (None, with a reason) when its (n, B, d)
    per-sample stack would exceed `max_stack_gib`."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    fm, t_vec = _time_fused(model, n, batch, repeats, device)
    gib = stack_gib(model, n, batch)
    skipped = None
    t_def = None
    if defense and gib <= max_stack_gib:
        t_def = time_defense_round(defense, model, n, batch, repeats, device)
    elif defense:
        skipped = f"(n, B, d) stack needs {gib:.1f} GiB > --max-stack-gib {max_stack_gib:g}"
    return {"model": model, "nodes": n, "batch": batch, "d": fm.d,
            "dataset": bench_dataset(n, batch), "out_degree": out_degree(n), "fused_s": t_vec,
            "fused_per_node_ms": t_vec / n * 1e3, "defense": defense, "defense_s": t_def,
            "defense_per_node_ms": None if t_def is None else t_def / n * 1e3,
            "defense_skipped": skipped, "stack_gib": gib, "peak_mib": _peak_memory(device)}


def bench_audit(device: torch.device, preset: str = "quick", defenses: list[str] | None = None,
                attacks: list[str] | None = None, run_over: Mapping[str, object] | None = None,
                threads: int | None = None, jobs: int | None = None) -> AuditBench:
    """Wall time of the audit `privbench attack --preset PRESET` (its defenses and attacks, or
    `defenses` / `attacks`; `run_over`: RunConfig fields over the preset's), run in-process
    through `sweep.Sweep` into a temporary folder, with the `timings.json` it writes (build,
    train, each attack, report per cell; their sum against the wall time; the thread choice,
    the worker processes, the peak memory) and the load average before and after. `threads`,
    `jobs`: as `privbench attack --threads --jobs` (None: the same default choice)."""
    import json

    from privbench.config import RunConfig, replace_checked
    from privbench.engine.threads import settle
    from privbench.pipeline import sweep
    from privbench.pipeline.tuning import load_tuned

    if preset not in sweep.PRESETS:
        raise ConfigError(f"unknown --audit-preset {preset!r}; accepted: "
                          f"{', '.join(sweep.PRESETS)}")
    run = replace_checked(RunConfig(), {**sweep.PRESETS[preset]["run"], **(run_over or {}),
                                        "device": str(device)}, where="run")
    audit = sweep.audit_config(preset, defenses, None, attacks, None, {})
    load_before = list(os.getloadavg())
    with tempfile.TemporaryDirectory() as tmp:  # the preset's tuned values, as the CLI uses them
        runner = sweep.Sweep(run, {}, audit, Path(tmp), progress=False,
                             command=f"privbench attack --preset {preset}",
                             tuned=load_tuned().get(preset, {}), jobs=jobs,
                             thread_choice=settle(run, threads))
        start = time.perf_counter()
        results = runner.run()
        seconds = time.perf_counter() - start
        timings = json.loads((Path(tmp) / "timings.json").read_text())
    summary = results.config.tuned if results.config is not None else None
    tuned = sorted((summary or {}).get("cells", {}))
    return {"preset": preset, "defenses": list(audit.defenses), "seconds": seconds,
            "timings": timings, "tuned_cells": tuned, "load_before": load_before,
            "load_after": list(os.getloadavg())}


def bench_attacks(k_values: list[int], device: torch.device | str = "cpu", steps: int = 25,
                  batch_size: int = 1, seed: int = 0) -> list[AttackRow]:
    """Throughput of K Geiping attacks batched (one vmapped program) vs a sequential loop.

    Both run the same K problems (`inversion.synthetic_views`: exact views, LeNet, digits) for
    `steps` iterations; the ratio is sequential / batched wall time (after a warm-up).

    Returns:
        one row per K: k, steps, batch_size, batched_s, sequential_s, ratio, device.
    """
    from privbench.audit.inversion import synthetic_views
    from privbench.plugins import load_plugins
    from privbench.registry import ATTACKS

    load_plugins()
    geiping = ATTACKS.get("geiping")
    device = torch.device(device)
    attack = geiping(geiping.Config(steps=steps))
    rows: list[AttackRow] = []
    for k in k_values:
        views, fm, _, _ = synthetic_views(k, batch_size, seed)
        fm.to(device)
        shape = (1, 8, 8)  # digits
        gen = torch.Generator().manual_seed(seed)
        geiping(geiping.Config(steps=2)).reconstruct(views[:1], fm, shape, 10, device, gen)
        _sync(device)
        t0 = time.perf_counter()
        attack.reconstruct(views, fm, shape, 10, device, gen)
        _sync(device)
        t1 = time.perf_counter()
        for v in views:
            attack.reconstruct([v], fm, shape, 10, device, gen)
        _sync(device)
        t2 = time.perf_counter()
        rows.append({"k": k, "steps": steps, "batch_size": batch_size,
                     "batched_s": t1 - t0, "sequential_s": t2 - t1,
                     "ratio": (t2 - t1) / (t1 - t0), "device": str(device)})
    return rows


PLAN_COMPOSERS = ("privbench", "dp_accounting")
"""`bench plans` composers: privbench's `fast_pld`, and dp-accounting's `PLDAccountant`."""


def bench_plans(rounds: int = 60, eps: tuple[float, ...] = (1.0, 8.0), delta: float = 1e-5,
                sample_rate: float = 16 / 180, plans: list[str] | None = None,
                repeats: int = 1, composers: tuple[str, ...] = ("privbench",),
                ) -> list[PlanRow]:
    """Seconds to compose each private defense's own privacy plan (`Trainer.privacy_plan`, its
    default config and calibration; `plans`: defense names) for
    `rounds` rounds at every ε, per composer of the Gaussian PLDs: cold (empty on-disk
    accountant cache, in-memory memo cleared; `repeats` passes, composers interleaved in
    alternating order: median, min, max) and, for privbench's, warm (memo cleared, disk cache
    kept: what a later process pays). Default q = 16/180: the quick preset's batch of 16 over
    about 180 members per node."""
    from privbench.accounting import gaussian
    from privbench.engine.privacy import PlanRequest
    from privbench.plugins import load_plugins
    from privbench.registry import DEFENSES

    load_plugins()
    own = [n for n in DEFENSES.names() if DEFENSES.get(n).private
           and "privacy_plan" in vars(DEFENSES.get(n))]

    fns = {"privbench": gaussian.subsampled_gaussian_epsilon,
           "dp_accounting": gaussian.pld_accountant_epsilon}
    cold: dict[tuple[str, float, str], list[float]] = {}
    noise: dict[tuple[str, float, str], dict[str, float]] = {}
    warm: dict[tuple[str, float], float] = {}
    before = os.environ.get("PRIVBENCH_CACHE_DIR")

    def compose(name: str, e: float) -> tuple[float, Any]:
        gaussian._epsilon_cached.cache_clear()
        start = time.perf_counter()
        cls = DEFENSES.get(name)
        cfg = cls.Config()
        how = cls.calibration(cfg)
        plan = cls.privacy_plan(cfg, PlanRequest(name, e, delta, rounds, sample_rate,
                                                 how.accountant), how.default_mode)
        return time.perf_counter() - start, plan

    try:
        for rep in range(repeats):
            order = composers if rep % 2 == 0 else composers[::-1]
            for composer in order:
                gaussian.subsampled_gaussian_epsilon = fns[composer]
                for name in plans or own:
                    for e in eps:
                        with tempfile.TemporaryDirectory() as tmp:
                            os.environ["PRIVBENCH_CACHE_DIR"] = tmp
                            seconds, plan = compose(name, e)
                            cold.setdefault((name, e, composer), []).append(seconds)
                            noise[name, e, composer] = dict(plan.noise)
                            if composer == "privbench" and (name, e) not in warm:
                                warm[name, e] = compose(name, e)[0]
    finally:
        gaussian.subsampled_gaussian_epsilon = fns["privbench"]
        if before is None:
            os.environ.pop("PRIVBENCH_CACHE_DIR", None)
        else:
            os.environ["PRIVBENCH_CACHE_DIR"] = before
    return [{"plan": name, "epsilon": e, "composer": c, "rounds": rounds,
             "sample_rate": sample_rate, "delta": delta, "repeats": repeats,
             "cold_s": statistics.median(times), "cold_min_s": min(times),
             "cold_max_s": max(times), "warm_s": warm.get((name, e)) if c == "privbench"
             else None, "noise": noise[name, e, c]}
            for (name, e, c), times in cold.items()]
