"""`privbench check`: every kind of bound, baseline tolerances, malformed policies, JUnit."""

from __future__ import annotations

import copy
from xml.etree import ElementTree as ET

import pytest

from privbench.cli import main
from privbench.results.store import SCHEMA_VERSION, write_json


def _results():
    """A results fixture in the audit schema (hand-written values, not measurements)."""
    return {
        "schema_version": SCHEMA_VERSION, "kind": "audit", "run_name": "t",
        "cells": [
            {"defense": "dp", "epsilon": 1.0, "accuracy": 0.7,
             "privacy": [{"epsilon": 1.0, "mode": "calibrated"}, {"epsilon": 0.5, "mode": "paper"}],
             "messages": [{"name": "model", "covered": True, "data_dependent": True}],
             "attacks": {
                 "geiping": {"status": "ok", "metrics": {"psnr": 12.0, "ssim": 0.1, "mse": 0.06,
                                                         "label_accuracy": 0.2, "lpips": 0.6}},
                 "lira": {"status": "ok", "metrics": {"auc": 0.52, "empirical_epsilon": 0.2,
                                                      "empirical_epsilon_cap": 3.0},
                          "roc": {"fpr": [0.0, 0.001, 0.01, 1.0], "tpr": [0.0, 0.002, 0.02, 1.0]}},
                 "broken": {"status": "failed: diverged", "metrics": {"psnr": 99.0}}}},
            {"defense": "leaky", "epsilon": 1.0, "accuracy": 0.9, "privacy": [],
             "messages": [{"name": "control_variate", "covered": False, "data_dependent": True}],
             "attacks": {"geiping": {"status": "ok", "metrics": {"psnr": 35.0}}}},
            {"defense": "sgp", "epsilon": None, "accuracy": 0.95, "privacy": [], "messages": [],
             "attacks": {"geiping": {"status": "ok", "metrics": {"psnr": 40.0}}}},
        ],
    }


def _run(tmp_path, policy_text, results=None, extra=()):
    rp, pp = tmp_path / "results.json", tmp_path / "policy.toml"
    write_json(rp, results or _results())
    pp.write_text(policy_text)
    return main(["check", str(rp), "--policy", str(pp), *extra])


@pytest.mark.parametrize("bound,ok", [
    ("max_psnr = 20", True), ("max_psnr = 10", False),
    ("max_ssim = 0.2", True), ("max_ssim = 0.05", False),
    ("min_mse = 0.05", True), ("min_mse = 0.1", False),
    ("max_label_accuracy = 0.3", True), ("max_label_accuracy = 0.1", False),
    ("max_auc = 0.6", True), ("max_auc = 0.5", False),
    ("max_tpr_at_fpr = {fpr = 0.01, tpr = 0.05}", True),
    ("max_tpr_at_fpr = {fpr = 0.01, tpr = 0.01}", False),
    ("min_accuracy = 0.6", True), ("min_accuracy = 0.8", False),
    ("max_empirical_ratio = 0.5", True), ("max_empirical_ratio = 0.1", False),
    ("max_lpips_similarity = 0.5", True), ("max_lpips_similarity = 0.3", False),
    ("require_coverage = true", True),
])
def test_each_bound_kind_passes_and_fails(tmp_path, capsys, bound, ok):
    code = _run(tmp_path, f'[[bound]]\ndefense = "dp"\neps = 1.0\n{bound}\n')
    assert code == (0 if ok else 1)
    out = capsys.readouterr().out
    assert ("0 failed" in out) == ok


def test_an_empirical_ratio_the_audit_cannot_fail_is_not_a_pass(tmp_path, capsys):
    # cap 3.0 at claimed ε 1: a ratio bound of 2 could fail (passes with 0.2), one of 3 or 4
    # could not (no attack certifies above its cap), nor one whose audit recorded no cap
    assert _run(tmp_path, '[[bound]]\ndefense = "dp"\nmax_empirical_ratio = 2\n') == 0
    capsys.readouterr()
    assert _run(tmp_path, '[[bound]]\ndefense = "dp"\nmax_empirical_ratio = 4\n') == 1
    assert "cannot fail" in capsys.readouterr().out
    no_cap = _results()
    del no_cap["cells"][0]["attacks"]["lira"]["metrics"]["empirical_epsilon_cap"]
    assert _run(tmp_path, '[[bound]]\ndefense = "dp"\nmax_empirical_ratio = 2\n', no_cap) == 1
    assert "cap not recorded" in capsys.readouterr().out


