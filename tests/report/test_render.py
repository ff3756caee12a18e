"""The HTML report (privbench.report.render) renders from results JSON alone, is self-contained,
and escapes every string."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from privbench.cli import main
from privbench.report import render_html
from privbench.report.verdicts import verdicts
from privbench.results.store import SCHEMA_VERSION, write_json


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
                   "Reconstruction galleries", "ROC curves", "Reproducibility", "31.0",
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


def test_an_existing_report_is_replaced_only_with_overwrite(tmp_path, capsys):
    """A page is refused before anything is read or rendered: exit 2, one line, the old page
    kept; `--overwrite` replaces it; -o naming a results file it reads is refused too."""
    path = tmp_path / "results.json"
    write_json(path, _results())
    out = tmp_path / "r.html"
    out.write_text("an earlier page")
    assert main(["report", str(path), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "choose another -o or pass --overwrite" in err
    assert out.read_text() == "an earlier page"
    assert main(["report", str(path), "-o", str(path), "--overwrite"]) == 2
    assert "names one of the results files" in capsys.readouterr().err
    assert main(["report", str(path), "-o", str(out), "--overwrite"]) == 0
    assert out.read_text() == render_html(json.loads(path.read_text()))


def test_the_report_renders_the_audit_record_the_sweep_returns():
    """`render_html` takes the `AuditRun` record: the same page as from the file's JSON."""
    from privbench.results.records import AuditRun

    record = AuditRun.from_json(_results())
    assert record.cells[0].attacks["geiping"].gallery is not None
    assert render_html(record, run_name="demo") == render_html(_results())


def test_a_malformed_results_file_is_one_line_for_the_report(tmp_path, capsys):
    bad = _results()
    bad["cells"][1]["messages"] = "model"  # a string where the message kinds belong
    path = tmp_path / "results.json"
    write_json(path, bad)
    assert main(["report", str(path), "-o", str(tmp_path / "x.html")]) == 2
    err = capsys.readouterr().err
    assert "does not match the results schema: .cells: [1]: .messages: expected an array" in err
    assert err.count("\n") == 1 and not (tmp_path / "x.html").exists()


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
    assert any("realized ε ∞ exceeds the assumed ε 1.00" in r for r in v["reasons"])
    assert "Sensitivity estimate vs real" not in render_html(_results())


def _with(cells: list[dict]) -> dict:
    res = _results()
    res["config"]["run"]["dataset"] = "digits"
    res["cells"] = cells
    return res


NON_FINITE = "not applicable: non-finite canary scores: the run diverged (non-finite messages)"


def _diverged_cell() -> dict:
    """A DP cell whose training did not stop but whose messages went non-finite: the canary
    audit could not run, the threshold attack ran on the finite model alone."""
    rep = _results()["cells"][0]["privacy"]
    threshold = {"status": "ok", "uses": ["model"], "n_members": 700, "n_nonmembers": 700,
                 "metrics": {"auc": 0.5, "empirical_epsilon": 0.0,
                             "empirical_epsilon_cap": 4.12}}
    return {"defense": "defl_vp", "epsilon": 1.0, "accuracy": 0.0583, "status": "ok",
            "history": [{"round": 60, "test_samples": 360}], "privacy": rep,
            "messages": _results()["cells"][0]["messages"][:1],
            "attacks": {"canary": {"status": NON_FINITE, "uses": [], "metrics": {}},
                        "mia_threshold": threshold}}


def _row(html: str, defense: str) -> str:
    body = html[html.index('<section id="table">'):]
    return next(r for r in body.split("<tr>") if f"<td>{defense}</td>" in r)


def test_a_cell_with_non_finite_messages_is_diverged_everywhere():
    from privbench.report.summary import summary_table

    res = _with([_diverged_cell()])
    v = verdicts(res)["defl_vp"]
    assert "diverged" in v["title"] and v["cells"][0]["state"]["kind"] == "diverged"
    assert any("diverged" in r for r in v["reasons"]) and v["level"] != "resists"
    row = _row(render_html(res), "defl_vp")
    assert "diverged" in row and "4.12" not in row and "ok" not in row.split("</td>")[2]
    line = summary_table(res, wide=True).splitlines()[1].split()
    assert line[12:14] == ["-", "-"] and line[15] == "diverged:"  # eps_emp, cap; training


