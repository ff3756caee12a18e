"""The import graph holds the layers of the package as a rule about folders: no import circles,
and every import goes down the data flow (a run is built and simulated, an attacker observes it,
attacks are graded, results are recorded and presented, the pipeline runs an audit's cells,
verbs parse, call and print).

A module's folder is its sub-package of `privbench` (`privbench.engine`, ...), `privbench` itself
for the modules at its top, or the plugin package (`attacks`, `defenses`). `LAYERS` orders the
folders, lowest first; a module imports modules of its own folder or of a lower layer, never a
folder of its own layer or a higher one. The top level is the foundation, except its doors: a
top-level module that imports from above the foundation (the CLI, `python -m`, the test helpers,
a re-export kept for one release) is a door, so is one that imports a door (`__main__`), and
no module but another door imports a door.

The graph is read from the source (every `import` statement, module-level or inside a function,
since a deferred import is still a dependency), not from what a test run happened to import.
A private name (a module or name starting with "_") is imported inside its own package only, up
to `MAX_PRIVATE_IMPORTS` exceptions (`private_imports` states how they are counted).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("privbench", "attacks", "defenses")
LAYERS: tuple[frozenset[str], ...] = tuple(frozenset(layer) for layer in (
    {"privbench"},  # foundation: errors, config, registry, plugins, seeding, device, models, ...
    {"privbench.data", "privbench.metrics", "privbench.accounting"},
    {"privbench.results"},
    {"privbench.engine"},
    {"privbench.threat"},
    {"privbench.audit"},
    {"privbench.report"},
    # the audit pipeline reaches attacks and defenses through the registries alone
    {"privbench.pipeline"},
    {"attacks", "defenses", "privbench.reproduce"},
    {"privbench.commands"},
))


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the three packages under `root`."""
    out = {}
    for pkg in PACKAGES:
        for f in (root / pkg).rglob("*.py"):
            parts = f.relative_to(root).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    """The known module `name` refers to (a name inside a module resolves to the module)."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def imported_names(path: Path) -> list[str]:
    """The dotted names a module's import statements import, module-level or inside a function
    (`import a.b` -> a.b, `from a.b import c` -> a.b.c), one per imported name."""
    out: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out += [f"{node.module}.{a.name}" for a in node.names]
    return out


def import_graph(known: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the modules of the three packages it imports (`from pkg import sub` imports
    the submodule when `sub` is one, else the module `pkg`)."""
    return {mod: {r for n in imported_names(path) if (r := _resolve(n, known)) and r != mod}
            for mod, path in known.items()}


MAX_PRIVATE_IMPORTS = 10


def _private(part: str) -> bool:
    return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))


def _package(module: str, known: dict[str, Path]) -> str:
    """The package whose folder holds the module's file (a package's `__init__`: itself)."""
    return module if known[module].name == "__init__.py" else module.rpartition(".")[0]


def _inside(mod: str, owner: str, private: str, known: dict[str, Path]) -> bool:
    """Whether `mod` may import `owner`'s private part `private`: from the owner's own folder,
    or, for a private module of a package, from anywhere under that package (a sub-package such
    as `defenses/dpdl/` shares `defenses._graph` with the modules beside it)."""
    if _package(owner, known) == _package(mod, known):
        return True
    is_module = known[owner].name == "__init__.py" and f"{owner}.{private}" in known
    return is_module and mod.startswith(owner + ".")


