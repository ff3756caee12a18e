"""Golden numbers: every DP defense's calibrated epsilon, recomputed by an independent accountant.

For each registered private defense at the quick preset's settings
(privbench/pipeline/presets.py PRESETS["quick"]: 6 nodes, 60 rounds, batch 16, delta 1e-5, the
default dataset) and epsilon in {1, 8}, the trainer is built (which calibrates its noise), the
noise it will DRAW is read off the trainer (per-step noise std / clip bound, per-node sampling
rate), and its epsilon is recomputed without privbench's accounting code:

- Gaussian defenses accounted with PLD by privbench (DP-SGP, ADP-VRSGP, the Dyn-D2P family):
  Opacus's PRV accountant (its upper bound, eps_error 1e-3) on the exact, un-bucketed schedule;
  if Opacus is not importable, dp-accounting's PLD at a 10x finer grid, composed here from raw
  dp-accounting events. (dp-accounting RDP is not a useful referee for a PLD number: it is a
  looser upper bound, so PLD is below it by design.)
- Gaussian defenses accounted with RDP by privbench (DPDL, DP-DPSGD, DP-CGA): dp-accounting PLD.
- Randomized response (DeFL-VP, D-PSGD+RR): d T coordinate releases of eps0 each, composed by
  arithmetic (basic composition, the bound privbench claims).
- Laplace (DPPS, PartPSP): dp-accounting PLD of T Laplace releases (tighter than basic).

privbench's number must be at least 99% of the independent one (within 1% or above: privbench may be
conservative, never optimistic). `python -m tests.test_golden_epsilon` prints the table of
reports/accounting/README.md ("Sampling and golden ε"). The fast subset runs by default; the full
grid is `slow`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import dp_accounting
import numpy as np
import pytest
import torch
from dp_accounting.pld import pld_privacy_accountant

from defenses.adp_vrsgp import ADPVRSGP
from defenses.defl_vp import DeFLVP
from defenses.dp_cga import DPCGA
from defenses.dp_dpsgd import DPDPSGD
from defenses.dp_sgp import DPSGP
from defenses.dpdl import DPDL
from defenses.dpps import DPPS
from defenses.dyn_d2p import DynD2P
from defenses.muffliato import Muffliato
from privbench.config import RunConfig, replace_checked
from privbench.engine.runner import build
from privbench.pipeline.sweep import PRESETS
from privbench.plugins import load_plugins
from privbench.registry import DEFENSES
from tests.accounting.plan_functions import make_plan

load_plugins()
EPSILONS = (1.0, 8.0)
QUICK = {k: v for k, v in PRESETS["quick"]["run"].items() if k != "eval_every"}
PRIVATE = tuple(n for n in DEFENSES.names() if DEFENSES.get(n).private)
FAST = {("dp_sgp", 1.0), ("dp_dpsgd", 1.0), ("dp_cga", 1.0), ("muffliato", 1.0), ("defl_vp", 8.0),
        ("dpps", 1.0)}

Schedule = tuple[tuple[float, ...], float]  # (per-step noise multipliers z_t, sampling rate q)


# ---------------------------------------------------------------- independent accountants


def _tight_gaussian(zs: tuple[float, ...], q: float, delta: float) -> tuple[float, str]:
    """Poisson-subsampled Gaussian steps z_t at rate q: Opacus PRV, else dp-accounting PLD."""
    runs: list[tuple[float, int]] = []
    for z in zs:
        if runs and runs[-1][0] == z:
            runs[-1] = (z, runs[-1][1] + 1)
        else:
            runs.append((z, 1))
    try:
        from opacus.accountants import PRVAccountant
    except ImportError:
        acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
        for z, c in runs:
            acc.compose(dp_accounting.SelfComposedDpEvent(
                dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z)), c))
        return float(acc.get_epsilon(delta)), "dp-accounting PLD (1e-4)"
    prv = PRVAccountant()
    prv.history = [(z, q, c) for z, c in runs]
    return float(prv.get_epsilon(delta, eps_error=1e-3)), "Opacus PRV"


def _pld_gaussian(zs: tuple[float, ...], q: float, delta: float) -> tuple[float, str]:
    acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
    for z in sorted(set(zs)):
        acc.compose(dp_accounting.SelfComposedDpEvent(
            dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z)),
            zs.count(z)))
    return float(acc.get_epsilon(delta)), "dp-accounting PLD (1e-4)"


def _pld_laplace(eps_round: float, rounds: int, delta: float) -> tuple[float, str]:
    acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
    acc.compose(dp_accounting.SelfComposedDpEvent(
        dp_accounting.LaplaceDpEvent(1.0 / eps_round), rounds))
    return float(acc.get_epsilon(delta)), "dp-accounting PLD (Laplace)"


# ---------------------------------------------------------------- what each trainer draws


def _per_node(tr: Any, z_of: Callable[[int], np.ndarray], rates: list[float]) -> list[Schedule]:
    return [(tuple(np.round(z_of(i), 12).tolist()), float(rates[i])) for i in range(tr.ctx.n)]


def _dp_sgp(tr: DPSGP) -> list[Schedule]:
    t = tr.ctx.run.rounds
    z = np.array([[float(tr.noise_std(k)[i, 0]) / tr.cfg.clip for k in range(t)]
                  for i in range(tr.ctx.n)])  # (n, T): drawn std / clip bound
    return _per_node(tr, lambda i: z[i], tr.rates[:, 0].tolist())


def _adp(tr: ADPVRSGP) -> list[Schedule]:
    t = tr.ctx.run.rounds
    z = np.array([[float(tr.noise_std(k)[i, 0]) / float(tr.sched.clip[k]) for k in range(t)]
                  for i in range(tr.ctx.n)])  # (n, T): drawn std / clip bound G_t
    return _per_node(tr, lambda i: z[i], tr.rates[:, 0].tolist())


def _dyn(tr: DynD2P) -> list[Schedule]:
    z = (tr.sigma.double() / tr.clip.double()[:, None]).cpu().numpy()  # (K, n) sigma_k / C_k
    return _per_node(tr, lambda i: z[:, i], tr.rates)


def _dp_dpsgd(tr: DPDPSGD) -> list[Schedule]:
    t = tr.ctx.run.rounds
    return _per_node(tr, lambda i: np.full(t, float(tr.sigma[i])), tr.rates.tolist())


def _muffliato(tr: Muffliato) -> list[Schedule]:
    # one release per block of K rounds: ceil(T / K) Gaussian steps
    steps = math.ceil(tr.ctx.run.rounds / tr.steps)
    return _per_node(tr, lambda i: np.full(steps, float(tr.sigma[i])), tr.rates.tolist())


def _dpdl(tr: DPDL) -> list[Schedule]:
    # the strict reading's joint multiplier of node i's round release (DPDL paper,
    # eqs. (40), (53); sampled once for both releases)
    t = tr.ctx.run.rounds
    z = [m["strict"] for m in tr.plan.multipliers]
    return _per_node(tr, lambda i: np.full(t, z[i]), list(tr.plan.sample_rates))


def _dp_cga(tr: DPCGA) -> list[Schedule]:
    # node i's n_i releases of one Poisson batch per round (its cross-gradients and its noisy
    # self-gradient), each the clipped batch mean (sensitivity 2C, batch-level clipping) plus
    # noise of std sigma_i C / B_i: one Gaussian of multiplier sigma_i / (2 B_i sqrt(n_i))
    t, b = tr.ctx.run.rounds, tr.ctx.run.batch_size
    n_i = torch.stack([(g[0] > 0).sum(1) for g in tr.graphs]).amax(0).tolist()  # self included
    b_i = tr.counts.clamp(max=b).tolist()  # the divisor q_i |D_i| = min(B, |D_i|)
    z = [float(tr.sigma[i]) / (2 * b_i[i] * math.sqrt(n_i[i])) for i in range(tr.ctx.n)]
    return _per_node(tr, lambda i: np.full(t, z[i]), tr.rates.tolist())


GAUSSIAN: tuple[tuple[type, Callable[[Any], list[Schedule]], str], ...] = (
    (DPSGP, _dp_sgp, "pld"), (ADPVRSGP, _adp, "pld"), (DynD2P, _dyn, "pld"),
    (DPDPSGD, _dp_dpsgd, "rdp"), (DPDL, _dpdl, "rdp"), (DPCGA, _dp_cga, "rdp"),
    (Muffliato, _muffliato, "rdp"),
)


# ---------------------------------------------------------------- one row


def _calibrated(tr: Any) -> float:
    """privbench's largest calibrated (rigorous) epsilon over the nodes."""
    eps = [r["epsilon"] for r in tr.privacy() if r["mode"] == "calibrated"
           and r.get("reading", "strict") in ("strict", "composed_d_coordinates_T_rounds")]
    return max(math.inf if e == "inf" else float(e) for e in eps)


