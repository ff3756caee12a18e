"""One way to say "not applicable": a computation raises `privbench.errors.NotApplicable` with
its reason, and only the functions that write a record turn it into the written form
(`"applicable": false` and `"reason"`, the format results files and their readers keep).

Rule: a dict literal with the key "applicable" is built only by the record writers named in
`WRITERS`; every other function of `privbench`, `attacks` and `defenses` returns its typed
measurement or raises."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from privbench.audit.mechanism import epsilon_record
from privbench.audit.mechanism_epsilon import PartlyMeasured
from privbench.errors import NotApplicable

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("privbench", "attacks", "defenses")
# (module, function): the mechanism report, its measured ε, and the leakage map's network DP
WRITERS = {("privbench/audit/mechanism.py", "audit_mechanism"),
           ("privbench/audit/mechanism.py", "epsilon_record"),
           ("privbench/audit/leakage.py", "_network")}


def _builds_applicable(node: ast.AST) -> bool:
    return isinstance(node, ast.Dict) and any(
        isinstance(k, ast.Constant) and k.value == "applicable" for k in node.keys)


def applicable_builders(root: Path = ROOT) -> set[tuple[str, str]]:
    """(module, enclosing function) of every dict literal keyed "applicable" under `root`'s
    packages ("<module>" at module level)."""
    found = set()
    for f in sorted(p for pkg in PACKAGES for p in (root / pkg).rglob("*.py")):
        rel = f.relative_to(root).as_posix()
        tree = ast.parse(f.read_text(), rel)
        funcs = [n for n in ast.walk(tree)
                 if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))]
        inner = {id(d): fn.name for fn in funcs if not isinstance(fn, ast.Lambda)
                 for d in ast.walk(fn) if _builds_applicable(d)}
        found |= {(rel, inner.get(id(d), "<module>")) for d in ast.walk(tree)
                  if _builds_applicable(d)}
    return found


def test_only_the_record_writers_build_an_applicable_dict() -> None:
    assert applicable_builders() - WRITERS == set()


def test_the_scan_finds_a_builder_outside_the_writers(tmp_path) -> None:
    (tmp_path / "privbench").mkdir()
    (tmp_path / "privbench" / "m.py").write_text(
        "def f():\n    return {'applicable': False, 'reason': 'x'}\n")
    assert applicable_builders(tmp_path) == {("privbench/m.py", "f")}


def _raises(why: NotApplicable):
    def measure():
        raise why
    return measure


def test_the_writer_records_the_reason_and_what_was_measured_on_the_way() -> None:
    assert epsilon_record(_raises(NotApplicable("no claim"))) == (
        {"applicable": False, "reason": "no claim"}, None)
    rec, reading = epsilon_record(_raises(PartlyMeasured("diverged", {"rounds": []})))
    assert rec == {"applicable": False, "rounds": [], "reason": "diverged"} and reading is None
    rec, reading = epsilon_record(lambda: {"node": 0, "epsilon": 2.0, "z_ratio": 0.5,
                                           "z_ratio_interval": [0.25, 1.0]})
    assert rec["applicable"] and rec["epsilon"] == 2.0
    assert reading is not None and reading["measured_over_bound"] == pytest.approx(2.0)


def test_any_other_error_of_the_measurement_is_not_taken_for_not_applicable() -> None:
    with pytest.raises(ZeroDivisionError):
        epsilon_record(lambda: {"node": 0, "epsilon": 1 / 0})
