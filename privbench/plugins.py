"""Loading plugins: the built-in defenses and attacks and the modules named in
$PRIVBENCH_PLUGINS, imported by name so that they register themselves.

The built-in `defenses` and `attacks` packages are plugins like a user's own: the core names
them, never imports them, so that no module below the commands depends on them.
"""

from __future__ import annotations

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
    import importlib
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