def _independent(tr: Any, name: str, eps: float) -> tuple[float, str, str]:
    """(independent epsilon (max over nodes), how, sampling model) of what `tr` draws."""
    run = tr.ctx.run
    for cls, schedules, acc in GAUSSIAN:
        if isinstance(tr, cls):
            ref = _tight_gaussian if acc == "pld" else _pld_gaussian
            out = [ref(z, q, run.delta) for z, q in set(schedules(tr))]
            models = {r.get("sampling") for r in tr.privacy() if r["mode"] == "calibrated"}
            return max(e for e, _ in out), out[0][1], ",".join(sorted(models))
    if isinstance(tr, DeFLVP):
        return tr.coordinate_epsilon * tr.d * run.rounds, "arithmetic (d T eps0)", "none"
    if isinstance(tr, DPPS):
        plan = make_plan("dpps", eps, run.delta, run.rounds, 1.0, tr.cfg.composition)
        e, how = _pld_laplace(plan.noise["epsilon_round"], run.rounds, run.delta)
        return e, how, "none"
    raise AssertionError(f"no independent accountant for {name}")


@functools.lru_cache(maxsize=64)
def golden_row(name: str, eps: float) -> dict[str, Any]:
    """privbench's and the independent accountant's epsilon for `name` at `eps`."""
    run = replace_checked(RunConfig(), {**QUICK, "epsilon": eps, "device": "cpu"}, where="run")
    tr = build(run, name).trainer
    if isinstance(tr, DPPS):  # privacy() composes the rounds run; the plan is what it calibrates
        mine = make_plan("dpps", eps, run.delta, run.rounds, 1.0, tr.cfg.composition)
        ours = mine.report("calibrated").epsilon
    else:
        ours = _calibrated(tr)
    ref, how, sampling = _independent(tr, name, eps)
    return {"defense": name, "target": eps, "privbench": ours, "independent": ref, "how": how,
            "sampling": sampling}


def _cases() -> list[Any]:
    return [pytest.param(n, e, marks=() if (n, e) in FAST else pytest.mark.slow)
            for n in PRIVATE for e in EPSILONS]


@pytest.mark.parametrize(("name", "eps"), _cases())
def test_calibrated_epsilon_is_not_below_an_independent_accountant(name, eps):
    row = golden_row(name, eps)
    assert row["privbench"] <= eps * (1 + 1e-9), row  # calibrated to the target, never above
    assert row["privbench"] >= 0.99 * row["independent"], row


def table() -> str:
    """The golden table (reports/accounting/README.md): every DP defense x epsilon in {1, 8}."""
    lines = ["| defense | target ε | privbench ε | independent ε | independent accountant | "
             "sampling |", "|---|---|---|---|---|---|"]
    for name in PRIVATE:
        for eps in EPSILONS:
            r = golden_row(name, eps)
            lines.append(f"| {name} | {eps:g} | {r['privbench']:.4f} | {r['independent']:.4f} | "
                         f"{r['how']} | {r['sampling']} |")
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover - prints the golden table
    print(table())