def test_a_dp_cell_whose_model_did_not_learn_is_uninformative_not_resists():
    cell = dict(_diverged_cell(), accuracy=0.1, privacy=_diverged_cell()["privacy"][:1],
                attacks={"mia_threshold": _diverged_cell()["attacks"]["mia_threshold"]})
    res = _with([cell])
    v = verdicts(res)["defl_vp"]
    assert v["level"] == "uninformative" and "resists" not in v["title"]
    assert "did not learn" in _row(render_html(res), "defl_vp")
    res["cells"][0]["accuracy"] = 0.5  # clear of chance: the same attacks now say it resists
    assert verdicts(res)["defl_vp"]["level"] == "resists"


def test_the_table_shows_each_cells_verdict_and_training_not_ok():
    html = render_html(_with(_results()["cells"]))
    row = _row(html, "defl_vp")
    # a cell that trained normally carries no training note under its row
    assert "violates its guarantee" in row and 'class="rownote"' not in row
    assert "<td>ok</td>" not in row


def test_the_verdict_quotes_the_strongest_attack_as_the_table_does():
    res = _results()
    inv = res["cells"][0]["attacks"]["geiping"]
    res["cells"][0]["attacks"] = {"geiping": dict(inv, metrics={"psnr": 76.5}),
                                  "idlg": dict(inv, metrics={"psnr": 84.99})}
    first = verdicts(res)["defl_vp"]["reasons"][0]
    assert "idlg" in first and "PSNR 85.0 dB" in first and "geiping 76.5 dB" in first
    assert ">85.0</td>" in _row(render_html(res), "defl_vp")


MECHANISM = {"status": "ok", "uses": ["model"],
             "metrics": {"measured_epsilon": 1.06, "measured_ratio": 1.07},
             "mechanism": {"epsilon": {"applicable": True, "epsilon": 1.065,
                                       "interval": [0.8967, 1.255], "claimed": 0.9994,
                                       "ratio": 1.066, "ratio_interval": [0.8973, 1.256]},
                           "findings": [], "sampling": [], "freshness": {}, "rounds": [1]}}


def test_the_mechanism_audit_is_shown_per_cell_and_its_findings_violate():
    res = _results()
    res["cells"][0]["messages"] = res["cells"][0]["messages"][:1]  # nothing uncovered
    res["cells"][0]["attacks"] = {"mechanism": MECHANISM}
    html = render_html(res)
    assert "Mechanism audit per cell" in html
    assert "1.06 [0.897, 1.25] vs claimed 0.999 (ratio 1.07" in html
    assert verdicts(res)["defl_vp"]["level"] != "violates"
    found = json.loads(json.dumps(MECHANISM))
    found["mechanism"]["findings"] = ["update noise reused across rounds (node 4)"]
    res["cells"][0]["attacks"] = {"mechanism": found}
    v = verdicts(res)["defl_vp"]
    assert v["level"] == "violates" and "update noise reused" in v["reasons"][0]
    off = dict(found, mechanism=dict(found["mechanism"], epsilon={
        "applicable": False, "reason": "the defense declares no per-release noise multiplier"}))
    res["cells"][0]["attacks"] = {"mechanism": off}
    assert "not applicable" in render_html(res)


def test_a_diverged_cell_fails_every_attack_bound_of_the_gate():
    from privbench.report.gate import run_checks

    checks = run_checks(_with([_diverged_cell()]),
                        {"bound": [{"eps": "private", "max_empirical_ratio": 2.0}]})
    assert len(checks) == 1 and not checks[0].passed
    assert "not measured: training diverged" in checks[0].detail


def test_no_machine_path_and_how_to_provide_lpips_weights_offline():
    res = _results()
    res["command"] = "privbench attack --out /home/alice/runs/a"
    inv = res["cells"][0]["attacks"]["geiping"]
    inv["metrics"]["lpips"] = None
    inv["lpips_status"] = ("LPIPS unavailable: AlexNet weights not cached at /root/.cache/torch/"
                           "hub/checkpoints/alexnet-owt-7be5be79.pth (never downloaded)")
    html = render_html(res)
    assert "/root/" not in html and "/home/alice" not in html and "~/runs/a" in html
    assert "$TORCH_HOME/hub/checkpoints/" in html and "alexnet-owt-7be5be79.pth" in html


