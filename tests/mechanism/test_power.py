"""The detection-power measurement (`tests/mechanism/power.py`): its mutants weaken the mechanism
by the factor they name, it reads the shipped policy's rules, and its search and table say what
was caught in how many seeds. The audits themselves are the mechanism tests' (test_mechanism.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from unittest import mock

import pytest
import torch

from defenses.dpps import laplace
from privbench.engine.trainer import Context
from privbench.seeding import Streams
from tests.mechanism import power

ROOT = Path(__file__).resolve().parents[2]


def _noise() -> torch.Generator:
    return Streams(0).get("noise")


@pytest.mark.parametrize("factor", [1.2, 3.0])
def test_noise_scale_divides_each_family_by_the_factor(factor):
    with power.mutant("noise scale", factor)("dp_sgp"):
        std = float(torch.randn(40000, generator=_noise()).std())
    assert std == pytest.approx(1 / factor, rel=0.02)
    with power.mutant("noise scale", factor)("dpps"):  # Lap(b): E|x| = b
        mean_abs = float(laplace((40000,), 1.0, _noise(), "cpu").abs().mean())
    assert mean_abs == pytest.approx(1 / factor, rel=0.03)
    with power.mutant("noise scale", factor)("dp_sgp"):  # a stream that is not noise: untouched
        assert float(torch.randn(40000, generator=torch.Generator()).std()) == \
            pytest.approx(1.0, rel=0.02)


def test_sampling_rate_scales_poisson_rates_and_fixed_batches():
    calls = []

    def record(self, t, rates=None, batch_size=None):
        calls.append((rates, batch_size))

    stub = type("Ctx", (), {"run": type("Run", (), {"batch_size": 16})()})()
    with mock.patch.object(Context, "draw", record), \
            power.mutant("sampling rate", 1.5)("dp_sgp"):
        Context.draw(stub, 0, rates=torch.tensor([0.2, 0.8]))
        Context.draw(stub, 0)
    assert torch.allclose(calls[0][0], torch.tensor([0.3, 1.0]))
    assert calls[1][1] == 24


def test_a_class_that_does_not_apply_is_reported_with_its_reason():
    res = power.smallest_caught("defl_vp", "clip bound", 3, power.shipped_rules())
    assert res == {"applicable": False, "reason": mock.ANY} and "sign" in res["reason"]
    res = power.smallest_caught("d_psgd_rr", "coverage", 3, power.shipped_rules())
    assert not res["applicable"] and "pooled" in res["reason"]
    assert "amplification" in power.smallest_caught("pedfl", "sampling rate", 3,
                                           power.shipped_rules())["reason"]


def test_the_shipped_rules_are_the_policy_mechanism_rules_with_its_inconclusive_action():
    rules, factor, action = power.shipped_rules()
    assert set(rules) == {"require_mechanism", "require_sampling_rate", "max_measured_ratio"}
    assert rules["max_measured_ratio"] == 1.0
    assert (factor, action) == (2.0, "warn")


def _run(seed, caught, ratio=1.5):
    return {"seed": seed, "caught": caught, "rules": [], "inconclusive": [], "ratio": ratio}


def test_the_search_goes_up_to_the_first_level_caught_in_every_seed():
    """Escapes at x1.1 (seed 1) and x1.2 (seed 0); x1.3 caught in all 3 seeds: the answer."""
    verdicts = {1.1: [True, False, True], 1.2: [False], 1.3: [True, True, True]}

    def level_runs(defense, kind, factor, seeds, policy):
        out = []
        for seed, caught in enumerate(verdicts.get(factor, [False])):
            out.append(_run(seed, caught))
            if not caught:
                break
        return out

    with mock.patch.object(power, "level_runs", level_runs):
        res = power.smallest_caught("dp_sgp", "noise scale", 3, None)
    assert res["smallest"] == 1.3 and list(res["tried"]) == ["1.1", "1.2", "1.3"]
    text = power.cell_text(res)
    assert text.startswith("**x1.3**") and "x1.1: 1/2 (escaped seed 1)" in text
    assert "x1.3: 3/3" in text
    with mock.patch.object(power, "level_runs", lambda *a: [_run(0, False)]):
        res = power.smallest_caught("dp_sgp", "coverage", 3, None)
    assert res["smallest"] is None and len(res["tried"]) == len(power.LEVELS)
    assert power.cell_text(res).startswith("**none up to x10**")


def test_the_lower_bound_is_one_sided_clopper_pearson_at_n_of_n():
    assert power.lower_bound(20) == pytest.approx(0.861, abs=1e-3)
    assert power.lower_bound(5) == pytest.approx(0.549, abs=1e-3)
    assert power.lower_bound(59) > 0.95 > power.lower_bound(58)


def test_render_states_n_and_what_it_can_claim(tmp_path):
    store = {"dp_sgp": {k: {"applicable": False, "reason": "x"} for k in power.CLASSES}}
    text = power.render(store, 5)
    assert "n = 5 seeds" in text and "0.55" in text and "--seeds 5" in text
    assert "| dp_sgp | gaussian | n/a: x |" in text


@pytest.mark.parametrize("argv", [["nope"], ["--seeds", "0"], ["--jobs", "0"]])
def test_bad_input_is_one_line_and_exit_2(argv, capsys, tmp_path):
    code = power.main([*argv, "--json", str(tmp_path / "p.json"), "--out",
                       str(tmp_path / "p.md")])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1


def test_render_only_rewrites_the_table_from_the_json(tmp_path):
    res = {"applicable": True, "levels": [1.1], "smallest": 1.1, "seeds": 2,
           "tried": {"1.1": [_run(0, True, 1.2), _run(1, True, math.inf)]}}
    store = {"seeds": 2, "defenses": {"dpps": {k: res for k in power.CLASSES}}}
    (tmp_path / "p.json").write_text(json.dumps(store))
    assert power.main(["--render", "--seeds", "2", "--json", str(tmp_path / "p.json"),
                       "--out", str(tmp_path / "p.md")]) == 0
    text = (tmp_path / "p.md").read_text()
    assert "| dpps | laplace | **x1.1** (x1.1: 2/2, ε/claim 1.2)" in text


def test_the_summary_groups_defenses_with_the_same_row():
    caught = {"applicable": True, "levels": [1.1, 1.2], "smallest": 1.2, "seeds": 5, "tried": {}}
    none = {**caught, "smallest": None}
    na = {"applicable": False, "reason": "r"}
    row = {"noise scale": caught, "clip bound": caught, "sampling rate": na, "coverage": none}
    store = {"dp_sgp": row, "dp_dfedsam": row, "dpps": {**row, "clip bound": none}}
    lines = power.summary(store, 5).splitlines()
    assert lines[2] == "| dp_dfedsam, dp_sgp | gaussian | x1.2 | x1.2 | n/a | none up to x1.2 |"
    assert lines[3] == "| dpps | laplace | x1.2 | none up to x1.2 | n/a | none up to x1.2 |"
    assert ">= 0.55 at 95 %" in lines[0]


def _between(text: str, begin: str, end: str) -> str:
    return text[text.index(begin) + len(begin):text.index(end)].strip()


def test_the_readme_quotes_the_committed_reports():
    """The README's gate section quotes the power summary and the mutation table as committed
    under reports/mechanism/."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    report = (ROOT / "reports/mechanism/power.md").read_text(encoding="utf-8")
    assert _between(readme, *power.SUMMARY) == _between(report, *power.SUMMARY)
    table = _between(readme, "<!-- mutation-table:begin -->", "<!-- mutation-table:end -->")
    mutants = (ROOT / "reports/mechanism/README.md").read_text(encoding="utf-8")
    assert table.splitlines()[0].startswith("| defense | ε | correct |")
    assert table in mutants
    stored = json.loads((ROOT / "reports/mechanism/power.json").read_text(encoding="utf-8"))
    assert power.render(stored["defenses"], stored["seeds"], stored["jobs"]) == report
