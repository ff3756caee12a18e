"""`privbench check`: what each check resolved, INCONCLUSIVE checks and the policy's choice for
them, the mechanism rule held to the requested ε, the `requested` selector, and the audits that
train their own run read alike on a diverged cell."""

from __future__ import annotations

import copy
from xml.etree import ElementTree as ET

from privbench.report import gate
from privbench.results.records import as_cell
from tests.report.test_gate import _results, _run

WARN = '[inconclusive]\naction = "warn"\n'
# cap 3.0 at claimed ε 1: an empirical ratio bound of 4 cannot fail (no attack certifies above
# its cap); the PSNR bound beside it decides
UNDECIDED = '[[bound]]\ndefense = "dp"\nmax_psnr = 20\nmax_empirical_ratio = 4\n'


def test_a_check_that_cannot_fail_is_inconclusive_and_the_policy_decides(tmp_path, capsys):
    assert _run(tmp_path, UNDECIDED) == 1  # default: an inconclusive check fails
    out = capsys.readouterr().out
    assert "INCONCLUSIVE" in out and "more canaries" in out and "inconclusive (failing)" in out
    assert _run(tmp_path, UNDECIDED + WARN) == 0
    out = capsys.readouterr().out
    assert "1 passed, 0 failed, 1 inconclusive (warning)" in out
    # a bound whose only check is inconclusive checked nothing, warn or not
    assert _run(tmp_path, '[[bound]]\ndefense = "dp"\nmax_empirical_ratio = 4\n' + WARN) == 1
    assert "checked nothing" in capsys.readouterr().out


def test_a_pass_says_what_it_resolved(tmp_path, capsys):
    assert _run(tmp_path, '[[bound]]\ndefense = "dp"\nmax_empirical_ratio = 2\n') == 0
    assert "no evidence of overspend" in capsys.readouterr().out


def test_junit_shows_an_inconclusive_warning_and_an_inconclusive_failure(tmp_path):
    for policy, failures in ((UNDECIDED + WARN, 0), (UNDECIDED, 1)):
        xml = tmp_path / "j.xml"
        _run(tmp_path, policy, extra=("--junit", str(xml)))
        suite = ET.parse(xml).getroot()
        case = next(c for c in suite if c.get("name").endswith("max_empirical_ratio"))
        assert case.find("properties/property").get("value") == "inconclusive"
        assert int(suite.get("failures")) == failures
        shown = case.find("failure") if failures else case.find("system-err")
        assert shown is not None and "INCONCLUSIVE" in (shown.get("message") or shown.text)


def test_a_malformed_inconclusive_table_exits_2(tmp_path, capsys):
    for bad in ('action = "maybe"', "factor = 0.5", "limit = 2"):
        assert _run(tmp_path, UNDECIDED + f"[inconclusive]\n{bad}\n") == 2
        assert "[inconclusive]" in capsys.readouterr().err


def _mechanism(interval, claimed=1.0, **extra):
    """A mechanism audit record (hand-written values, not measurements)."""
    eps = {"applicable": True, "node": 0, "epsilon": sum(interval) / 2, "interval": interval,
           "claimed": claimed, "ratio": sum(interval) / 2 / claimed,
           "ratio_interval": [v / claimed for v in interval]}
    return {"status": "ok", "mechanism": {"epsilon": eps, "findings": [], **extra}}


def _cell(eps, mech, setting=None):
    cell = {"defense": "dp", "epsilon": eps, "attacks": {"mechanism": mech}}
    return as_cell({**cell, **({"setting": setting} if setting else {})})


def _ratio(cell, factor=2.0):
    return gate.check_bound({"max_measured_ratio": 1.0}, cell, factor=factor)[0]


def test_the_measured_epsilon_is_held_to_the_request_as_well_as_the_claim():
    ok = _ratio(_cell(1.0, _mechanism([0.9, 1.2])))
    assert ok.passed and "rules out more than 1.2x" in ok.detail
    # an honest ledger claiming 1.55 where 1 was asked: measured under the claim, over the request
    over = _ratio(_cell(1.0, _mechanism([1.4, 1.7], claimed=1.55)))
    assert not over.passed and "the ledger claims ε = 1.55, the run asks 1" in over.detail
    # a paper setting asks for the paper's noise, not for an ε: held to its claim alone
    paper = {"name": "paper", "label": "paper", "overrides": {}, "composed_epsilon": 1.55}
    assert _ratio(_cell(None, _mechanism([1.4, 1.7], claimed=1.55), paper)).passed
    stated = _mechanism([0.9, 1.2], ledger_findings=["node 0's ledger is stated for δ = 10⁻³, "
                                                     "the run asks 10⁻⁵"])
    assert "stated for δ = 10⁻³" in _ratio(_cell(1.0, stated)).detail


def test_an_interval_beyond_the_factor_is_inconclusive_not_a_pass():
    wide = _ratio(_cell(1.0, _mechanism([0.0, 5.6e4])))
    assert wide.inconclusive and "INCONCLUSIVE" in wide.detail and "mechanism.rounds" in \
        wide.detail
    # the policy's factor decides: [0, 1.5] cannot exclude 1.4x its bound, it excludes 2x
    assert _ratio(_cell(1.0, _mechanism([0.0, 1.5])), factor=1.4).inconclusive
    assert not _ratio(_cell(1.0, _mechanism([0.0, 1.5]))).inconclusive


def test_requested_selects_the_grid_at_any_eps_and_a_bound_selecting_nothing_fails():
    res = _results()
    for c in res["cells"][:2]:
        c["epsilon"] = 4.0
    res["cells"].append(dict(copy.deepcopy(res["cells"][0]), epsilon=None, setting={
        "name": "paper", "label": "paper", "overrides": {}, "composed_epsilon": 9.0}))
    checks = gate.run_checks(res, {"bound": [{"defense": "dp", "eps": "requested",
                                              "max_psnr": 20}]})
    assert [c.name for c in checks] == ["dp@4 max_psnr"] and checks[0].passed
    at_one = gate.run_checks(res, {"bound": [{"eps": 1.0, "max_psnr": 20}]})
    assert len(at_one) == 1 and not at_one[0].passed and "selects no cell" in at_one[0].detail


def test_a_diverged_cell_reads_the_canary_audit_as_it_reads_the_mechanism_audit():
    res = _results()
    cell = res["cells"][0]
    cell["status"] = "diverged: non-finite model in round 12"
    cell["attacks"]["canary"] = {"status": "ok", "kind": "canary", "metrics": {
        "empirical_epsilon": 0.3, "empirical_epsilon_cap": 3.65}}
    checks = gate.check_bound({"max_empirical_ratio": 1.0, "max_psnr": 20}, cell)
    by = {c.name.split(" ")[1]: c for c in checks}
    assert by["max_empirical_ratio"].passed and "0.3" in by["max_empirical_ratio"].detail
    assert not by["max_psnr"].passed and "not measured" in by["max_psnr"].detail
