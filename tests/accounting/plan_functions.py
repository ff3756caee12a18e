"""The defenses' plan functions by defense name, for the accounting tests that compare them."""

from __future__ import annotations

from typing import Any

from defenses.adp_vrsgp import plan_adp_vrsgp
from defenses.defl_vp.plan import plan_defl_vp
from defenses.dp_sgp import plan_dp_sgp
from defenses.dpdl.privacy import plan_dpdl
from defenses.dpps.plan import plan_dpps, plan_partpsp, plan_pedfl
from defenses.dyn_d2p import plan_dyn_d2p
from privbench.accounting import PrivacyPlan
from privbench.engine.privacy import PlanFunction, call_plan

PLANS: dict[str, PlanFunction] = {
    "dp_sgp": plan_dp_sgp, "adp_vrsgp": plan_adp_vrsgp, "dyn_d2p": plan_dyn_d2p,
    "defl_vp": plan_defl_vp, "dpps": plan_dpps, "partpsp": plan_partpsp, "pedfl": plan_pedfl,
    "dpdl": plan_dpdl,
}


def make_plan(name: str, epsilon: float, delta: float, rounds: int, sample_rate: float,
              accountant: str | None = None, **kwargs: Any) -> PrivacyPlan:
    """Defense `name`'s plan function called with its setting names checked."""
    fn = PLANS[name]
    args = (epsilon, delta, rounds, sample_rate) + ((accountant,) if accountant else ())
    if accountant is None:
        from privbench.engine.privacy import plan_accountant
        args += (plan_accountant(fn),)
    return call_plan(fn, *args, **kwargs)
