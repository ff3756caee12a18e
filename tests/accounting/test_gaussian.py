"""The Gaussian PLD accountant at any budget and run length: bounded in time and memory, saying
which accountant answered and on which grid, accurate on long runs, and unchanged where it was
already (privbench/accounting/gaussian.py `pld_grid`, `_bounded_pld`; fast_pld.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import tracemalloc

import pytest

from privbench.accounting import GaussianEvent, PrivacyLedger, account, gaussian_epsilon
from privbench.accounting.gaussian import pld_accountant_epsilon, pld_grid

GIB = 2**30
LIMIT_S = 60
LIMIT_AS = 4 * GIB
"""What one `privbench account` call may take at any epsilon in [1e-6, 1e6] and T <= 10^6."""


def bounded(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """`argv` run in a subprocess limited to `LIMIT_AS` of address space and `LIMIT_S` seconds
    (a MemoryError or a kill fails the caller's checks; a timeout raises)."""
    import resource

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (LIMIT_AS, LIMIT_AS))

    env = {**os.environ, "PRIVBENCH_CACHE_DIR": "off", "OMP_NUM_THREADS": "1"}
    return subprocess.run(argv, capture_output=True, text=True, timeout=LIMIT_S,
                          preexec_fn=limit, env=env, check=False)


def account_cli(defense: str, eps: str, rounds: str, *extra: str) -> list[dict]:
    """`privbench account --json` for one request under the bounds; its plans."""
    start = time.monotonic()
    done = bounded([sys.executable, "-m", "privbench", "account", "--defense", defense,
                    "--eps", eps, "--delta", "1e-5", "--rounds", rounds, "--json", *extra])
    assert time.monotonic() - start < LIMIT_S
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_the_grid_is_the_asked_one_up_to_long_runs():
    assert pld_grid(((0.01, 1.0, 10_000, "poisson"),), 1e-3) == 1e-3
    assert pld_grid(((0.01, 1.0, 400, "poisson"),) * 30, 1e-3) == 1e-3 / 4  # 12,000 steps
    assert pld_grid(((0.01, 1.0, 10**6, "poisson"),), 1e-3) == 1e-3 / 32
    assert pld_grid(((1.0, 1.0, 10**6, "poisson"),), 1e-3) == 1e-3  # one exact Gaussian


def test_a_too_large_pld_is_refused_before_its_memory_is_taken():
    from privbench.accounting.fast_pld import (
        MAX_POINTS,
        PLDTooLargeError,
        subsampled_gaussian_epsilon,
    )

    tracemalloc.start()
    try:
        for terms in ([(0.01, 0.004, 60)], [(0.01, 0.0004, 1)], [(1.0, 1e-9, 1)]):
            with pytest.raises(PLDTooLargeError) as err:  # eps ~ 1e5, 1e6, overflow
                subsampled_gaussian_epsilon(terms, 1e-5, 1e-3)
            assert err.value.points > MAX_POINTS
        assert tracemalloc.get_traced_memory()[1] < 64 * 2**20
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize(("z", "count", "grid", "accountant"), [
    (0.0055, 60, 0.001, "pld"),  # eps ~ 1e5: 33.7 million points a step on the asked grid
    (0.0007, 1, 0.001, "pld"),  # eps ~ 1e6 in one step
    (1e-9, 1, 0.001, "rdp"),  # a loss range beyond a float: RDP answers
])
def test_an_extreme_composition_answers_and_says_how(z, count, grid, accountant):
    ledger = PrivacyLedger().record(GaussianEvent(z, 0.01, count))
    rep = account(ledger, 1e-5)
    assert rep.accountant == accountant and rep.epsilon > 1e4
    if accountant == "pld":
        assert "would have" in rep.note and "points" in rep.note  # the grid it was refused on
        assert rep.note.startswith("PLD grid ")
        rdp = gaussian_epsilon(ledger.gaussian_events, 1e-5, "rdp")
        assert rep.epsilon <= rdp  # the coarser PLD is still the tighter upper bound here
    else:
        assert rep.note == "RDP answered: a PLD's privacy-loss range overflows a float"


