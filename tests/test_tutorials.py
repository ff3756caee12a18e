"""The tutorials under reports/tutorials/ run as written, block by block, in an empty folder.

A block right after `<!-- file: NAME -->` is written to NAME; every other bash block is run in
order with bash -e (`<!-- expect-exit: N -->` before it: the exit code it must end with, else 0);
a GitHub Actions job file written by the page has its `run:` steps after the install run too, in
order. privbench itself comes from this checkout (the tutorials' `pip install` aside).

Each tutorial trains and audits twice (a minute or two of CPU), so the two are `slow`; `.ci/run`
runs them after the default suite.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TUTORIALS = ROOT / "reports" / "tutorials"
FENCE = re.compile(r"(?:<!-- (?P<marker>[\w-]+): (?P<arg>\S+) -->\n)?"
                   r"```(?P<lang>\w*)\n(?P<body>.*?)```", re.S)


def steps(page: Path) -> list[tuple[str, str, str]]:
    """(kind, argument, text) per code block of `page`: ("file", NAME, content) or
    ("run", expected exit code, script); other blocks are left out."""
    out = []
    for m in FENCE.finditer(page.read_text(encoding="utf-8")):
        if m["marker"] == "file":
            out.append(("file", m["arg"], m["body"]))
        elif m["lang"] == "bash":
            out.append(("run", m["arg"] if m["marker"] == "expect-exit" else "0", m["body"]))
    return out


def job_steps(workflow: str) -> list[str]:
    """The `run:` commands of a GitHub Actions job file after its `pip install` step."""
    runs = re.findall(r"^\s*- run: (.+)$", workflow, flags=re.M)
    installs = [k for k, r in enumerate(runs) if r.startswith("pip install")]
    assert installs, "the job installs nothing"
    return runs[installs[0] + 1:]


def _env(folder: Path) -> dict[str, str]:
    return dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
                PYTHONPATH=f"{folder}{os.pathsep}{ROOT}", OMP_NUM_THREADS="1")


def _run(script: str, folder: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], cwd=folder,
                          env=_env(folder), capture_output=True, text=True, timeout=600)


def run_page(page: Path, folder: Path) -> list[str]:
    """Run every block of `page` in `folder`; returns the scripts run, in order."""
    ran = []
    for kind, arg, text in steps(page):
        if kind == "file":
            path = folder / arg
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            continue
        proc = _run(text, folder)
        assert proc.returncode == int(arg), (text, proc.stdout[-3000:], proc.stderr[-3000:])
        ran.append(text)
    return ran


def test_the_block_reader_finds_files_runs_and_exit_codes(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("<!-- file: a.toml -->\n```toml\nx = 1\n```\n\n```bash\ntrue\n```\n"
                    "<!-- expect-exit: 1 -->\n```bash\nfalse\n```\n```python\nno\n```\n")
    assert steps(page) == [("file", "a.toml", "x = 1\n"), ("run", "0", "true\n"),
                           ("run", "1", "false\n")]
    assert run_page(page, tmp_path) == ["true\n", "false\n"]
    assert (tmp_path / "a.toml").read_text() == "x = 1\n"
    assert job_steps("steps:\n  - run: pip install x\n  - run: echo a\n  - run: echo b\n") == \
        ["echo a", "echo b"]


@pytest.mark.slow
def test_audit_your_own_defense_runs_to_a_gate_verdict(tmp_path):
    """The plugin from nothing: its first audit fails the gate (nothing measured), the version
    with gradient views and release noise passes it; the plugin is the README's example."""
    page = TUTORIALS / "audit-your-own-defense.md"
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    example = re.search(r"<!-- example-defense -->\n```python\n(.*?)```", readme, re.S)
    files = {arg: text for kind, arg, text in steps(page) if kind == "file"}
    assert example and files["my_defense.py"] == example.group(1)
    ran = run_page(page, tmp_path)
    assert len(ran) == 4
    assert (tmp_path / "reports" / "mine" / "index.html").is_file()
    assert 'failures="0"' in (tmp_path / "privacy.xml").read_text(encoding="utf-8")


@pytest.mark.slow
@pytest.mark.parametrize("page", ["gate-a-ci-job.md"])
def test_gate_a_ci_job_runs_its_job_file(tmp_path, page):
    """The page's files and baseline, then the job's steps as CI runs them: the gate passes."""
    run_page(TUTORIALS / page, tmp_path)
    workflow = (tmp_path / ".github" / "workflows" / "privacy.yml").read_text(encoding="utf-8")
    commands = job_steps(workflow)
    assert any(c.startswith("privbench check") and "--baseline" in c for c in commands)
    for command in commands:
        proc = _run(command, tmp_path)
        assert proc.returncode == 0, (command, proc.stdout[-3000:], proc.stderr[-3000:])
    assert (tmp_path / "reports" / "ci" / "index.html").is_file()
    assert 'failures="0"' in (tmp_path / "privacy.xml").read_text(encoding="utf-8")
