"""The noise every privacy plan calibrates, pinned to its last digits.

A committed result (a reproduction's `runs.jsonl` line, an audit's `results.json`) is trained again
bit for bit only by code whose plans give the same noise: a faster PLD composition, equal to
dp-accounting's `PLDAccountant` to 1e-12 per PMF, can move ADP-VRSGP's calibrated sigma-hat by
5e-10 relative, and 1,000 rounds turn that into 0.02 points of accuracy in a committed line, which
only `privbench reproduce --verify` would show. Here every registered plan, at epsilon 1 and 8, in
both calibration modes, is compared with `plans.json` beside this file to 1e-12 relative: its noise
parameters, its per-round schedule (first, last, smallest, largest, sum, sum of squares) and every
report's epsilon; so are the noise multipliers `calibrate_sigmas` gives DPDL, DP-DPSGD, DP-CGA and
Muffliato (both rules, both accountants). A change that moves one fails here, naming the plan and
both numbers. Then the committed lines made with that plan are no longer reproduced bit for bit:
say so where they are quoted (`privbench reproduce NAME --verify` shows which cells move), and pin
the new values:

    python -m tests.test_plan_pinned --write

The pin holds for the dp-accounting and numpy it was made with, on the kind of machine it was
made on (`privbench.device.machine_kind`: numpy's vector kernels differ between CPUs, and an
AVX2 machine composes the same plans to 113 of the 392 pinned numbers otherwise than an
AVX-512 one, by up to 2.1e-10 relative). The file keeps one pin per kind of machine, each
with its versions; on a kind without a pin, or with other versions, the comparison is skipped,
saying which (their numerics are theirs to change), and `--write` adds or replaces this
machine's pin only.
"""

from __future__ import annotations

import importlib.metadata
import json
import math
import os
import sys
import warnings
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pytest
import torch

from defenses._node_dp import RDP_OPTIONS, calibrate_sigmas
from privbench.accounting import AccountantOptions, gaussian
from privbench.device import machine_kind
from privbench.errors import ConfigError
from tests.accounting.plan_functions import PLANS, make_plan

PINNED = Path(__file__).with_name("plans.json")
REQUEST = {"delta": 1e-5, "rounds": 200, "sample_rate": 0.02}
NODES = {"rates": [0.02, 0.05, 0.05], "ratios": [1.0, 0.5, 1.0]}  # calibrate_sigmas' nodes
EPSILONS = (1.0, 8.0)
MODES = ("calibrated", "paper")
RTOL = 1e-12


def versions() -> dict[str, str]:
    """The libraries whose numerics the pinned values depend on, besides privbench."""
    return {"dp-accounting": importlib.metadata.version("dp-accounting"),
            "numpy": np.__version__}


def _numbers(plan: Any) -> dict[str, float]:
    """Every number of `plan` that decides the noise drawn or the epsilon reported."""
    out = {f"noise.{k}": float(v) for k, v in plan.noise.items()}
    s = np.asarray(plan.schedule, dtype=np.float64)  # (rounds,)
    out.update({"schedule.first": s[0], "schedule.last": s[-1], "schedule.min": s.min(),
                "schedule.max": s.max(), "schedule.sum": s.sum(),
                "schedule.sum_sq": (s * s).sum()})
    for k, r in enumerate(plan.reports):
        out[f"reports[{k}].{r.mode}.epsilon"] = float(r.epsilon)
    return {k: float(v) for k, v in out.items()}


def compute() -> dict[str, dict[str, float]]:
    """name/mode/epsilon -> numbers, for every registered plan (a mode a plan refuses: absent).
    Composed afresh: the on-disk accountant cache is off and the in-process one cleared."""
    gaussian._epsilon_cached.cache_clear()
    got: dict[str, dict[str, float]] = {}
    with mock.patch.dict(os.environ, {"PRIVBENCH_CACHE_DIR": "off"}), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the paper modes' approximate-accounting warnings
        for name in PLANS:
            for mode in MODES:
                for eps in EPSILONS:
                    try:
                        plan = make_plan(name, eps, REQUEST["delta"], REQUEST["rounds"],
                                         REQUEST["sample_rate"], calibrate_with=mode)
                    except ConfigError:
                        continue
                    got[f"{name}/{mode}/{eps:g}"] = _numbers(plan)
        for rule in ("max", "per_node"):
            for acc, opts in (("rdp", RDP_OPTIONS), ("pld", AccountantOptions())):
                for eps in EPSILONS:
                    sigma = calibrate_sigmas(rule, eps, REQUEST["delta"], REQUEST["rounds"],
                                             NODES["rates"], NODES["ratios"], acc, opts)
                    got[f"calibrate_sigmas/{rule}/{acc}/{eps:g}"] = {
                        f"sigma[{i}]": float(v) for i, v in enumerate(sigma)}
    gaussian._epsilon_cached.cache_clear()
    return got