def test_a_long_run_is_within_a_percent_of_a_fine_independent_pld():
    """The RDP-calibrated noise of epsilon 1 at T = 10^6, q = 0.01 (sigma 40.4723): on the asked
    grid 1e-3 the PLD gave 1.746; dp-accounting's own PLDAccountant on a 1e-5 grid gives
    0.9148 (its pessimism shrinks with the grid: 0.9159 on 3e-5, 0.9283 on 1e-4)."""
    ledger = PrivacyLedger().record(GaussianEvent(40.4723, 0.01, 10**6))
    rep = account(ledger, 1e-5)
    ref = pld_accountant_epsilon([(0.01, 40.4723, 10**6)], 1e-5, 1e-5)
    assert ref <= rep.epsilon <= 1.01 * ref
    assert rep.epsilon <= gaussian_epsilon(ledger.gaussian_events, 1e-5, "rdp")
    assert rep.accountant == "pld" and rep.note.startswith("PLD grid 3.13e-05, finer than")


def test_the_normal_range_keeps_the_asked_grid_and_the_extremes_say_so():
    """The noise of budgets up to 20 over up to 10^4 steps composes on the asked grid, as before
    (the pinned plans, tests/accounting/test_plans_pinned.py, are the bit-for-bit check); an extreme
    budget says how it departed. The papers' noise (RDP, CLT) is used: no calibration loop."""
    from tests.accounting.plan_functions import make_plan

    for name, eps, rounds, q in (("dp_sgp", 8.0, 4000, 0.0128), ("dp_sgp", 20.0, 3000, 0.01),
                                 ("dp_sgp", 0.1, 10_000, 0.01), ("dyn_d2p", 8.0, 4000, 0.0128),
                                 ("adp_vrsgp", 0.1, 10_000, 0.01)):
        plan = make_plan(name, eps, 1e-5, rounds, q, calibrate_with="paper")
        assert plan.report("calibrated").note == "", (name, eps, rounds)
    extreme = make_plan("dp_sgp", 1e5, 1e-5, 60, 0.01)
    assert extreme.report("calibrated").note.startswith("PLD grid ")
    assert 0.999e5 <= extreme.report("calibrated").epsilon <= 1e5


def test_the_reported_out_of_memory_request_answers_within_the_bounds():
    """`account --defense dp_sgp --eps 1e5 --rounds 60` took 20.7 GB and was killed."""
    plans = account_cli("dp_sgp", "1e5", "60", "--calibrate-with", "calibrated")
    rep = plans[0]["reports"][1]
    assert rep["accountant"] == "pld" and 0.999e5 <= rep["epsilon"] <= 1e5
    assert rep["note"].startswith("PLD grid ")


def test_the_hanging_self_compositions_answer_within_the_bounds():
    """eps = 10^6 hung in one PLD self-composition at z ~ 0.004 (dp_sgp, dyn_d2p, adp_vrsgp)."""
    code = ("import json, warnings; warnings.simplefilter('ignore')\n"
            "from tests.accounting.plan_functions import make_plan\n"
            "print(json.dumps([make_plan(n, 1e6, 1e-5, 60, 0.01, calibrate_with='calibrated')"
            ".report('calibrated').to_dict() for n in ('dp_sgp', 'dyn_d2p', 'adp_vrsgp')]))")
    start = time.monotonic()
    done = bounded([sys.executable, "-c", code])
    assert done.returncode == 0, done.stderr[-2000:]
    assert time.monotonic() - start < LIMIT_S
    for rep in json.loads(done.stdout):
        assert 0.999e6 <= rep["epsilon"] <= 1e6 and rep["note"].startswith("PLD grid ")


def _private() -> list[str]:
    from privbench.plugins import load_plugins
    from privbench.registry import DEFENSES

    load_plugins()
    return [n for n in DEFENSES.names() if DEFENSES.get(n).private]


@pytest.mark.slow
@pytest.mark.parametrize("rounds", ["1", "1000000"])
@pytest.mark.parametrize("eps", ["1e-6", "1", "1e6"])
@pytest.mark.parametrize("defense", _private())
def test_every_private_defense_answers_at_the_extremes(defense, eps, rounds):
    """ε in {1e-6, 1, 1e6} x T in {1, 10^6} for every private defense: an answer within
    `LIMIT_S` and `LIMIT_AS`, never above the target in the rigorous block."""
    plans = account_cli(defense, eps, rounds)
    assert plans and all(p["defense"] == defense for p in plans)
    rigorous = next(p for p in plans if p["calibrated_with"] == "calibrated")
    assert rigorous["reports"][1]["epsilon"] <= float(eps) * (1 + 1e-9)
    assert all(r["accountant"] for p in plans for r in p["reports"])
