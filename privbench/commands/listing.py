"""`privbench list`: every registry, one line per entry.

The built-in entries are printed from `privbench.commands.catalog` (plain data: `list` answers
at once, without importing torch, the defenses or the attacks); a test holds that table to the
registries. With $PRIVBENCH_PLUGINS set the plugins are loaded and the registries themselves
are printed, since a user's entries are in no table.
"""

from __future__ import annotations

import argparse
import os
import textwrap

from privbench.commands.catalog import CATALOG, Entry

PLURALS = ("defenses", "attacks", "datasets", "models", "topologies")
COLUMNS = 100  # a description longer than the terminal line wraps under itself
"""The registries in the order `list` prints them."""


def cmd_list(args: argparse.Namespace) -> int:
    """`privbench list`: every registry, one entry each with its description (the first
    sentence of its docstring); each defense marked DP (differentially private) or not."""
    from privbench.plugins import PLUGINS_ENV

    entries = registry_entries() if os.environ.get(PLUGINS_ENV, "").strip() else CATALOG
    print(format_entries(entries))
    return 0


def registry_entries() -> dict[str, tuple[Entry, ...]]:
    """Every registry's entries, with the plugins loaded: (name, private or None for a registry
    other than the defenses', description) per entry, by registry."""
    from privbench import registry
    from privbench.plugins import load_plugins

    load_plugins()
    regs = {r.plural: r for r in (registry.DEFENSES, registry.ATTACKS, registry.DATASETS,
                                  registry.MODELS, registry.TOPOLOGIES)}
    return {plural: tuple(
        (name, bool(regs[plural].get(name).private) if plural == "defenses" else None,
         registry.describe(name, regs[plural].get(name)))
        for name in regs[plural].names()) for plural in PLURALS}


def format_entries(entries: dict[str, tuple[Entry, ...]]) -> str:
    """The text of `privbench list`: per registry a heading with its count, then one line per
    entry (the defenses' with the DP mark)."""
    from privbench.report.text import plain  # no torch: math as Unicode, as every output

    lines = []
    for plural in PLURALS:
        rows = entries.get(plural, ())
        key = " (DP: differentially private, -: not private)" if plural == "defenses" else ""
        lines.append(f"{plural}: {len(rows) or '(none)'}{key}")
        width = max((len(name) for name, _, _ in rows), default=0)
        for name, private, text in rows:
            mark = "" if private is None else f"{'DP' if private else '-':<4}"
            head = f"  {name:<{width}}  {mark}"
            lines += textwrap.wrap(plain(text), COLUMNS, initial_indent=head,
                                   subsequent_indent=" " * len(head))
    return "\n".join(lines)
