"""Each type is named once across the packages, and the untyped `Json` stays at the file boundary.

Rule (type names): a class, or a type alias at module level (a capitalised name bound to a
subscripted type, a union, or annotated `TypeAlias`), is defined in one module of `privbench`,
`attacks` and `defenses`; a second module that needs it imports it. Two types of one name (two
`MessageKind`s, two `Fingerprint`s) read alike in a signature and are not the same.

Rule (`Json`): the name `Json` (the alias of a JSON value, `Any`) appears at most `JSON_LIMIT`
times in the three packages, counted as identifier tokens in the source: records, their
readers and the audits carry typed fields; only the file boundary (reading and writing a
results file) handles untyped JSON.
"""

from __future__ import annotations

import ast
import io
import tokenize
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("privbench", "attacks", "defenses")


def sources() -> list[Path]:
    return sorted(f for pkg in PACKAGES for f in (ROOT / pkg).rglob("*.py"))


def _is_alias(node: ast.stmt) -> str | None:
    """The name a module-level statement binds as a type alias, if it is one."""
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return node.target.id if "TypeAlias" in ast.unparse(node.annotation) else None
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and \
            isinstance(node.targets[0], ast.Name):
        name, value = node.targets[0].id, node.value
        typed = isinstance(value, ast.Subscript) or (
            isinstance(value, ast.BinOp) and isinstance(value.op, ast.BitOr))
        if name[:1].isupper() and not name.isupper() and typed:
            return name
    return None


def type_definitions() -> dict[str, list[str]]:
    """Type name -> the modules that define it (classes and module-level type aliases)."""
    found: dict[str, list[str]] = defaultdict(list)
    for f in sources():
        for node in ast.parse(f.read_text(), str(f)).body:
            name = node.name if isinstance(node, ast.ClassDef) else _is_alias(node)
            if name:
                found[name].append(str(f.relative_to(ROOT)))
    return found


def test_each_type_name_is_defined_once() -> None:
    twice = {name: where for name, where in type_definitions().items() if len(where) > 1}
    assert twice == {}


def test_the_rule_reads_module_level_aliases() -> None:
    alias = ast.parse("Shape = tuple[int, ...]\nLIMIT = 3\nLabel = str | None\n").body
    assert [_is_alias(n) for n in alias] == ["Shape", None, "Label"]


JSON_LIMIT = 15


def json_uses() -> dict[str, int]:
    """Module -> how many `Json` identifier tokens its source holds."""
    out = {}
    for f in sources():
        toks = tokenize.generate_tokens(io.StringIO(f.read_text()).readline)
        n = sum(1 for t in toks if t.type == tokenize.NAME and t.string == "Json")
        if n:
            out[str(f.relative_to(ROOT))] = n
    return out


def test_json_stays_at_the_file_boundary() -> None:
    uses = json_uses()
    assert sum(uses.values()) <= JSON_LIMIT, uses
