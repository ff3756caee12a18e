"""Tests sit at the mirrored path of the module they test: privbench/audit/mechanism.py ->
tests/audit/test_mechanism.py, attacks/lira.py -> tests/attacks/test_lira.py, privbench/cli.py ->
tests/test_cli.py (a private module's leading underscore dropped: defenses/_graph.py ->
tests/defenses/test_graph.py). Where one test covers several modules, a line of tests/INDEX.md
names it. Both must name the module they stand for (import it or give its dotted path; an
attack or defense may be run by its registry key instead), and together they cover at least
80 % of the modules of privbench/, attacks/ and defenses/ (package `__init__` and `__main__`
files aside)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("privbench", "attacks", "defenses")
INDEX = ROOT / "tests" / "INDEX.md"
ENTRY = re.compile(r"^- `(?P<module>[\w/]+\.py)`: `(?P<test>[\w/]+\.py)`$")
MIN_SHARE = 0.80


def modules(root: Path = ROOT) -> list[str]:
    """Every module of the three packages, as a path relative to `root`."""
    return sorted(p.relative_to(root).as_posix() for pkg in PACKAGES
                  for p in (root / pkg).rglob("*.py")
                  if p.stem not in ("__init__", "__main__"))


def mirrored(module: str) -> str:
    """The test path of `module`: its folders below `privbench/` (or its package for attacks
    and defenses) under tests/, its file name prefixed `test_` without a leading underscore."""
    parts = Path(module).parts
    folders = parts[1:-1] if parts[0] == "privbench" else parts[:-1]
    return Path("tests", *folders, "test_" + Path(module).stem.lstrip("_") + ".py").as_posix()


def dotted(module: str) -> str:
    """`privbench/audit/mechanism.py` -> `privbench.audit.mechanism`."""
    return module.removesuffix(".py").replace("/", ".")


def imported(test: Path) -> set[str]:
    """Every module a test file imports, at any depth (`from a import b` counts `a` and
    `a.b`, since b may be a module)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(test.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def strings(test: Path) -> set[str]:
    """Every string constant of a test file (registry keys such as "dp_sgp")."""
    return {node.value for node in ast.walk(ast.parse(test.read_text()))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)}


def names(test: Path, module: str) -> bool:
    """Whether `test` imports `module`, gives its dotted path, or, for a public attack or
    defense (the registry key is the file's stem), passes its key as a string."""
    name = dotted(module)
    if name in imported(test) or re.search(rf"\b{re.escape(name)}\b", test.read_text()):
        return True
    plugin = module.split("/", 1)[0] in ("attacks", "defenses") and not module.count("/_")
    return plugin and Path(module).stem in strings(test)


def index_entries(text: str) -> dict[str, str]:
    """The module -> test lines of tests/INDEX.md; a list line of another shape is an error."""
    entries: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.startswith("- "):
            continue
        match = ENTRY.match(line)
        if match is None:
            raise ValueError(f"tests/INDEX.md line {number}: expected - `module.py`: `test.py`")
        if match["module"] in entries:
            raise ValueError(f"tests/INDEX.md line {number}: {match['module']} listed twice")
        entries[match["module"]] = match["test"]
    return entries


def problems(root: Path, entries: dict[str, str]) -> list[str]:
    """What is wrong with the mirrored tests and the index of `root`: an index line naming a
    missing module or test file, a module indexed although it has a mirrored test, a test that
    does not name the module it stands for."""
    found = set(modules(root))
    wrong = []
    for module, test in sorted(entries.items()):
        if module not in found:
            wrong.append(f"tests/INDEX.md names {module}, which does not exist")
        elif (root / mirrored(module)).exists():
            wrong.append(f"tests/INDEX.md names {module}, which has {mirrored(module)}")
        elif not (root / test).is_file():
            wrong.append(f"tests/INDEX.md names {test} for {module}: no such test file")
        elif not names(root / test, module):
            wrong.append(f"{test} (tests/INDEX.md) does not name {dotted(module)}")
    for module in sorted(found):
        test = root / mirrored(module)
        if test.exists() and not names(test, module):
            wrong.append(f"{mirrored(module)} does not name {dotted(module)}")
    return wrong


def coverage(root: Path, entries: dict[str, str]) -> tuple[list[str], list[str]]:
    """(modules with a mirrored test or an index line, modules with neither)."""
    covered, bare = [], []
    for module in modules(root):
        has = (root / mirrored(module)).exists() or module in entries
        (covered if has else bare).append(module)
    return covered, bare


def test_every_index_line_and_mirrored_test_names_a_module_it_imports() -> None:
    assert problems(ROOT, index_entries(INDEX.read_text())) == []


def test_at_least_80_percent_of_the_modules_have_a_test() -> None:
    covered, bare = coverage(ROOT, index_entries(INDEX.read_text()))
    share = len(covered) / (len(covered) + len(bare))
    assert share >= MIN_SHARE, f"{share:.0%} of the modules have a test; none: {bare}"


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_the_guard_fails_on_a_stale_index_line_or_a_test_that_imports_nothing(tmp_path) -> None:
    root = _tree(tmp_path, {
        "privbench/a.py": "", "privbench/sub/b.py": "", "defenses/_c.py": "", "defenses/d.py": "",
        "tests/defenses/test_d.py": 'build(run, "d")\n',
        "tests/test_a.py": "import json\n",
        "tests/sub/test_all.py": "from privbench.sub import b\nimport defenses._c\n",
    })
    entries = {"privbench/sub/b.py": "tests/sub/test_all.py",
               "defenses/_c.py": "tests/sub/test_all.py"}
    assert problems(root, entries) == ["tests/test_a.py does not name privbench.a"]
    (root / "tests/test_a.py").write_text("from privbench.a import f\n")
    assert problems(root, entries) == []
    assert coverage(root, entries) == (["defenses/_c.py", "defenses/d.py", "privbench/a.py",
                                        "privbench/sub/b.py"], [])
    (root / "tests/test_a.py").write_text('"""privbench.ab, not the module; "a" is no key."""\n')
    assert problems(root, entries) == ["tests/test_a.py does not name privbench.a"]
    (root / "tests/test_a.py").write_text('"""What privbench.a does."""\n')
    assert problems(root, entries) == []
    assert problems(root, {**entries, "privbench/gone.py": "tests/test_a.py"}) == [
        "tests/INDEX.md names privbench/gone.py, which does not exist"]
    assert problems(root, {**entries, "privbench/a.py": "tests/test_a.py"}) == [
        "tests/INDEX.md names privbench/a.py, which has tests/test_a.py"]
    (root / "tests/sub/test_all.py").unlink()
    assert problems(root, entries) == [
        "tests/INDEX.md names tests/sub/test_all.py for defenses/_c.py: no such test file",
        "tests/INDEX.md names tests/sub/test_all.py for privbench/sub/b.py: no such test file"]
    covered, bare = coverage(root, {})
    assert (covered, bare) == (["defenses/d.py", "privbench/a.py"],
                               ["defenses/_c.py", "privbench/sub/b.py"])


def test_an_index_line_of_another_shape_is_an_error() -> None:
    assert index_entries("# title\n- `privbench/a.py`: `tests/test_x.py`\n") == {
        "privbench/a.py": "tests/test_x.py"}
    with pytest.raises(ValueError, match="line 1: expected"):
        index_entries("- privbench/a.py -> tests/test_x.py\n")
    with pytest.raises(ValueError, match="listed twice"):
        index_entries("- `privbench/a.py`: `tests/x.py`\n- `privbench/a.py`: `tests/y.py`\n")
