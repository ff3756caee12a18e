"""Property-based CLI fuzz: no input makes privbench print a traceback or
damage a good file.

Every command gets random and adversarial option values, paths (a directory, missing, empty,
binary, truncated and wrong-schema files, `..`, undecodable bytes) and, for `check` / `report`,
results and policy files with random schema damage. The property: the command exits 0 (or 1 for
a failed gate), or 2 with exactly one `privbench: error:` line and no traceback, and no good file
changes when it fails. Inputs that pass every check reach training / benchmarking / attacking,
which are replaced by a sentinel here: validation must happen before them (the door), and the
default run stays fast (in-process calls, few examples). `-m slow` runs many more examples.
`privbench account` is left out (its own tests cover its options).
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from privbench.cli import build_parser, main
from privbench.results.store import SCHEMA_VERSION, write_json


class WorkReachedError(Exception):
    """Raised where the real work (training, timing, attacking) would start."""


FAST = settings(max_examples=12, deadline=None, database=None,
                suppress_health_check=list(HealthCheck))
LONG = settings(max_examples=400, deadline=None, database=None,
                suppress_health_check=list(HealthCheck))
COMMANDS = ("train", "attack", "check", "report", "bench", "list", "reproduce")


def _good_results() -> dict[str, Any]:
    cell = {"defense": "dpdl", "epsilon": 1.0, "status": "ok", "accuracy": 0.5,
            "node_accuracy": [0.5, 0.5],
            "privacy": [{"mode": "calibrated", "epsilon": 1.0, "node": 0, "delta": 1e-5,
                         "accountant": "pld", "unit": "sample", "uncovered": [], "note": ""},
                        {"mode": "paper", "epsilon": 0.5, "node": 0, "delta": 1e-5,
                         "accountant": "paper", "unit": "sample", "uncovered": [], "note": ""}],
            "messages": [{"name": "model", "covered": True, "data_dependent": True,
                          "description": "x"}],
            "defense_config": {}, "history": [],
            "attacks": {"mia_threshold": {
                "kind": "membership", "status": "ok", "uses": ["model"],
                "metrics": {"auc": 0.6, "tpr_at_1%_fpr": 0.02, "empirical_epsilon": 0.1},
                "roc": {"fpr": [0.0, 0.01, 1.0], "tpr": [0.0, 0.02, 1.0]}},
                "idlg": {"kind": "inversion", "status": "ok", "uses": ["model"],
                         "metrics": {"psnr": 12.0, "ssim": 0.1, "mse": 0.05, "lpips": None,
                                     "label_accuracy": 1.0}, "gallery": None}}}
    base = copy.deepcopy(cell)
    base.update(defense="sgp", epsilon=None, privacy=[])
    return {"schema_version": SCHEMA_VERSION, "kind": "audit", "command": "privbench attack",
            "config": {"run": {"dataset": "digits", "model": "mlp", "nodes": 2, "seed": 0},
                       "threat": "eavesdropper"},
            "environment": {"python": "3"}, "cells": [cell, base]}


POLICY = '[[bound]]\ndefense = "dpdl"\nmax_auc = 0.9\nmin_accuracy = 0.1\n'


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("fuzz")
    (root / "adir").mkdir()
    (root / "empty.toml").write_text("")
    (root / "binary.bin").write_bytes(bytes(range(256)) * 4)
    write_json(root / "good.json", _good_results())
    text = (root / "good.json").read_text()
    (root / "trunc.json").write_text(text[: len(text) // 2])
    write_json(root / "wrong.json", {"schema_version": SCHEMA_VERSION, "kind": "audit",
                                     "cells": [{"defense": 3}]})
    (root / "policy.toml").write_text(POLICY)
    (root / "good.html").write_text("<p>a good report</p>")
    (root / "run.toml").write_text('nodes = 3\nrounds = 2\n[audit]\nvictim = 1\n')
    trained = root / "trained"  # a real `privbench train` folder for --messages
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["train", "--nodes", "3", "--rounds", "1", "--batch-size", "2", "--device",
                     "cpu", "--out", str(trained), "--quiet"]) == 0
    return root


GOOD_FILES = ("good.json", "policy.toml", "good.html", "run.toml", "trained/results.json",
              "trained/messages.safetensors")
PATHS = ["adir", "missing.toml", "empty.toml", "binary.bin", "trunc.json", "wrong.json",
         "good.json", "policy.toml", "good.html", "run.toml", "trained", "..", "../..",
         "adir/../../x", "o\udcff", "", "new/out"]
VALUES = ["-1", "0", "1", "2", "3", "7", "99999999999999999999", "nan", "inf", "-inf",
          "1e-300", "1e308", "-0.0", "0.5", "", " ", "$\\x^$", "all", ",", "x" * 300, "\udcff",
          "sgp", "dpdl", "none", "mia_threshold", "idlg", "1,1.0", "a=b", "=", "defense.clip=-1",
          "audit.victim=-5", "audit.reference_models=0", "lr=nan", "rounds=0", "nodes=1",
          "check", "rerun-stale", "cpu", "cuda", "engine", "ring"]


def _options() -> dict[str, list[str]]:
    """Each command's option strings, read from the parser itself."""
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    return {name: [o for a in p._actions for o in a.option_strings if o not in ("-h", "--help")]
            for name, p in sub.choices.items() if name in COMMANDS}


