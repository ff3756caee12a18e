"""The audit presets of `privbench attack` (`--preset`): what each sweeps and at which run settings.

Plain data with no heavy import (no torch), so that `privbench attack --help` can show the
presets' run values without loading the sweep; `privbench.commands.sweep` reads them from here.
"""

from __future__ import annotations

from typing import Any

# The grids `privbench tune --all` searches for each default defense, at every cell of a preset
# (each ε of its grid, its paper setting and reading): the step size (lr, or ADP-VRSGP's
# lr_constant, DeFL-VP's sign step and local step) and the clip bound of the private ones; the
# step size and momentum (where the defense has one) of the non-private baselines.
TUNE_GRIDS: dict[str, tuple[str, ...]] = {
    "sgp": ("lr=0.02,0.05,0.1,0.2,0.5,1", "momentum=0,0.5,0.9"),
    "d_psgd": ("lr=0.05,0.1,0.2,0.5,1,2,5",),
    "adp_vrsgp": ("lr_constant=0.1,0.3,1,3,10,30", "clip=0.1,0.3,1,3,10"),
    "defl_vp": ("eta_sign=0.001,0.003,0.01,0.03,0.1", "local_lr=0.01,0.03,0.1,0.3"),
    "dyn_d2p": ("lr=0.01,0.02,0.05,0.1,0.2,0.5,1,2", "clip_0=1,2,4,8,16,32"),
    "partpsp": ("lr=0.01,0.05,0.2,0.5,1", "clip=0.01,0.1,1,10,100"),
    "dpdl": ("lr=0.005,0.01,0.02,0.05,0.1,0.2,0.5", "clip=0.1,0.3,1,3,10,30"),
}

PRESETS: dict[str, dict[str, Any]] = {
    # A few minutes on 2 CPU cores: small graph, short training, fast attack settings.
    "quick": {
        "run": {"model": "mlp", "nodes": 6, "rounds": 60, "eval_every": 60, "batch_size": 16,
                "lr": 0.2, "delta": 1e-5, "holdout": 0.5},
        "eps": (1.0, 8.0),
        "attacks": ("idlg", "geiping", "mia_threshold", "mia_message", "canary", "mechanism"),
        "attack_config": {"geiping": {"steps": 300}, "idlg": {"adam_steps": 300}},
        "inversion_rounds": (1,),
        "reference_models": 4,
        # The victim's released gradient of a batch of 1 and of 4 (the regime where inversion
        # recovers recognisable images), each from the same defense at the same ε and length.
        "inversion_batch_sizes": (1, 4),
        # Membership candidates of every node pooled (holdout 0.5: 120 members and 120
        # non-members per node on digits, 720 + 720 over 6 nodes, enough for TPR at 1% FPR).
        "pool_victims": True,
        "paper_settings": {"partpsp": {"b": 5.0}},
        # DeFL-VP as its paper reads ε (per coordinate per round, Alg. 3) at each ε of the grid,
        # beside its calibrated cells (whole run), with the ε that reading composes to.
        "paper_readings": {"defl_vp": {"eps_mode": "per_coordinate"}},
    },
    # Closer to the papers' scale: longer training, the full attack set, a wider ε grid.
    "paper": {
        "run": {"model": "mlp", "nodes": 10, "rounds": 500, "eval_every": 100, "batch_size": 32,
                "lr": 0.2, "delta": 1e-5},
        "eps": (0.5, 1.0, 2.0, 4.0, 8.0),
        "attacks": ("dlg", "idlg", "geiping", "mia_threshold", "lira", "rmia", "mia_message",
                    "canary", "mechanism"),
        "attack_config": {},
        "inversion_rounds": (1, 10),
        "reference_models": 16,
        "inversion_batch_sizes": (1, 4),
        "pool_victims": True,
        "paper_settings": {"partpsp": {"b": 5.0}},
        "paper_readings": {"defl_vp": {"eps_mode": "per_coordinate"}},
    },
}
