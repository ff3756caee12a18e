"""`privbench list`: every registry, one line per entry."""

from __future__ import annotations

import argparse


def cmd_list(args: argparse.Namespace) -> int:
    """`privbench list`: every registry, one line per entry with its description (the first
    line of its docstring); each defense marked DP (differentially private) or not."""
    from privbench import registry
    from privbench.plugins import load_plugins

    load_plugins()
    for reg in (registry.DEFENSES, registry.ATTACKS, registry.DATASETS, registry.MODELS,
                registry.TOPOLOGIES):
        names = reg.names()
        marked = reg is registry.DEFENSES
        key = " (DP: differentially private, -: not private)" if marked else ""
        print(f"{reg.plural}: {len(names) or '(none)'}{key}")
        width = max(map(len, names), default=0)
        for name in names:
            obj = reg.get(name)
            mark = f"{'DP' if obj.private else '-':<4}" if marked else ""
            print(f"  {name:<{width}}  {mark}{registry.describe(name, obj)}")
    return 0