def test_math_is_unicode_and_no_outside_document_is_cited():
    res = _results()
    res["cells"][0]["messages"][1]["description"] = (
        "ddot g^{ij}_t: noise N(0, sigma^2 C^2)/B; reveals gamma_s (card §8 item 7)")
    html = render_html(res)
    assert "ddot" not in html and "^{" not in html and "card §" not in html
    assert "g̈<sup>ij</sup><sub>t</sub>" in html and "σ<sup>2</sup>" in html
    assert "control_variate" in html  # identifiers are left alone


def test_a_repeated_reason_is_written_once():
    reason = ("not applicable: the view is a local epoch's pseudo-gradient (every member, "
              "several optimiser steps), not one batch's gradient")
    res = _results()
    for cell in res["cells"]:
        cell["attacks"]["idlg"] = {"status": reason, "uses": [], "metrics": {"psnr": None}}
    res["cells"].append(dict(res["cells"][0], epsilon=8.0))
    assert render_html(res).count("several optimiser steps") == 1


def test_verdict_cards_are_ordered_by_severity_with_references_apart():
    res = _results()
    calm = dict(res["cells"][0], defense="aaa", messages=res["cells"][0]["messages"][:1],
                attacks={})
    res["cells"] = [res["cells"][1], calm, res["cells"][0]]
    v = verdicts(res)
    assert list(v) == ["defl_vp", "aaa", "sgp"]  # violates, resists, then the reference
    html = render_html(res)
    assert html.index("defl_vp — ") < html.index("aaa — ") < html.index("Non-private references:") \
        < html.index("sgp — ")


def test_an_attack_that_ran_on_a_diverged_cell_is_marked_not_read():
    html = render_html(_with([_diverged_cell()]))
    attacks = html[html.index("<h2>Attacks per cell</h2>"):]
    row = next(r for r in attacks.split("<tr>") if "mia_threshold" in r)
    assert "not read: training diverged" in row


def test_claims_table_shows_the_largest_epsilon_over_nodes():
    """Nodes that differ (per-node graph accounting): the column labelled "max over nodes"
    reads the worst node's ε, never node 0's."""
    res = _results()
    per_node = [{"epsilon": eps, "delta": 1e-5, "accountant": "rdp", "mode": "calibrated",
                 "reading": "strict", "unit": "sample-level", "uncovered": [], "node": node,
                 "approximate": False} for node, eps in enumerate([0.4125, 0.9931, 0.7716])]
    res["cells"][0]["privacy"] = per_node
    html = render_html(res)
    claims = html.split("<h2>Privacy claims</h2>", 1)[1].split("</table>", 1)[0]
    assert "0.993" in claims and "3 nodes" in claims
    assert "0.412" not in claims and "0.413" not in claims


def test_the_page_writes_unicode_as_itself_never_as_an_escape():
    res = _results()
    res["config"]["run"]["note"] = "ε = 1 per node, σ drawn fresh"
    html = render_html(res)
    assert "\\u03b5" not in html and "\\u03c3" not in html
    assert "ε = 1 per node, σ drawn fresh" in html.split("<pre>", 1)[1]


def test_lira_says_which_variance_it_used_and_why() -> None:
    res = _results()
    rule = "auto: 16 reference models < 64: one global variance (Carlini et al. 2022, Sec. VI)"
    res["cells"][1]["attacks"]["lira"] = {
        "status": "ok", "uses": ["model"], "metrics": {"auc": 0.6},
        "variance": "global", "variance_rule": rule, "reference_models": 16}
    html = render_html(res)
    shown = rule.replace("<", "&lt;")  # escaped as every string of the page
    assert f"variance: global ({shown}, 16 reference models)" in html
    assert html.count("variance: ") == 1  # only the attack that chose one says so


def test_a_membership_result_says_which_sample_it_scored():
    from privbench.audit.candidates import SampleRule, describe_sample

    res = _results()
    rule = SampleRule()
    sample = describe_sample(rule, [np.array([3000, 2000]), np.array([2500, 2500])],
                             [np.array([1800, 1200]), np.array([1500, 1500])], [0, 1])
    res["cells"][1]["attacks"]["mia_loss"] = {**res["cells"][1]["attacks"]["mia_loss"],
                                              "sample": sample}
    html = render_html(res)
    assert ("sample: 3000 of 5000 members, 3000 of 5000 non-members; 3 false positive(s) at "
            "FPR 0.00100, FPR interval [2.06e-04, 0.00292]" in html), html
    assert "sample: " not in render_html(_results())  # no sample recorded: nothing said
