"""Attacks on exchanged messages (inversion, label inference, membership inference, audits).

Every module in this package registers itself in `privbench.registry.ATTACKS` under its file
stem; importing the package imports them all. Attacks see observations, never ground truth.
"""

from privbench.plugins import import_modules

import_modules(__name__, __path__)
