"""Privacy plans per node, shared by the DP push-sum defenses and plugins: each node's budget, its
Poisson sample rate, its plan (noise calibrated for its budget) and the schedule and reports made
from the plans."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import torch
from torch import Tensor

from privbench.accounting import PrivacyPlan, make_plan
from privbench.config import RunConfig
from privbench.engine.messages import MessageKind
from privbench.engine.trainer import Context
from privbench.errors import ConfigError


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
def cached_plan(name: str, epsilon: float, delta: float, rounds: int, rate: float,
                accountant: str, calibrate_with: str, options: tuple[tuple[str, Any], ...] = ()
                ) -> PrivacyPlan:
    """`make_plan` memoised (calibration costs seconds; nodes with equal budgets share it)."""
    return make_plan(name, epsilon, delta, rounds, rate, accountant,
                     calibrate_with=calibrate_with, **dict(options))


def node_plans(ctx: Context, name: str, epsilons: tuple[float, ...], deltas: tuple[float, ...],
               accountant: str, calibrate_with: str, **options: Any) -> list[PrivacyPlan]:
    """One privacy plan per node for its own budget and sampling rate."""
    eps, dels = node_budgets(ctx.run, ctx.n, epsilons, deltas)
    opts = tuple(sorted(options.items()))
    return [cached_plan(name, e, d, ctx.run.rounds, q, accountant, calibrate_with, opts)
            for e, d, q in zip(eps, dels, sample_rates(ctx), strict=True)]


def plan_schedule(plans: list[PrivacyPlan], device: torch.device) -> Tensor:
    """(T, n) float32: node i's plan schedule in column i, the noise level drawn in round t.

    The trainer draws exactly this and reports the plans' epsilons, which are composed from it
    (`PrivacyPlan.schedule`): the plan is the one source of the noise and of its epsilon.
    """
    return torch.tensor([p.schedule for p in plans], dtype=torch.float64).T.to(
        device, torch.float32).contiguous()


def plan_reports(plans: list[PrivacyPlan]) -> list[dict[str, Any]]:
    """Per node, the paper and calibrated `EpsilonReport`s as dicts (with node and target)."""
    out = []
    for i, plan in enumerate(plans):
        for rep in plan.reports:
            out.append({**rep.to_dict(), "node": i, "target_epsilon": plan.epsilon,
                        "rounds": plan.rounds, "sample_rate": plan.sample_rate,
                        "noise": {k: float(v) for k, v in plan.noise.items()}})
    return out


def model_message_kinds(note: str) -> tuple[MessageKind, ...]:
    """The push-sum `model` and `weight` kinds, covered by post-processing."""
    return (
        MessageKind("model", covered=True,
                    description=f"P_ji * x_i^{{t+1/2}}, push-sum numerator after the {note} step"),
        MessageKind("weight", covered=True, data_dependent=False,
                    description="P_ji * w_i^t, push-sum weight"),
    )
