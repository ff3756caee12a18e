"""Attacks on exchanged messages (inversion, label inference, membership inference, audits).

Every module in this package registers itself in `privbench.registry.ATTACKS` under its file
stem; importing the package imports them all. Attacks see observations, never ground truth.
"""

import importlib
import pkgutil

for _mod in pkgutil.iter_modules(__path__):
    if not _mod.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_mod.name}")