def moved(pinned: dict[str, dict[str, float]], got: dict[str, dict[str, float]]) -> list[str]:
    """One line per value that differs from its pin by more than RTOL (or is new / gone)."""
    out = [f"{key}: pinned, no longer made" for key in sorted(set(pinned) - set(got))]
    out += [f"{key}: made, not pinned" for key in sorted(set(got) - set(pinned))]
    for key in sorted(set(pinned) & set(got)):
        want, have = pinned[key], got[key]
        out += [f"{key}: {f} pinned, not made" for f in sorted(set(want) - set(have))]
        out += [f"{key}: {f} made, not pinned" for f in sorted(set(have) - set(want))]
        for f in sorted(set(want) & set(have)):
            a, b = want[f], have[f]
            if not math.isclose(a, b, rel_tol=RTOL, abs_tol=0.0):
                rel = abs(b - a) / abs(a) if a else math.inf
                out.append(f"{key}: {f} {a!r} pinned, {b!r} now ({rel:.1e} relative)")
    return out


@pytest.fixture(scope="module")
def pin() -> dict[str, Any]:
    return json.loads(PINNED.read_text())


def machine() -> str:
    """The kind of machine whose pin applies here."""
    return machine_kind(torch.device("cpu"))


def test_every_plan_calibrates_the_pinned_noise(pin):
    here = pin["machines"].get(machine())
    if here is None:
        pytest.skip(f"no pin for {machine()} (pinned: {', '.join(sorted(pin['machines']))}): "
                    "pin it with `python -m tests.test_plan_pinned --write`")
    if here["versions"] != versions():
        pytest.skip(f"pinned with {here['versions']}, here {versions()}: re-pin with "
                    "`python -m tests.test_plan_pinned --write` once the committed results "
                    "are checked (`privbench reproduce NAME --verify`)")
    assert pin["request"] == REQUEST and pin["nodes"] == NODES and pin["rtol"] == RTOL
    diff = moved(here["plans"], compute())
    assert not diff, ("the calibrated noise moved, so committed results made with these plans "
                      "are no longer reproduced bit for bit:\n" + "\n".join(diff))


@pytest.mark.parametrize("kind", sorted(json.loads(PINNED.read_text())["machines"]))
def test_the_pin_covers_every_plan_and_mode(pin, kind):
    pinned = pin["machines"][kind]["plans"]
    plans = {k: v for k, v in pinned.items() if not k.startswith("calibrate_sigmas/")}
    assert {key.split("/")[0] for key in plans} == set(PLANS)
    assert {key.split("/")[1] for key in plans} == set(MODES)
    assert all(len(numbers) >= 8 for numbers in plans.values())
    assert len(pinned) - len(plans) == 2 * 2 * len(EPSILONS)  # rules x accountants


def test_the_machines_pins_are_of_one_request_and_differ_only_in_last_digits(pin):
    """Each kind of machine's pin is of the same plans, and they agree to 1e-9 relative: a
    kernel's rounding, not another computation."""
    kinds = sorted(pin["machines"])
    first = pin["machines"][kinds[0]]["plans"]
    for kind in kinds[1:]:
        other = pin["machines"][kind]["plans"]
        assert set(other) == set(first)
        for key, numbers in first.items():
            assert set(other[key]) == set(numbers)
            assert all(math.isclose(v, other[key][f], rel_tol=1e-9) for f, v in numbers.items())


def test_a_move_the_size_of_68c3145s_is_caught():
    """The bisected change: sigma-hat 0.2577387120744225 -> 0.2577387122048802."""
    pinned = {"adp_vrsgp/calibrated/8": {"noise.sigma_hat": 0.2577387120744225}}
    assert moved(pinned, {"adp_vrsgp/calibrated/8": {"noise.sigma_hat": 0.2577387122048802}}) \
        == ["adp_vrsgp/calibrated/8: noise.sigma_hat 0.2577387120744225 pinned, "
            "0.2577387122048802 now (5.1e-10 relative)"]
    assert moved(pinned, {"adp_vrsgp/calibrated/8": {"noise.sigma_hat": 0.2577387120744225
                                                      * (1 + 1e-14)}}) == []
    assert moved(pinned, {}) == ["adp_vrsgp/calibrated/8: pinned, no longer made"]


def _write() -> None:
    """Add (or replace) this kind of machine's pin, keeping the other machines'."""
    data = json.loads(PINNED.read_text()) if PINNED.exists() else {"machines": {}}
    if data["machines"] and (data.get("request"), data.get("nodes"), data.get("rtol")) != (
            REQUEST, NODES, RTOL):
        sys.exit(f"{PINNED} pins another request: remove it to pin afresh")
    data.update(request=REQUEST, nodes=NODES, rtol=RTOL)
    data["machines"][machine()] = {"versions": versions(), "plans": compute()}
    PINNED.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(f"pinned {len(data['machines'][machine()]['plans'])} plans for {machine()} in {PINNED}")


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python -m tests.test_plan_pinned --write")
    _write()
