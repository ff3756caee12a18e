"""The import graph holds DESIGN.md's layers: no import circles, and the core imports `attacks/`
and `defenses/` only from the composition layer (runner, sweep, CLI, benchmarks, plugin loader).

The graph is read from the source (every `import` statement, module-level or inside a function,
since a deferred import is still a dependency), not from what a test run happened to import.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("privbench", "attacks", "defenses")
COMPOSITION = frozenset({
    "privbench.registry",  # load_plugins: imports the plugin packages so they register
    "privbench.engine.runner", "privbench.commands.sweep", "privbench.commands.tuning",
    "privbench.cli", "privbench.commands.account", "privbench.__main__",
    "privbench.commands.bench", "privbench.commands.bench_rounds", "privbench.audit.compare_mlpm",
})


def modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the three packages."""
    out = {}
    for pkg in PACKAGES:
        for f in (ROOT / pkg).rglob("*.py"):
            parts = f.relative_to(ROOT).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    """The known module `name` refers to (a name inside a module resolves to the module)."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def import_graph(known: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the modules of the three packages it imports."""
    graph: dict[str, set[str]] = {m: set() for m in known}
    for mod, path in known.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                # `from pkg import sub` imports the submodule when `sub` is one
                names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in known
                         else node.module for a in node.names]
            else:
                continue
            graph[mod] |= {r for n in names if (r := _resolve(n, known)) and r != mod}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    x = stack.pop()
                    on.discard(x)
                    comp.append(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def layer_breaches(graph: dict[str, set[str]], composition: Iterable[str]) -> list[str]:
    """Imports that cross a layer: core -> attacks/defenses outside the composition layer, and
    attacks <-> defenses (the two plugin layers know only the core)."""
    allowed = set(composition)
    out = []
    for mod, deps in sorted(graph.items()):
        top = mod.split(".")[0]
        for dep in sorted(deps):
            dtop = dep.split(".")[0]
            core_breach = top == "privbench" and dtop != "privbench" and mod not in allowed
            if core_breach or {top, dtop} == {"attacks", "defenses"}:
                out.append(f"{mod} -> {dep}")
    return out


def test_the_checks_catch_a_circle_and_a_breach() -> None:
    # the checks must be able to fail: a planted circle and a planted core -> attacks import
    graph = {"privbench.a": {"privbench.b"}, "privbench.b": {"privbench.c"},
             "privbench.c": {"privbench.a", "attacks.x"}, "attacks.x": {"privbench.a"}}
    assert circles(graph) == [["attacks.x", "privbench.a", "privbench.b", "privbench.c"]]
    assert layer_breaches(graph, ()) == ["privbench.c -> attacks.x"]
    assert layer_breaches(graph, ("privbench.c",)) == []


def test_the_graph_reads_every_import() -> None:
    known = modules()
    graph = import_graph(known)
    assert len(known) > 60 and "privbench.report.verdicts" in known
    # a function-level import counts (sweep imports attacks._mia inside a function)
    assert "attacks._mia" in graph["privbench.commands.sweep"]
    assert "privbench.report.bounds" in graph["privbench.report.verdicts"]  # from pkg import sub


def test_no_import_circles() -> None:
    assert circles(import_graph(modules())) == []


def test_only_the_composition_layer_imports_attacks_and_defenses() -> None:
    graph = import_graph(modules())
    assert layer_breaches(graph, COMPOSITION) == []
    assert set(graph) >= COMPOSITION, sorted(COMPOSITION - set(graph))  # no stale names
