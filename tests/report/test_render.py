"""The HTML report renders from results JSON alone, is self-contained, and escapes every string."""

from __future__ import annotations

import json
import re

import pytest

from privbench.cli import main
from privbench.report import render_html, verdicts
from privbench.results import SCHEMA_VERSION, write_json


def _results(run_name="demo"):
    """A small audit results dict in the documented schema (test fixture, not a measurement)."""
    msg = [{"name": "model", "covered": True, "data_dependent": True, "per_edge": False,
            "description": "x"},
           {"name": "control_variate", "covered": False, "data_dependent": True,
            "per_edge": False, "description": "h"}]
    rep = [{"epsilon": 1.2, "delta": 1e-5, "accountant": "pld", "mode": "calibrated",
            "unit": "sample", "uncovered": ["control_variate"], "node": 0,
            "sampling": "fixed_without_replacement", "approximate": False},
           {"epsilon": 0.9, "delta": 1e-5, "accountant": "closed-form", "mode": "paper",
            "unit": "sample", "uncovered": [], "node": 0, "approximate": True}]
    inv = {"status": "ok", "uses": ["control_variate"],
           "metrics": {"psnr": 31.0, "ssim": 0.9, "mse": 0.001, "label_accuracy": 1.0},
           "gallery": {"true": [[[0.0, 1.0], [1.0, 0.0]]],
                       "reconstructed": [[[0.1, 0.9], [0.8, 0.2]]]}}
    mia = {"status": "ok", "uses": ["model"], "metrics": {"auc": 0.55, "empirical_epsilon": 0.3},
           "roc": {"fpr": [0.0, 0.01, 0.5, 1.0], "tpr": [0.0, 0.02, 0.6, 1.0]}}
    return {
        "schema_version": SCHEMA_VERSION, "kind": "audit", "run_name": run_name,
        "created": "2026-11-22T00:00:00Z", "command": "privbench attack",
        "config": {"run": {"dataset": "digits", "model": "lenet", "nodes": 4, "seed": 0},
                   "threat": "eavesdropper"},
        "environment": {"torch": "x", "device": "cpu"},
        "cells": [
            {"defense": "defl_vp", "epsilon": 1.0, "accuracy": 0.8, "status": "ok",
             "privacy": rep, "messages": msg, "attacks": {"geiping": inv, "mia_loss": mia}},
            {"defense": "sgp", "epsilon": None, "accuracy": 0.95, "status": "ok", "privacy": [],
             "messages": msg[:1], "attacks": {"mia_loss": mia}},
        ],
    }


def test_report_is_self_contained_and_complete():
    html = render_html(_results())
    assert "<script" not in html and "http://" not in html and "https://" not in html
    assert re.findall(r'src="([^"]+)"', html) and all(
        s.startswith("data:image/png;base64,") for s in re.findall(r'src="([^"]+)"', html))
    for needle in ("Headline verdicts", "Message map", "NOT covered", "control_variate",
                   "Reconstruction galleries", "ROC curves", "Reproducibility", "31.00",
                   "fixed_without_replacement", "yes (not an upper bound)"):
        assert needle in html


def test_verdicts_flag_exploited_uncovered_messages_and_baselines_are_references():
    v = verdicts(_results())
    assert v["defl_vp"]["level"] == "violates"  # the inversion read the uncovered kind
    assert any("control_variate" in r for r in v["defl_vp"]["reasons"])
    assert any("PSNR 31.0" in r for r in v["defl_vp"]["reasons"])
    assert v["sgp"]["level"] == "reference"


def test_every_string_is_escaped():
    evil = "<script>alert(1)</script>"
    res = _results(run_name=evil)
    res["cells"][0]["defense"] = evil
    html = render_html(res)
    assert "<script>" not in html and "&lt;script&gt;" in html


def test_report_command_renders_the_same_html_from_json(tmp_path, capsys):
    path = tmp_path / "results.json"
    write_json(path, _results())
    out = tmp_path / "r.html"
    assert main(["report", str(path), "-o", str(out)]) == 0
    assert out.read_text() == render_html(json.loads(path.read_text()))


def test_report_merges_several_results(tmp_path):
    a, b = _results("a"), _results("b")
    b["cells"] = [dict(b["cells"][0], defense="other")]
    pa, pb = tmp_path / "a.json", tmp_path / "b.json"
    write_json(pa, a)
    write_json(pb, b)
    out = tmp_path / "m.html"
    assert main(["report", str(pa), str(pb), "-o", str(out)]) == 0
    html = out.read_text()
    assert "other" in html and "a + b" in html


def test_report_rejects_other_schema_versions(tmp_path, capsys):
    bad = _results()
    bad["schema_version"] = 999
    path = tmp_path / "r.json"
    write_json(path, bad)
    assert main(["report", str(path), "-o", str(tmp_path / "x.html")]) == 2
    assert "schema_version 999" in capsys.readouterr().err
    assert not (tmp_path / "x.html").exists()


# Without an interval of its own and without member / non-member counts, an AUC has no
# resolvable uncertainty, so it is never called a leak (verdicts.membership_findings).
@pytest.mark.parametrize("ci,leaks", [([0.61, 0.69], True), ([0.48, 0.82], False), (None, False)])
def test_membership_leaks_only_when_interval_clears_chance(ci, leaks):
    res = _results()
    cell = {"defense": "dp", "epsilon": 1.0, "accuracy": 0.8, "status": "ok",
            "privacy": res["cells"][0]["privacy"], "messages": res["cells"][1]["messages"],
            "attacks": {"mia": {"status": "ok", "uses": ["model"], "metrics": {"auc": 0.65},
                                "intervals": {"auc": ci}}}}
    res["cells"] = [cell]
    findings = verdicts(res)["dp"]["cells"][0]["findings"]
    assert any(f["level"] == "leaks" for f in findings) == leaks
    if ci is not None:
        assert f"[{ci[0]:.2f}" in render_html(res)  # the interval is shown with the AUC


def test_sensitivity_trace_is_drawn_and_a_realized_overspend_violates():
    res = _results()
    trace = {"S_est": [1.0, 2.0, 0.5, None], "S_real": [0.5, 2.5, 0.4, None],
             "sync": [False, False, False, True]}
    check = {"estimate_below_real": 1, "non_finite_count": 1}
    res["cells"].append({
        "defense": "partpsp", "epsilon": 1.0, "accuracy": 0.5, "status": "ok", "messages": [],
        "attacks": {}, "sensitivity_trace": trace,
        "privacy": [{"epsilon": 1.0, "delta": 1e-5, "accountant": "basic", "mode": "calibrated",
                     "unit": "node-level", "uncovered": [], "node": 0, "reading": "assumed"},
                    {"epsilon": "inf", "delta": 0.0, "accountant": "basic", "mode": "calibrated",
                     "unit": "node-level", "uncovered": [], "node": 0, "reading": "realized",
                     "sensitivity_check": check}]})
    html = render_html(res)
    assert "Sensitivity estimate vs real" in html
    v = verdicts(res)["partpsp"]
    assert v["level"] == "violates"
    assert any("realized ε inf exceeds the assumed ε 1" in r for r in v["reasons"])
    assert "Sensitivity estimate vs real" not in render_html(_results())
