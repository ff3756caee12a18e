"""The audit pipeline: the grid of cells (defense x ε x paper setting), each cell trained and
attacked into its own files, the tuned values each cell looks up, resume, and the cells computed
side by side in worker processes. `privbench attack`, `privbench tune` and `privbench.testing`
call it; it reaches attacks and defenses only through their registries.

    from privbench.pipeline import Sweep, audit_config
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from privbench.plugins import lazy_names

# name -> the module of privbench.pipeline that defines it; imported on first use, so that the
# presets (plain data) load without torch
_WHERE = {"Sweep": "sweep", "audit_config": "sweep", "PRESETS": "presets",
          "TUNE_GRIDS": "presets", "apply_tuned": "tuning", "load_tuned": "tuning",
          "tuned_entries": "tuning"}
__all__ = ["PRESETS", "TUNE_GRIDS", "Sweep", "apply_tuned", "audit_config", "load_tuned",
           "tuned_entries"]
__getattr__ = lazy_names(__name__, _WHERE)


if TYPE_CHECKING:
    from privbench.pipeline.presets import PRESETS, TUNE_GRIDS
    from privbench.pipeline.sweep import Sweep, audit_config
    from privbench.pipeline.tuning import apply_tuned, load_tuned, tuned_entries
