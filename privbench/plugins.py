"""Loading modules by name: the plugins (the built-in defenses and attacks and the modules
named in $PRIVBENCH_PLUGINS, imported so that they register themselves), every module of a
plugin package, and a package's names imported on first use.

The built-in `defenses` and `attacks` packages are plugins like a user's own: the core names
them, never imports them, so that no module below the commands depends on them.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from privbench.errors import ConfigError

BUILTIN = ("defenses", "attacks")
"""The plugin packages that ship with privbench, imported before the user's."""

PLUGINS_ENV = "PRIVBENCH_PLUGINS"
"""Comma-separated importable module names loaded with the built-in defenses and attacks: a
user's own defense (README, "Extending") registers itself without editing privbench."""


def load_plugins() -> None:
    """Import `defenses`, `attacks` and the modules named in $PRIVBENCH_PLUGINS so that their
    modules register themselves.

    Called where a registry must be complete (building a run, the commands).

    Raises:
        ConfigError: a module named in $PRIVBENCH_PLUGINS cannot be imported.
    """
    import os

    for builtin in BUILTIN:
        importlib.import_module(builtin)
    for name in (s.strip() for s in os.environ.get(PLUGINS_ENV, "").split(",")):
        if not name:
            continue
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise ConfigError(f"${PLUGINS_ENV} names {name!r}, which cannot be imported "
                              f"({exc}); accepted: comma-separated module names on the "
                              "Python path") from None


def import_modules(package: str, path: Iterable[str]) -> None:
    """Import every module of `package` (its `__path__`) whose name does not start with "_"
    (those are its helpers, imported by the modules that use them)."""
    for mod in pkgutil.iter_modules(path):
        if not mod.name.startswith("_"):
            importlib.import_module(f"{package}.{mod.name}")


def lazy_names(package: str, where: Mapping[str, str]) -> Callable[[str], Any]:
    """The module `__getattr__` (PEP 562) of `package`: each name of `where` is imported from
    the module of `package` that `where` maps it to when it is first used, so that importing
    the package loads none of its heavy modules (torch, matplotlib)."""
    def lookup(name: str) -> Any:
        if name in where:
            return getattr(importlib.import_module(f"{package}.{where[name]}"), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return lookup
