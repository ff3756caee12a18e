"""One source of truth: the privacy plan draws the noise, and the reported ε is the plan's.

For every private defense, the plan is changed (its noise scaled by 2 after calibration: the
plan functions' `noise_factor`, DPDL's `plan_privacy`, DP-DPSGD's (MUFFLIATO's) and DP-CGA's
calibration), and one round is trained with the same seed as an unchanged run and as a run
without noise (`disable_noise`). The noise the trainer drew, read off the released messages,
must follow the plan (x2 for the additive Gaussian and Laplace mechanisms; for randomized
response the message scale 1 / tanh(eps / 2) of the halved coordinate epsilon), and the reported
calibrated ε must change with it (more noise, a smaller ε). A trainer that kept a copy of the
schedule, or reported an ε of its own, fails here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import math
import sys
from collections.abc import Iterator

import pytest
import torch

import defenses._node_dp as node_dp_module
import defenses.dp_cga as dp_cga_module
import defenses.dp_sgp as dp_sgp_module
import defenses.dpdl as dpdl_module
from privbench.config import RunConfig
from privbench.engine import planning as plans_module
from privbench.engine.runner import build
from privbench.plugins import load_plugins
from privbench.registry import DEFENSES
from privbench.testing import disable_noise

load_plugins()
RUN = RunConfig(rounds=2, nodes=4, device="cpu", eval_every=2, epsilon=1.0)
PRIVATE = [n for n in DEFENSES.names() if DEFENSES.get(n).private]
RR = {"defl_vp", "d_psgd_rr"}  # randomized response: the message scale follows the plan


def _keyword(fn: object, name: str) -> bool:
    """Whether `fn` takes `name` as a keyword-only argument (a plan function's setting)."""
    param = inspect.signature(fn).parameters.get(name)
    return param is not None and param.kind is inspect.Parameter.KEYWORD_ONLY


@contextlib.contextmanager
def plans_scaled(factor: float) -> Iterator[None]:
    """Every privacy plan's noise multiplied by `factor` after calibration."""
    with pytest.MonkeyPatch.context() as mp:
        for module in [m for k, m in sys.modules.items() if k.startswith("defenses.")]:
            for attr, fn in list(vars(module).items()):  # every plan function a trainer calls
                if attr.startswith("plan_") and callable(fn) and _keyword(fn, "noise_factor"):
                    mp.setattr(module, attr, functools.partial(fn, noise_factor=factor))
            for attr in ("plan_function",):  # DPPS-family classes hold theirs
                for cls in [c for c in vars(module).values() if isinstance(c, type)
                            and attr in vars(c)]:
                    fn = vars(cls)[attr].__func__
                    mp.setattr(cls, attr, staticmethod(functools.partial(fn, noise_factor=factor)))
        real_plan = dpdl_module.plan_privacy

        def dpdl_plan(*a, **k):
            p = real_plan(*a, **k)
            return dataclasses.replace(
                p, sigma=tuple(s * factor for s in p.sigma),
                multipliers=tuple({r: z * factor for r, z in m.items()} for m in p.multipliers))

        mp.setattr(dpdl_module, "plan_privacy", dpdl_plan)
        real_sigmas = node_dp_module.calibrate_sigmas
        for module in (node_dp_module, dp_cga_module):  # DP-DPSGD and MUFFLIATO via _node_dp
            mp.setattr(module, "calibrate_sigmas", lambda *a, **k: real_sigmas(*a, **k) * factor)
        plans_module.cached_plan.cache_clear()
        try:
            yield
        finally:
            plans_module.cached_plan.cache_clear()


def _run(name: str, scale: float | None) -> tuple[dict[tuple[int, str], torch.Tensor], list]:
    """Rounds 0-1's covered data-dependent payloads and the privacy reports (scale None: the
    plan unchanged and the noise draws zeroed)."""
    with contextlib.ExitStack() as stack:
        if scale is None:
            stack.enter_context(disable_noise())
        else:
            stack.enter_context(plans_scaled(scale))
        built = build(RUN, name)
        for t in range(RUN.rounds):
            built.trainer.round(t)
        reports = built.trainer.privacy() if scale is not None else []
    kinds = {k.name: k for k in built.trainer.kinds}
    payloads = {key: rec.payload.double() for key, rec in built.ctx.bus.log.records.items()
                if kinds[key[1]].covered and kinds[key[1]].data_dependent}
    return payloads, reports


def noise_ratios(name: str, base: dict, doubled: dict, clean: dict) -> list[float]:
    """Per message kind, at the first round whose message carries noise: how the drawn noise of
    the doubled plan compares with the unchanged plan's (a linear function of the first draw)."""
    out = []
    for kind in sorted({k for _, k in base}):
        for t in range(RUN.rounds):
            key = (t, kind)
            if key not in base:
                continue
            if name in RR:  # RR flips signs and rescales by 1 / tanh(eps / 2): read the scale
                if t == 0 and not torch.equal(base[key], doubled[key]):
                    out.append(float(doubled[key].abs().max() / base[key].abs().max()))
                    break
                continue
            d1 = (base[key] - clean[key]).nan_to_num().norm()
            if d1 > 0:  # additive noise: the drawn noise through a fixed linear map
                out.append(float((doubled[key] - clean[key]).nan_to_num().norm() / d1))
                break
    return out


def _calibrated(reports: list[dict]) -> list[float]:
    return [float(r["epsilon"]) for r in reports if r["mode"] == "calibrated"]


@pytest.mark.parametrize("name", PRIVATE)
def test_the_drawn_noise_and_the_reported_epsilon_follow_the_plan(name):
    (base, rep1), (doubled, rep2) = _run(name, 1.0), _run(name, 2.0)
    clean, _ = _run(name, None)
    ratios = noise_ratios(name, base, doubled, clean)
    assert ratios, f"{name}: no covered message carried noise"
    if name in RR:  # the coordinate epsilon halves: the message scale ratio is known
        e = build(RUN, name).trainer.coordinate_epsilons[0]
        want = math.tanh(e / 2) / math.tanh(e / 4)
    else:
        want = 2.0
    assert all(r == pytest.approx(want, rel=1e-3) for r in ratios), (ratios, want)
    e1, e2 = _calibrated(rep1), _calibrated(rep2)
    assert e1 and len(e1) == len(e2)
    assert all(b < a for a, b in zip(e1, e2, strict=True)), (e1, e2)


def test_a_trainer_with_its_own_noise_copy_is_caught():
    # DP-SGP drawing a sigma of its own (the unchanged plan's, not its plan's schedule): the
    # reported ε follows the changed plan but the drawn noise does not, and the check sees it
    from defenses.dp_sgp import plan_dp_sgp

    class OwnCopy(dp_sgp_module.DPSGP):
        def __init__(self, cfg, ctx) -> None:
            super().__init__(cfg, ctx)
            rates = dp_sgp_module.sample_rates(ctx)
            plans = [plan_dp_sgp(ctx.run.epsilon, ctx.run.delta, ctx.run.rounds, q,
                                 cfg.accountant) for q in rates]  # the registry bypassed
            self.own = dp_sgp_module.plan_schedule(plans, ctx.device)

        def noise_std(self, t: int) -> torch.Tensor:
            return self.own[t][:, None] * self.cfg.clip

    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(DEFENSES._items, "dp_sgp", OwnCopy)
        (base, rep1), (doubled, rep2) = _run("dp_sgp", 1.0), _run("dp_sgp", 2.0)
        clean, _ = _run("dp_sgp", None)
    assert noise_ratios("dp_sgp", base, doubled, clean) == [pytest.approx(1.0, rel=1e-6)]
    assert _calibrated(rep2)[0] < _calibrated(rep1)[0]  # the claim moved, the noise did not
