"""A result names the code that made it: the git commit, whether privbench's code differed, and
a digest of the code that is the same wherever the same code runs."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from privbench.results.provenance import (
    NOT_A_CHECKOUT,
    code_digest,
    code_revision,
    digest,
    revision,
)

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                          check=True).stdout.strip()


@pytest.fixture
def checkout(tmp_path: Path) -> tuple[Path, str]:
    """A one-commit repository with a code file and a README."""
    root = tmp_path / "repo"
    (root / "privbench").mkdir(parents=True)
    (root / "privbench" / "engine.py").write_text("STEP = 1\n")
    (root / "README.md").write_text("numbers\n")
    _git(root, "init", "-q")
    _git(root, "add", "-A")
    _git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    return root, _git(root, "rev-parse", "HEAD")


def test_a_clean_checkout_is_its_commit_and_a_changed_readme_leaves_it_clean(checkout):
    root, commit = checkout
    assert revision(root) == f"git {commit}"
    (root / "README.md").write_text("other numbers\n")  # not code: cannot change a result
    assert revision(root) == f"git {commit}"


def test_changed_and_new_code_is_named(checkout):
    root, commit = checkout
    (root / "privbench" / "engine.py").write_text("STEP = 2\n")  # first status column blank
    assert revision(root) == f"git {commit} + uncommitted changes to privbench"
    (root / "defenses").mkdir()
    (root / "defenses" / "new.py").write_text("")  # untracked: a new module changes results
    assert revision(root) == f"git {commit} + uncommitted changes to defenses, privbench"


def test_a_folder_that_is_not_the_top_of_a_checkout_says_so(checkout, tmp_path):
    root, _ = checkout
    assert revision(root / "privbench") == NOT_A_CHECKOUT  # e.g. a venv inside a repository
    assert revision(tmp_path) == NOT_A_CHECKOUT
    assert revision(tmp_path / "missing") == NOT_A_CHECKOUT


def test_the_digest_is_of_the_code_not_of_the_folder_or_its_caches(checkout, tmp_path):
    root, _ = checkout
    copy = tmp_path / "copy"  # a work tree copied without .git, as on a lent GPU machine
    shutil.copytree(root, copy, ignore=shutil.ignore_patterns(".git"))
    assert revision(copy) == NOT_A_CHECKOUT
    assert digest(copy) == digest(root)
    (copy / "README.md").write_text("not code\n")
    (copy / "privbench" / "__pycache__").mkdir()
    (copy / "privbench" / "__pycache__" / "engine.cpython-313.pyc").write_bytes(b"\0")
    assert digest(copy) == digest(root)
    (copy / "privbench" / "engine.py").write_text("STEP = 2\n")
    assert digest(copy) != digest(root)
    (copy / "privbench" / "engine.py").write_text("STEP = 1\n")
    (copy / "privbench" / "engine.py").rename(copy / "privbench" / "step.py")
    assert digest(copy) != digest(root)  # the same bytes under another module name


def test_results_record_the_commit_of_the_checkout_privbench_runs_from():
    import torch

    import privbench
    from privbench.device import machine_kind
    from privbench.engine.runner import environment

    root = Path(privbench.__file__).resolve().parent.parent
    if not (root / ".git").exists():
        pytest.skip("privbench is not imported from a git checkout here")
    env = environment(torch.device("cpu"))
    assert env["code"] == code_revision()
    assert env["code_sha256"] == code_digest() == digest(root)
    assert env["code"].startswith(f"git {_git(root, 'rev-parse', 'HEAD')}")
    assert env["privbench"] == privbench.__version__
    assert env["machine"] == machine_kind(torch.device("cpu"))  # e.g. "cpu (AMD EPYC, AVX512)"


@pytest.fixture
def fresh_provenance():
    """The per-process provenance cache emptied before and after (a test patches `revision`)."""
    from privbench.results import provenance

    for f in (provenance.code_revision, provenance.code_digest):
        f.cache_clear()
    yield provenance
    for f in (provenance.code_revision, provenance.code_digest):
        f.cache_clear()


def test_a_result_names_the_code_imported_not_what_the_tree_holds_when_written(
        tmp_path, monkeypatch, fresh_provenance):
    """A commit made while a run trains must not be what its results.json names: `build` reads
    the code's identity before anything trains."""
    import json

    from privbench.cli import main
    from privbench.engine import runner

    committed = {"during the run": False}
    monkeypatch.setattr(fresh_provenance, "revision", lambda root: "git after" if
                        committed["during the run"] else "git before")
    real = runner.train_result

    def commit_meanwhile(*args, **kwargs):  # training done, results not yet written
        committed["during the run"] = True
        return real(*args, **kwargs)

    monkeypatch.setattr(runner, "train_result", commit_meanwhile)
    out = tmp_path / "run"
    assert main(["train", "--nodes", "3", "--rounds", "2", "--quiet", "--out", str(out)]) == 0
    assert committed["during the run"]
    assert json.loads((out / "results.json").read_text())["environment"]["code"] == "git before"
