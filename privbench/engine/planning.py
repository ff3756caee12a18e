"""Privacy plans per node, shared by the DP defenses and plugins: each node's budget, its
Poisson sample rate, its plan (noise calibrated for its budget), the schedule and reports made
from the plans, and the graph a graph-dependent defense plans a `PlanRequest` on."""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

import torch
from torch import Tensor

from privbench.accounting import EpsilonReport, PrivacyPlan
from privbench.accounting.validation import (
    check_choice,
    check_count,
    check_epsilon,
    check_sampling_rate,
)
from privbench.config import JSONObject, RunConfig, replace_checked
from privbench.engine.privacy import PlanFunction, PlanRequest, PlanSettings, call_plan
from privbench.engine.runner import with_default_topology
from privbench.engine.trainer import Context, Trainer
from privbench.errors import ConfigError
from privbench.seeding import Streams
from privbench.topology import Topology, build_topology


def node_budgets(run: RunConfig, n: int, epsilons: tuple[float, ...],
                 deltas: tuple[float, ...]) -> tuple[list[float], list[float]]:
    """Per-node (epsilon_i, delta_i): the config's tuples, or the run's target for every node."""
    def expand(values: tuple[float, ...], default: float, name: str) -> list[float]:
        if not values:
            return [float(default)] * n
        if len(values) == 1:
            return [float(values[0])] * n
        if len(values) != n:
            raise ConfigError(f"defense.{name} needs 1 or n={n} values, got {len(values)}")
        return [float(v) for v in values]

    return expand(epsilons, run.epsilon, "epsilons"), expand(deltas, run.delta, "deltas")


def sample_rates(ctx: Context) -> list[float]:
    """Poisson rates q_i = |B| / |D_i| (Poisson sampling), one per node."""
    counts = ctx.data.counts.tolist()
    if min(counts) < ctx.run.batch_size:
        raise ConfigError(f"batch_size {ctx.run.batch_size} exceeds the smallest local dataset "
                          f"({min(counts)} members); Poisson rate q_i = |B|/|D_i| must be <= 1")
    return [ctx.run.batch_size / c for c in counts]


@lru_cache(maxsize=256)
def cached_plan(plan: PlanFunction, epsilon: float, delta: float, rounds: int, rate: float,
                accountant: str, calibrate_with: str, options: tuple[tuple[str, Any], ...] = ()
                ) -> PrivacyPlan:
    """A plan function's plan, memoised (calibration costs seconds; nodes with equal budgets
    share it)."""
    return call_plan(plan, epsilon, delta, rounds, rate, accountant,
                     calibrate_with=calibrate_with, **dict(options))


def node_plans(ctx: Context, plan: PlanFunction, epsilons: tuple[float, ...],
               deltas: tuple[float, ...], accountant: str, calibrate_with: str,
               **options: Any) -> list[PrivacyPlan]:
    """One privacy plan per node for its own budget and sampling rate, by `plan`."""
    eps, dels = node_budgets(ctx.run, ctx.n, epsilons, deltas)
    opts = tuple(sorted(options.items()))
    return [cached_plan(plan, e, d, ctx.run.rounds, q, accountant, calibrate_with, opts)
            for e, d, q in zip(eps, dels, sample_rates(ctx), strict=True)]


def plan_schedule(plans: list[PrivacyPlan], device: torch.device) -> Tensor:
    """(T, n) float32: node i's plan schedule in column i, the noise level drawn in round t.

    The trainer draws exactly this and reports the plans' epsilons, which are composed from it
    (`PrivacyPlan.schedule`): the plan is the one source of the noise and of its epsilon.
    """
    return torch.tensor([p.schedule for p in plans], dtype=torch.float64).T.to(
        device, torch.float32).contiguous()


def plan_reports(plans: list[PrivacyPlan]) -> list[JSONObject]:
    """Per node, the paper and calibrated `EpsilonReport`s as dicts (with node and target)."""
    out = []
    for i, plan in enumerate(plans):
        for rep in plan.reports:
            out.append({**rep.to_dict(), "node": i, "target_epsilon": plan.epsilon,
                        "rounds": plan.rounds, "sample_rate": plan.sample_rate,
                        "noise": {k: float(v) for k, v in plan.noise.items()}})
    return out


# ---------------------------------------------------------------- a request's graph


def check_graph_request(req: PlanRequest) -> None:
    """The checks a plan function makes, for a defense that plans with its trainer's own
    calibration (a Gaussian accountant, pld or rdp)."""
    check_epsilon(req.epsilon)
    check_count(req.rounds, "rounds")
    check_sampling_rate(req.sample_rate, "sample rate")
    check_choice(req.accountant, "accountant", ("pld", "rdp"))


def config_settings(cfg: Any, fields: tuple[str, ...]) -> PlanSettings:
    """The settings of a defense whose request sets fields of its config (`configured`)."""
    return PlanSettings({k: getattr(cfg, k) for k in fields})


def configured(cfg: Any, req: PlanRequest) -> Any:
    """`cfg` with the request's settings, checked (`check_graph_request`) and applied."""
    check_graph_request(req)
    return replace_checked(cfg, dict(req.settings), where="defense")


def request_graph(req: PlanRequest, cls: type[Trainer]) -> tuple[RunConfig, Topology]:
    """(run config, topology) of the run `train` would build from the request's graph."""
    over = {k: v for k, v in (("topology", req.topology), ("nodes", req.nodes),
                              ("seed", req.seed)) if v is not None}
    run = with_default_topology(replace_checked(RunConfig(), over, where="account"), cls)
    topo = build_topology(run.topology, run.nodes, Streams(run.seed).get("topology"),
                          k=run.out_degree, time_varying=run.time_varying,
                          symmetric=True if cls.mixing == "doubly" else None)
    return run, topo


def graph_note(run: RunConfig, topo: Topology, extra: str) -> str:
    """The plan note naming the graph a request was planned on."""
    return f"graph: {run.topology}, {topo.n} nodes, seed {run.seed}; {extra}"


def report_of(entry: JSONObject) -> EpsilonReport:
    """An `EpsilonReport` from a trainer's per-node report dict."""
    fields = ("delta", "accountant", "mode", "unit", "uncovered", "approximate", "note",
              "sampling")
    e = entry["epsilon"]
    return EpsilonReport(math.inf if e == "inf" else float(e), **{k: entry[k] for k in fields})


def worst_node(reports: list[JSONObject], reading: str) -> int:
    """The node whose `reading` epsilon is largest."""
    return max((r for r in reports if r["reading"] == reading),
               key=lambda r: report_of(r).epsilon)["node"]