OPTIONS = _options()


@st.composite
def argv(draw) -> list[str]:
    command = draw(st.sampled_from(COMMANDS))
    args = [command]
    if command in ("check", "report"):
        args.append(draw(st.sampled_from(PATHS)))
    if command == "bench":
        args.append(draw(st.sampled_from(["engine", "attacks", "audit", "scale", "distributed",
                                          "nope"])))
    if command == "reproduce":
        args += draw(st.sampled_from([[], ["dyn_d2p"], ["adp_vrsgp"], ["nope"], ["x" * 300]]))
    for _ in range(draw(st.integers(0, 5))):
        opt = draw(st.sampled_from(OPTIONS[command] or ["--bogus"]))
        value = draw(st.sampled_from(PATHS + VALUES))
        args.extend(draw(st.sampled_from([[opt, value], [f"{opt}={value}"], [opt]])))
    if command == "check" and "--policy" not in args:
        args += ["--policy", draw(st.sampled_from(PATHS))]
    return args


@contextlib.contextmanager
def _sentinels(sandbox: Path):
    """Stand-ins for the real work; the current folder is the sandbox."""
    import privbench.commands.bench
    import privbench.engine.loop
    import privbench.pipeline.sweep
    import privbench.reproduce.runs

    def reached(*args, **kwargs):
        raise WorkReachedError

    saved = [(privbench.engine.loop, "train"), (privbench.pipeline.sweep, "train"),
             (privbench.pipeline.sweep, "run_attack"), (privbench.commands.bench, "run_bench"),
             (privbench.reproduce.runs, "run_job")]
    old = [getattr(m, n) for m, n in saved]
    cwd = os.getcwd()
    try:
        for m, n in saved:
            setattr(m, n, reached)
        os.chdir(sandbox)
        yield
    finally:
        os.chdir(cwd)
        for (m, n), o in zip(saved, old, strict=True):
            setattr(m, n, o)


def _snapshot(sandbox: Path) -> dict[str, bytes]:
    return {name: (sandbox / name).read_bytes() for name in GOOD_FILES}


def _call(sandbox: Path, args: list[str], ok: tuple[int, ...] = (0, 2)) -> int | None:
    """Run the CLI in-process and check the property; None when the real work was reached."""
    before = _snapshot(sandbox)
    err, out = io.StringIO(), io.StringIO()
    with _sentinels(sandbox), contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            code = main(args)
        except WorkReachedError:
            return None
    text = err.getvalue()
    assert code in ok, (args, code, text)
    assert "Traceback" not in text, (args, text)
    if code == 2:
        lines = [x for x in text.splitlines() if x.strip()]
        assert len(lines) >= 1 and lines[-1].startswith("privbench: error: "), (args, text)
        assert sum(x.startswith("privbench: error") for x in lines) == 1, (args, text)
        assert _snapshot(sandbox) == before, args  # nothing good overwritten
    return code