def test_failed_attacks_do_not_count_as_measurements(tmp_path):
    # the diverged attack reported PSNR 99 but its status is not ok: the bound uses geiping's 12
    assert _run(tmp_path, '[[bound]]\ndefense = "dp"\nmax_psnr = 13\n') == 0


def test_coverage_floor_and_selectors(tmp_path, capsys):
    assert _run(tmp_path, '[[bound]]\ndefense = "leaky"\nrequire_coverage = true\n') == 1
    assert "control_variate" in capsys.readouterr().out
    # a floor on the non-private baseline: the attack must still work there
    assert _run(tmp_path, '[[bound]]\ndefense = "sgp"\neps = "none"\nmin_psnr = 30\n') == 0
    assert _run(tmp_path, '[[bound]]\ndefense = "sgp"\neps = "none"\nmin_psnr = 45\n') == 1
    assert _run(tmp_path, '[[bound]]\ndefense = "nobody"\nmax_psnr = 1\n') == 1


def test_baseline_tolerance_flags_only_moves_toward_less_privacy(tmp_path, capsys):
    base = _results()
    worse, better = copy.deepcopy(base), copy.deepcopy(base)
    worse["cells"][0]["attacks"]["geiping"]["metrics"]["psnr"] = 13.5  # +1.5 dB > tol 1.0
    better["cells"][0]["attacks"]["geiping"]["metrics"]["psnr"] = 5.0
    bp = tmp_path / "base.json"
    write_json(bp, base)
    policy = '[[bound]]\ndefense = "dp"\nmax_psnr = 40\n'
    assert _run(tmp_path, policy, worse, ["--baseline", str(bp)]) == 1
    assert "baseline psnr" in capsys.readouterr().out
    assert _run(tmp_path, policy, better, ["--baseline", str(bp)]) == 0
    assert _run(tmp_path, policy, worse, ["--baseline", str(bp), "--tolerance", "2"]) == 0
    assert _run(tmp_path, policy + "[tolerance]\npsnr = 2.0\n", worse,
                ["--baseline", str(bp)]) == 0


@pytest.mark.parametrize("policy,needle", [
    ('[[bound]]\nmax_psnrr = 20\n', "unknown key 'max_psnrr'"),
    ('[[bound]]\nmax_psnr = "high"\n', "wrong type"),
    ('[[bound]]\nrequire_coverage = 1\n', "wrong type"),
    ('[[bound]]\nmax_tpr_at_fpr = {fpr = 0.01}\n', "wrong type"),
    ('[bounds]\nmax_psnr = 1\n', "unknown section"),
    ('max_psnr = 1\n', "unknown section"),
    ('[[bound]]\nmax_psnr = \n', "not valid TOML"),
    ('[tolerance]\npsnr = 1\n', "at least one [[bound]]"),
    ('[[bound]]\nmax_psnr = 1\n[tolerance]\nspeed = 1\n', "tolerance 'speed'"),
])
def test_malformed_policies_exit_2_with_one_line(tmp_path, capsys, policy, needle):
    assert _run(tmp_path, policy) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1


def test_missing_files_exit_2(tmp_path, capsys):
    rp = tmp_path / "r.json"
    write_json(rp, _results())
    assert main(["check", str(rp), "--policy", str(tmp_path / "none.toml")]) == 2
    assert "not found" in capsys.readouterr().err
    (tmp_path / "p.toml").write_text("[[bound]]\nmax_psnr = 1\n")
    assert main(["check", str(tmp_path / "nope.json"), "--policy", str(tmp_path / "p.toml")]) == 2


def test_junit_output_parses_back(tmp_path):
    junit = tmp_path / "out.xml"
    code = _run(tmp_path, '[[bound]]\ndefense = "dp"\nmax_psnr = 10\nmax_auc = 0.6\n',
                extra=["--junit", str(junit)])
    assert code == 1
    suite = ET.parse(junit).getroot()
    assert suite.tag == "testsuite" and suite.get("tests") == "2" and suite.get("failures") == "1"
    failed = [c.get("name") for c in suite.iter("testcase") if c.find("failure") is not None]
    assert failed == ["dp@1 max_psnr"]


