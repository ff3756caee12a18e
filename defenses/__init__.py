"""Decentralized learning algorithms (DP defenses and non-private baselines) as trainers.

Every module in this package registers its trainer in `privbench.registry.DEFENSES` under its
file stem; importing the package imports them all.
"""

from privbench.plugins import import_modules

import_modules(__name__, __path__)
