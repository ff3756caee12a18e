"""`privbench check` where CI users read it: the Markdown summary (`--markdown`, GitHub's
`$GITHUB_STEP_SUMMARY`) and GitHub Actions annotations, run as a workflow step would run it."""

from __future__ import annotations

import pytest

from privbench.cli import main
from privbench.report.ci import annotations, markdown_summary
from privbench.report.gate import Check
from privbench.results.store import write_json
from tests.report.test_gate import _results

POLICY = ('[[bound]]\ndefense = "dp"\neps = 1.0\nmax_psnr = 20\nmax_auc = 0.5\n'
          '[[bound]]\ndefense = "leaky"\nrequire_coverage = true\n')


@pytest.fixture
def workflow(tmp_path, monkeypatch):
    """The environment of a GitHub Actions step: its job summary file and GITHUB_ACTIONS."""
    summary = tmp_path / "step_summary.md"
    summary.write_text("# an earlier step's summary\n")
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    rp, pp = tmp_path / "results.json", tmp_path / "policy.toml"
    write_json(rp, _results())
    pp.write_text(POLICY)
    return summary, rp, pp


def test_a_workflow_step_gets_the_summary_and_one_annotation_per_failure(workflow, capsys):
    summary, rp, pp = workflow
    assert main(["check", str(rp), "--policy", str(pp)]) == 1
    out = capsys.readouterr().out
    errors = [line for line in out.splitlines() if line.startswith("::error ")]
    assert len(errors) == 2  # dp's AUC 0.52 > 0.5; leaky's uncovered control variate
    assert all(f"file={rp}".replace(":", "%3A").replace(",", "%2C") in e for e in errors)
    assert any("max_auc" in e for e in errors) and any("coverage" in e for e in errors)
    assert not any(line.startswith("::") and "max_psnr" in line for line in out.splitlines())
    text = summary.read_text()
    assert text.startswith("# an earlier step's summary\n## privbench check failed")
    rows = [line for line in text.splitlines() if line.startswith("| ") and "---" not in line]
    results = [r.split(" | ")[1] for r in rows[1:]]
    assert results == sorted(results, key=lambda w: w != "**FAIL**")  # failures first
    assert results.count("**FAIL**") == 2 and "PASS" in results


def test_markdown_file_without_github_and_no_annotations(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    rp, pp, md = tmp_path / "results.json", tmp_path / "policy.toml", tmp_path / "out" / "c.md"
    write_json(rp, _results())
    pp.write_text('[[bound]]\ndefense = "dp"\neps = 1.0\nmax_psnr = 20\n')
    assert main(["check", str(rp), "--policy", str(pp), "--markdown", str(md)]) == 0
    assert "::" not in capsys.readouterr().out
    assert md.read_text().startswith("## privbench check passed")


def test_an_unwritable_step_summary_is_one_line(workflow, capsys, monkeypatch, tmp_path):
    _, rp, pp = workflow
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "missing" / "summary.md"))
    assert main(["check", str(rp), "--policy", str(pp)]) == 2
    err = capsys.readouterr().err
    assert "cannot append to $GITHUB_STEP_SUMMARY" in err and err.count("\n") == 1


def test_workflow_commands_and_markdown_cells_escape_what_would_break_them():
    check = Check("dp@1 max_auc", False, "AUC 0.52 | 100% of\nthe bound, a: b")
    (line,) = annotations([check], "a,b:c.json")
    assert line.startswith("::error file=a%2Cb%3Ac.json,title=privbench check dp@1 max_auc::")
    assert "%0A" in line and "100%25" in line and "\n" not in line
    row = markdown_summary([check], "r.json", "p.toml").splitlines()[-1]
    assert row == "| dp@1 max_auc | **FAIL** | AUC 0.52 \\| 100% of the bound, a: b |"


def test_an_inconclusive_check_is_a_warning_and_fails_the_summary_only_when_the_policy_fails_it():
    from privbench.report.ci import annotations, markdown_summary
    from privbench.report.gate import Check

    warned = Check("dp@8 max_empirical_ratio", True, "INCONCLUSIVE: cap 3.65", inconclusive=True)
    assert "**INCONCLUSIVE**" in markdown_summary([warned], "r.json", "p.toml")
    assert "check passed" in markdown_summary([warned], "r.json", "p.toml")
    failing = Check(warned.name, False, warned.detail, inconclusive=True)
    assert "check failed" in markdown_summary([failing], "r.json", "p.toml")
    assert annotations([warned], "r.json")[0].startswith("::warning ")