def _mia_cell(scores, labels):
    """A cell whose one MIA result is stored the way the sweep stores it (exact points + grid)."""
    from privbench.metrics.roc import roc_curve, roc_steps, roc_summary

    summ = roc_summary(scores, labels)
    att = {"status": "ok", "metrics": {"auc": summ["auc"]}, "roc": summ["roc"]["log"],
           "roc_steps": roc_steps(roc_curve(scores, labels)), "tpr_at_fpr": summ["tpr_at_fpr"],
           "n_members": summ["n_members"], "n_nonmembers": summ["n_nonmembers"]}
    return {"defense": "dp", "epsilon": 1.0, "accuracy": 0.7, "privacy": [], "messages": [],
            "attacks": {"lira": att}}


def test_tpr_bound_reads_the_exact_value_not_the_grid(tmp_path, capsys):
    """600 non-members, 100 members: 40 members outscore every non-member but the 5 highest, so
    the exact TPR at FPR 0.87 % (5/600 = 0.833 % <= 0.87 %) is 0.40, while the 101-point log grid
    (1/600 to 1) has its points at 0.823 % and 0.877 %: read off the grid it is 0 at 0.87 %."""
    import numpy as np

    from privbench.report.gate import _tpr_at
    from privbench.results.records import AuditCell

    neg = np.r_[np.full(5, 10.0), np.linspace(0, 1, 595)]
    pos = np.r_[np.full(40, 5.0), np.linspace(-1, 0.5, 60)]
    scores, labels = np.r_[pos, neg], np.r_[np.ones(100), np.zeros(600)]
    cell = _mia_cell(scores, labels)
    grid = cell["attacks"]["lira"]["roc"]
    on_grid = max(t for f, t in zip(grid["fpr"], grid["tpr"], strict=True) if f <= 0.0087)
    assert on_grid < 0.4  # the grid under-reads here
    assert _tpr_at(AuditCell.from_json(cell), 0.0087) == (0.4, True)
    assert _tpr_at(AuditCell.from_json(cell), 0.01) == (0.4, True)  # read from tpr_at_fpr
    res = _results()
    res["cells"] = [cell]
    assert _run(tmp_path, '[[bound]]\nmax_tpr_at_fpr = {fpr = 0.0087, tpr = 0.3}\n', res) == 1
    assert "= 0.400 " in capsys.readouterr().out  # the exact value, in the one number format
    # the grid reading alone would have passed this bound: the exact value is what is judged
    legacy = {k: v for k, v in cell["attacks"]["lira"].items()
              if k not in ("roc_steps", "tpr_at_fpr")}
    res["cells"] = [dict(cell, attacks={"lira": legacy})]
    assert _run(tmp_path, '[[bound]]\nmax_tpr_at_fpr = {fpr = 0.0087, tpr = 0.3}\n', res) == 0


def test_tpr_bound_unresolved_fails(tmp_path, capsys):
    import numpy as np

    cell = _mia_cell(np.arange(100.0), np.r_[np.zeros(50), np.ones(50)])  # 50 non-members
    res = _results()
    res["cells"] = [cell]
    assert _run(tmp_path, '[[bound]]\nmax_tpr_at_fpr = {fpr = 0.01, tpr = 1.0}\n', res) == 1
    assert "unresolved" in capsys.readouterr().out


def test_sampling_match_compares_the_draw_with_each_ledger(tmp_path, capsys):
    res = _results()
    cell = res["cells"][0]
    cell["sampling_drawn"] = ["fixed_without_replacement"]
    for rep in cell["privacy"]:
        rep["sampling"] = "poisson"  # Poisson accounted for fixed-size batches: caught
    policy = '[[bound]]\ndefense = "dp"\nrequire_sampling_match = true\n'
    assert _run(tmp_path, policy, res) == 1
    assert "drawn fixed_without_replacement; accounted poisson" in capsys.readouterr().out
    for rep in cell["privacy"]:
        rep["sampling"] = "fixed_without_replacement"
    assert _run(tmp_path, policy, res) == 0
    cell["privacy"][0]["sampling"] = "none"  # a ledger without amplification fits any draw
    assert _run(tmp_path, policy, res) == 0
    del cell["privacy"][1]["sampling"]
    assert _run(tmp_path, policy, res) == 1
    del cell["sampling_drawn"]
    assert _run(tmp_path, policy, res) == 1


