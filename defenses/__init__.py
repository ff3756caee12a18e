"""Decentralized learning algorithms (DP defenses and non-private baselines) as trainers.

Every module in this package registers its trainer in `privbench.registry.DEFENSES` under its
file stem; importing the package imports them all.
"""

import importlib
import pkgutil

for _mod in pkgutil.iter_modules(__path__):
    if not _mod.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_mod.name}")