def private_imports(known: dict[str, Path]) -> list[str]:
    """Imports of a private name across packages ("importer -> name").

    Counting rule: every name an import statement imports counts once (module-level or inside
    a function, `imported_names`). It is private when one of its dotted parts starts with "_"
    (a private module such as `defenses._graph`, or a private name such as
    `privbench.progress._x`; dunder names such as `__version__` are public). The first private
    part belongs to the module or package just before it (`defenses` for `defenses._graph.f`,
    `privbench.progress` for `privbench.progress._x`); the import counts when the importing
    module is not in that owner's package (`_package`; a private module of a package is shared
    with the package's sub-packages too, `_inside`): a private helper is shared inside its own
    package only, so `defenses/dpdl/` importing `defenses._graph` does not count and
    `privbench/commands/account.py` importing it does. Names outside the three packages
    (torch, the standard library) are not counted.
    """
    out = []
    for mod, path in sorted(known.items()):
        for name in imported_names(path):
            parts = name.split(".")
            first = next((k for k, part in enumerate(parts) if _private(part)), None)
            if first is None or _resolve(name, known) in (None, mod):
                continue
            owner = _resolve(".".join(parts[:first]), known)
            if owner is not None and not _inside(mod, owner, parts[first], known):
                out.append(f"{mod} -> {name}")
    return out


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


def folder(module: str, known: dict[str, Path]) -> str:
    """The folder a module belongs to: its first-level sub-package of privbench, privbench for
    the modules at its top, or its plugin package."""
    parts = module.split(".")
    if parts[0] != "privbench":
        return parts[0]
    sub = ".".join(parts[:2])
    return sub if len(parts) > 1 and known.get(sub, Path()).name == "__init__.py" else "privbench"


def layer_breaches(graph: dict[str, set[str]], known: dict[str, Path],
                   layers: tuple[frozenset[str], ...] = LAYERS) -> list[str]:
    """Imports that go up or sideways between folders ("a -> b (why)"), doors imported by a
    non-door, and folders no layer names."""
    rank = {f: i for i, layer in enumerate(layers) for f in layer}
    top = rank["privbench"]
    doors = {m for m, deps in graph.items() if folder(m, known) == "privbench"
             and any(rank.get(folder(d, known), top) > top for d in deps)}
    while True:  # a top-level module that imports a door opens onto the same rooms
        more = {m for m, deps in graph.items() if folder(m, known) == "privbench"
                and m not in doors and deps & doors}
        if not more:
            break
        doors |= more
    out = []
    for mod, deps in sorted(graph.items()):
        here = folder(mod, known)
        if here not in rank:
            out.append(f"{mod}: its folder {here} is in no layer")
            continue
        for dep in sorted(deps):
            there = folder(dep, known)
            if dep in doors and mod not in doors:
                out.append(f"{mod} -> {dep} (a door of the package)")
            elif mod in doors or there == here or there not in rank:
                continue
            elif rank[there] > rank[here]:
                out.append(f"{mod} -> {dep} (upward: {there} is above {here})")
            elif rank[there] == rank[here]:
                out.append(f"{mod} -> {dep} (sideways: {here} and {there} share a layer)")
    return out


def _planted(edges: dict[str, set[str]]) -> tuple[dict[str, set[str]], dict[str, Path]]:
    """A small package of the real folder shape: each module a file, each sub-package with its
    __init__, as `modules()` would find them."""
    names = set(edges) | {d for ds in edges.values() for d in ds}
    known = {m: Path(m.replace(".", "/") + ".py") for m in names}
    for m in names:
        parts = m.split(".")
        if parts[0] == "privbench" and len(parts) > 2:
            known[".".join(parts[:2])] = Path("/".join(parts[:2]) + "/__init__.py")
    graph = {m: set() for m in known}
    for m, ds in edges.items():
        graph[m] |= ds
    return graph, known


def test_the_checks_catch_a_circle() -> None:
    graph, _ = _planted({"privbench.engine.a": {"privbench.engine.b"},
                         "privbench.engine.b": {"privbench.engine.c"},
                         "privbench.engine.c": {"privbench.engine.a"}})
    assert circles(graph) == [["privbench.engine.a", "privbench.engine.b", "privbench.engine.c"]]