def test_the_data_layer_records_the_sampling_drawn():
    from privbench.config import RunConfig
    from privbench.data.datasets import recording_sampling
    from privbench.engine.loop import train
    from privbench.engine.runner import build

    run = RunConfig(nodes=4, rounds=2, eval_every=2, batch_size=4, device="cpu", epsilon=1.0)
    drawn = {}
    for name in ("dp_sgp", "sgp"):
        with recording_sampling() as got:
            train(build(run, name).trainer)
        drawn[name] = sorted(got)
    assert drawn == {"dp_sgp": ["poisson"], "sgp": ["fixed_without_replacement"]}


def test_the_gate_reads_the_audit_record_as_it_reads_the_file(tmp_path):
    """`run_checks` takes the `AuditRun` record (what the sweep returns and `read_audit` gives):
    the same checks as on the file's JSON, and a baseline record compared alike."""
    from privbench.report import gate
    from privbench.results.records import AuditRun
    from privbench.results.store import read_audit

    write_json(tmp_path / "results.json", _results())
    record = read_audit(tmp_path / "results.json")
    assert isinstance(record, AuditRun) and record.cells[0].attacks["lira"].roc is not None
    policy = gate.load_policy(_policy(tmp_path, "[[bound]]\nmax_psnr = 30\nmax_auc = 0.6\n"))
    on_record = gate.run_checks(record, policy, record)
    assert on_record == gate.run_checks(_results(), policy, _results())
    assert [c.passed for c in on_record if "max_psnr" in c.name] == [True, False, False]


def test_a_malformed_results_file_is_one_line_for_the_gate_and_the_record_reader(tmp_path,
                                                                                  capsys):
    from privbench.errors import DataError
    from privbench.results.store import read_audit

    bad = _results()
    bad["cells"][0]["attacks"] = ["geiping"]  # an array where an object of results belongs
    assert _run(tmp_path, "[[bound]]\nmax_psnr = 30\n", bad) == 2
    err = capsys.readouterr().err
    assert "does not match the results schema: .cells: [0]: .attacks: expected an object" in err
    assert err.count("\n") == 1
    with pytest.raises(DataError, match=r"\.attacks: expected an object, got array"):
        read_audit(tmp_path / "results.json")


def _policy(tmp_path, text):
    path = tmp_path / "policy.toml"
    path.write_text(text)
    return path


def _no_inversion_fits(inversion_status: str) -> dict:
    """The fixture with the "dp" cell's inversions replaced by `inversion_status` (a defense
    whose releases no batch inversion fits, or a failed one)."""
    res = _results()
    cell = res["cells"][0]
    cell["attacks"] = {k: {"status": inversion_status,
                           "metrics": {"psnr": None, "ssim": None, "mse": None}}
                       for k in ("idlg", "geiping")} | {"lira": cell["attacks"]["lira"]}
    return res


def test_a_check_no_attack_applies_to_is_not_applicable_and_a_bound_of_only_those_fails(
        tmp_path, capsys):
    res = _no_inversion_fits("not applicable: the view is a local epoch's pseudo-gradient")
    code = _run(tmp_path, '[[bound]]\ndefense = "dp"\neps = 1.0\nmax_psnr = 15\nmax_auc = 0.6\n',
                res)
    out = capsys.readouterr().out
    assert code == 0
    assert "dp@1 max_psnr" in out and "N/A" in out and "local epoch" in out
    assert "1 passed, 0 failed, 1 not applicable" in out
    # a bound that checks nothing else fails: no bound may pass on N/A alone
    assert _run(tmp_path, '[[bound]]\ndefense = "dp"\neps = 1.0\nmax_psnr = 15\n', res) == 1
    assert "checked nothing" in capsys.readouterr().out


def test_a_failed_or_skipped_attack_is_not_read_as_not_applicable(tmp_path, capsys):
    for status in ("failed: RuntimeError: boom", "skipped: training diverged"):
        res = _no_inversion_fits(status)
        assert _run(tmp_path, '[[bound]]\ndefense = "dp"\neps = 1.0\nmax_psnr = 15\n'
                    'max_auc = 0.6\n', res) == 1
        assert "psnr was not measured" in capsys.readouterr().out
