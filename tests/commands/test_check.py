"""`privbench check` (`privbench.commands.check`): the exit code says whether every bound holds,
the JUnit file holds one case per check, and a tolerance that is not positive is refused."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from privbench.cli import main
from privbench.results.store import write_json
from tests.report.test_gate import _results

PASSES = '[[bound]]\ndefense = "dp"\neps = 1.0\nmax_psnr = 20\n'
FAILS = PASSES + 'max_auc = 0.5\n'  # the fixture's dp cell has AUC 0.52


@pytest.fixture
def files(tmp_path, monkeypatch):
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    rp, pp = tmp_path / "results.json", tmp_path / "policy.toml"
    write_json(rp, _results())
    return rp, pp


@pytest.mark.parametrize(("policy", "code", "failures"), [(PASSES, 0, "0"), (FAILS, 1, "1")])
def test_the_exit_code_and_the_junit_file_follow_the_checks(files, tmp_path, capsys, policy,
                                                            code, failures) -> None:
    rp, pp = files
    pp.write_text(policy)
    junit = tmp_path / "out" / "checks.xml"
    assert main(["check", str(rp), "--policy", str(pp), "--junit", str(junit)]) == code
    table = capsys.readouterr().out
    suite = ET.parse(junit).getroot()
    assert suite.get("failures") == failures
    cases = suite.findall("testcase")
    assert int(suite.get("tests")) == len(cases) >= 1
    assert all(case.get("name") in table for case in cases)
    assert sum(case.find("failure") is not None for case in cases) == int(failures)


def test_a_tolerance_that_is_not_positive_is_one_line(files, capsys) -> None:
    rp, pp = files
    pp.write_text(PASSES)
    assert main(["check", str(rp), "--policy", str(pp), "--tolerance", "0"]) == 2
    err = capsys.readouterr().err
    assert "--tolerance must be > 0, got 0.0" in err and err.count("\n") == 1


def test_a_baseline_equal_to_the_results_passes(files, tmp_path, capsys) -> None:
    rp, pp = files
    pp.write_text(PASSES)
    base = tmp_path / "baseline.json"
    write_json(base, _results())
    assert main(["check", str(rp), "--policy", str(pp), "--baseline", str(base)]) == 0