def test_the_checks_catch_an_upward_a_sideways_and_a_door_import() -> None:
    graph, known = _planted({
        # upward, and a foundation module that became a door
        "privbench.engine.loop": {"privbench.audit.dispatch", "privbench.config",
                                  "privbench.seeding"},
        "privbench.audit.dispatch": {"privbench.engine.loop", "privbench.threat.observation"},
        "privbench.config": {"privbench.errors"},
        "attacks.dlg": {"defenses.sgp", "privbench.audit.dispatch"},  # sideways
        "privbench.cli": {"privbench.commands.attack"},  # a door
        "privbench.seeding": {"privbench.cli"},  # a foundation module importing a door
        "privbench.metrics.roc": {"privbench.results.store"},  # upward from a low folder
    })
    assert layer_breaches(graph, known) == [
        "attacks.dlg -> defenses.sgp (sideways: attacks and defenses share a layer)",
        "privbench.engine.loop -> privbench.audit.dispatch (upward: privbench.audit is above "
        "privbench.engine)",
        "privbench.engine.loop -> privbench.seeding (a door of the package)",
        "privbench.metrics.roc -> privbench.results.store (upward: privbench.results is above "
        "privbench.metrics)",
    ]
    assert layer_breaches(graph, known, (frozenset({"privbench"}),))[0].endswith("in no layer")


def test_the_graph_reads_every_import() -> None:
    known = modules()
    graph = import_graph(known)
    assert len(known) > 60 and "privbench.report.verdicts" in known
    # a function-level import counts (the attack dispatch imports membership inside a function)
    assert "privbench.audit.membership" in graph["privbench.audit.dispatch"]
    assert "privbench.report.bounds" in graph["privbench.report.verdicts"]  # from pkg import sub
    assert folder("privbench.engine.loop", known) == "privbench.engine"
    assert folder("privbench.reproduce.papers.dpdl", known) == "privbench.reproduce"
    assert folder("privbench.config", known) == "privbench"


def test_the_checks_catch_a_circle_and_an_upward_import_planted_in_the_real_graph() -> None:
    known = modules()
    graph = {m: set(deps) for m, deps in import_graph(known).items()}  # a copy to plant in
    graph["privbench.engine.loop"].add("privbench.pipeline.sweep")  # upward, and a circle
    assert any({"privbench.engine.loop", "privbench.pipeline.sweep"} <= set(c)
               for c in circles(graph))
    assert ("privbench.engine.loop -> privbench.pipeline.sweep (upward: privbench.pipeline is "
            "above privbench.engine)") in layer_breaches(graph, known)
    assert circles(import_graph(known)) == [] and layer_breaches(import_graph(known), known) == []


def test_private_imports_are_counted_across_packages_only(tmp_path: Path) -> None:
    files = {
        "defenses/__init__.py": "",
        "defenses/_graph.py": "def periods(): ...\n",
        "defenses/dpdl.py": "from defenses._graph import periods\n",  # inside its package
        "privbench/__init__.py": "__version__ = '1'\n",
        "privbench/progress.py": "def _text(): ...\n",
        "privbench/commands/__init__.py": "",
        "privbench/commands/account.py": (
            "from privbench import __version__\n"  # a dunder is public
            "def plan():\n"
            "    from defenses._graph import periods\n"  # inside a function still counts
            "    import privbench.progress\n"
            "    from privbench.progress import _text\n"),
        "attacks/__init__.py": "",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert private_imports(modules(tmp_path)) == [
        "privbench.commands.account -> defenses._graph.periods",
        "privbench.commands.account -> privbench.progress._text",
    ]


def test_private_names_are_imported_inside_their_package() -> None:
    found = private_imports(modules())
    assert len(found) <= MAX_PRIVATE_IMPORTS, "\n".join(found)


def test_no_import_circles() -> None:
    assert circles(import_graph(modules())) == []


def test_every_import_goes_down_the_layers() -> None:
    known = modules()
    assert layer_breaches(import_graph(known), known) == []