def _fuzz_cli(sandbox: Path, args: list[str]) -> None:
    _call(sandbox, args, ok=(0, 1, 2) if args[0] == "check" else (0, 2))


@FAST
@given(args=argv())
def test_cli_fuzz(sandbox, args):
    _fuzz_cli(sandbox, args)


@pytest.mark.slow
@LONG
@given(args=argv())
def test_cli_fuzz_long(sandbox, args):
    _fuzz_cli(sandbox, args)


JSON = st.recursive(st.none() | st.booleans() | st.integers(-3, 3) | st.floats()
                    | st.text(max_size=5), lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(max_size=4), inner, max_size=3), max_leaves=6)


@st.composite
def damaged(draw) -> Any:
    """The good results with one to three random edits: a value replaced or a key deleted."""
    data = _good_results()
    for _ in range(draw(st.integers(1, 3))):
        node, parent, key = data, None, None
        for _ in range(draw(st.integers(0, 6))):  # walk down a random path
            if isinstance(node, dict) and node:
                parent, key = node, draw(st.sampled_from(sorted(node)))
            elif isinstance(node, list) and node:
                parent, key = node, draw(st.integers(0, len(node) - 1))
            else:
                break
            node = parent[key]
        if parent is None:
            return draw(JSON)
        if isinstance(parent, dict) and draw(st.booleans()):
            del parent[key]
        else:
            parent[key] = draw(JSON)
    return data


@st.composite
def policy_text(draw) -> str:
    keys = ["defense", "eps", "max_psnr", "max_auc", "min_accuracy", "max_tpr_at_fpr",
            "max_empirical_ratio", "require_coverage", "min_psnr", "bogus"]
    values = ['"dpdl"', '"*"', '"none"', "1.0", "0", "-1", "nan", "inf", "true", "false",
              "{fpr = 0.01, tpr = 0.05}", "{fpr = 0.01}", '"x"', "[1, 2]", "{}"]
    lines = []
    for _ in range(draw(st.integers(0, 3))):
        lines.append(draw(st.sampled_from(["[[bound]]", "[tolerance]", "[other]", "[[bound]]"])))
        for _ in range(draw(st.integers(0, 3))):
            key = draw(st.sampled_from([*keys, "auc", "psnr"]))
            lines.append(f"{key} = {draw(st.sampled_from(values))}")
    return "\n".join(lines) + "\n"


def _fuzz_files(sandbox: Path, results: Any, policy: str, command: str) -> None:
    folder = sandbox / "damaged"
    folder.mkdir(exist_ok=True)
    (folder / "results.json").write_text(json.dumps(results, allow_nan=True))
    (folder / "policy.toml").write_text(policy)
    if command == "check":
        args = ["check", "damaged/results.json", "--policy", "damaged/policy.toml",
                "--baseline", "good.json", "--junit", "good.html"]
    else:
        args = ["report", "damaged/results.json", "good.json", "-o", "good.html", "--overwrite"]
    before = (sandbox / "good.html").read_bytes()
    code = _call(sandbox, args, ok=(0, 1, 2))
    if code == 2:
        assert (sandbox / "good.html").read_bytes() == before


@FAST
@given(results=damaged(), policy=policy_text(), command=st.sampled_from(["check", "report"]))
def test_damaged_results_and_policies(sandbox, results, policy, command):
    _fuzz_files(sandbox, results, policy, command)


@pytest.mark.slow
@LONG
@given(results=damaged(), policy=policy_text(), command=st.sampled_from(["check", "report"]))
def test_damaged_results_and_policies_long(sandbox, results, policy, command):
    _fuzz_files(sandbox, results, policy, command)
