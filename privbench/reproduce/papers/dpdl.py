"""DPDL, Table I (MNIST -> Fashion-MNIST): bipartite graph, N = 10, high heterogeneity
(paper Sec. VI-A and Table I).

Yuan et al., "DPDL: Towards Differential Privacy Preservation in Decentralized Stochastic Learning
on Non-IID Data". The paper's MNIST table, block H (the smaller Dirichlet a_dir = 0.1) on the
bipartite graph with N = 10 (CGA's two-hub "Bipar" weights: the paper does not define the graph), on
Fashion-MNIST, the closest dataset available offline (a stand-in for MNIST). Rows: DP-DPSGD
(A(DP)^2SGD, per-sample clipping and Gaussian noise on the local gradient), DP-CGA (cross-gradient
aggregation by CGA's quadratic program with batch-level clipping and Gaussian noise, Sec. VI-A),
MUFFLIATO (a local DP-SGD step, then K = 3 rounds of Chebyshev-accelerated gossip: 3,000 rounds for
the same 1,000 gradient steps and releases; `defenses/muffliato.py`) and DPDL; DP-NETFLEET is not
implemented. Non-private checks (is a gap the paper, the setting or this code?): DPDL with its noise
switched off (sigma = 0, clipping kept) and with no defence at all (sigma = 0, C = inf: the paper's
ND-CG, Sec. VI-D).

The paper's setting as read here (its values were lost with the typeset math): Dirichlet label skew
a_dir = 0.1, batch B = 32 (Poisson), lr eta = 0.01, C = 1, momentum beta = 0.9, calibration alpha =
1 (bipartite), T = 1,000, delta = 1e-5, epsilon in {1, 2, 4} (the paper's three budgets are lost).
The noise is set the paper's way (`calibrate_with="paper"`: the reading whose object the paper's
eqs. (39)-(55) analyse) for DPDL and DP-CGA; every line also carries the rigorous (strict) epsilon
of that noise. DP-DPSGD has one (rigorous) reading. Both papers' readings are loose (DP-CGA's by
orders of magnitude: its batch-level noise is read as if it protected one sample at the batch mean's
sensitivity), so DPDL and DP-CGA are also run "calibrated": noise set by the strict reading, the
epsilon a reader can rely on, and the claims are tested at both.

Step sizes, tuned on Fashion-MNIST at epsilon = 2 on a validation split of the members, seed 100
(`privbench tune`): DPDL lr over {0.003, 0.01, 0.03} -> 0.01, the default (validation 0.513,
0.617, 0.600); DP-DPSGD, which has no momentum, lr over {0.01, 0.03, 0.1, 0.3, 1} -> 0.1
(0.288, 0.532, 0.604, 0.503, 0.465; DPDL's 0.01 leaves it untrained); MUFFLIATO, also without
momentum, lr over {0.03, 0.1, 0.3, 1} -> 0.3 (0.535, 0.638, 0.660, 0.566). DP-CGA keeps DPDL's
(lr 0.01, momentum 0.9: the paper runs its baselines with the same hyper-parameters).

The paper's claim: DPDL above every baseline in every cell (by 2.3 to 15.5 points on MNIST).
"""

from __future__ import annotations

from privbench.reproduce.spec import REPRODUCTIONS, Method, Reproduction, Scale

_PAPER_NOISE = (("calibrate_with", "paper"),)
MUFFLIATO_LR = 0.3  # tuned at epsilon 2 on validation (module docstring)
MUFFLIATO_STEP_ROW = "MUFFLIATO lr 0.3"
DP_CGA_STEP_ROW = "DP-CGA lr 0.01"
# 3,000 rounds: its 1,000 DP-SGD steps, each followed by K - 1 = 2 more gossip rounds
_MUFFLIATO = dict(defense="muffliato", overrides=(("gossip_steps", 3),),
                  run=(("lr", MUFFLIATO_LR), ("rounds", 3000), ("eval_every", 3000)))
_SETTING = (("dataset", "fashion-mnist"), ("nodes", 10), ("topology", "two_hub"),
         ("partition", "dirichlet"), ("alpha", 0.1), ("batch_size", 32), ("lr", 0.01),
         ("rounds", 1000), ("delta", 1e-5), ("holdout", 0.0), ("eval_every", 1000),
         ("eval_subset", 0))

_METHODS = (
    Method("DPDL no defence", "dpdl", (("sigma", 0.0), ("clip", float("inf"))),
           private=False),
    Method("DPDL sigma=0", "dpdl", (("sigma", 0.0),), private=False),
    Method("DP-DPSGD", "dp_dpsgd", run=(("lr", 0.1),)),
    Method("MUFFLIATO", **_MUFFLIATO),
    # the headline's step-sensitivity row: MUFFLIATO at epsilon 4 with the runner-up of its
    # validation tune there (0.587 against lr 1's 0.598), its own step at epsilon 2
    Method(MUFFLIATO_STEP_ROW, **_MUFFLIATO, grid=(4.0,)),
    Method("DP-CGA", "dp_cga", _PAPER_NOISE),
    # the same check for DP-CGA at epsilon 4: its tune's runner-up there (0.595 against lr
    # 0.03's 0.632)
    Method(DP_CGA_STEP_ROW, "dp_cga", _PAPER_NOISE, run=(("lr", 0.01),), grid=(4.0,)),
    Method("DPDL", "dpdl", _PAPER_NOISE),
    Method("DP-CGA calibrated", "dp_cga"),
    Method("DPDL calibrated", "dpdl"),
)
# every row but the headline's step checks
_TABLE_ROWS = tuple(m.label for m in _METHODS
                    if m.label not in (MUFFLIATO_STEP_ROW, DP_CGA_STEP_ROW))

DPDL = REPRODUCTIONS.register("dpdl")(Reproduction(
    name="dpdl",
    title="DPDL Table I (block H, bipartite, N = 10) on Fashion-MNIST: test accuracy (%), "
          "delta = 1e-5",
    methods=_METHODS,
    eps=(1.0, 2.0, 4.0),
    paper=(  # MNIST, block H (a_dir = 0.1), bipartite N = 10
        ("DP-DPSGD", (83.5, 84.1, 83.4)),
        ("MUFFLIATO", (85.5, 86.6, 85.6)),
        ("DP-CGA", (88.0, 90.9, 91.3)),
        ("DPDL", (94.4, 95.3, 96.1)),
    ),
    orderings=(("DPDL", "DP-DPSGD"), ("DPDL", "DP-CGA"), ("DPDL", "MUFFLIATO"),
               ("DPDL", MUFFLIATO_STEP_ROW), ("DPDL", DP_CGA_STEP_ROW),
               ("DPDL calibrated", "DP-DPSGD"), ("DPDL calibrated", "DP-CGA calibrated"),
               ("DPDL calibrated", "MUFFLIATO")),
    scales=(
        Scale("reduced", (*_SETTING, ("model", "mlp")), seeds=(0, 1, 2), rows=_TABLE_ROWS,
              note="MLP (784-128-64-10) instead of LeNet-5, 3 seeds instead of 20, "
                   "Fashion-MNIST instead of MNIST (not available offline)"),
        Scale("paper", (*_SETTING, ("model", "lenet5")), seeds=tuple(range(20)), rows=_TABLE_ROWS,
              note="the paper's setting (LeNet-5, 20 runs) on Fashion-MNIST"),
        Scale("headline", (*_SETTING, ("model", "lenet5")), seeds=tuple(range(20)),
              rows=("DPDL no defence", "DP-DPSGD", "MUFFLIATO", MUFFLIATO_STEP_ROW, "DP-CGA",
                    DP_CGA_STEP_ROW, "DPDL", "DP-CGA calibrated", "DPDL calibrated"),
              grid=(1.0, 2.0, 4.0),
              # tuned for LeNet-5 on validation at each epsilon, seed 100 (write-up); at
              # epsilon 2 and 4 DPDL calibrated's tune chose the default 0.01, the Method's own
              # lr, and MUFFLIATO's at epsilon 2 its MLP step (MUFFLIATO_LR)
              method_run=(("DP-DPSGD", (("lr", 0.3),)), ("DPDL", (("lr", 0.03),)),
                          ("DP-CGA", (("lr", 0.003),)),
                          ("DP-CGA calibrated", (("lr", 1e-4),))),
              grid_run=(("DP-DPSGD", 1.0, (("lr", 0.1),)), ("DPDL", 1.0, (("lr", 0.01),)),
                        ("DP-CGA", 4.0, (("lr", 0.03),)),
                        ("DP-CGA calibrated", 1.0, (("lr", 1e-5),)),
                        ("DP-CGA calibrated", 4.0, (("lr", 0.3),)),
                        ("DPDL calibrated", 1.0, (("lr", 0.003),)),
                        ("MUFFLIATO", 1.0, (("lr", 0.1),)), ("MUFFLIATO", 4.0, (("lr", 1.0),))),
              note="the paper's setting (LeNet-5, 1,000 rounds) on Fashion-MNIST for the "
                   "headline rows only (DPDL and DP-CGA, at the paper's reading and "
                   "calibrated, against DP-DPSGD and MUFFLIATO, and the non-private DPDL) at "
                   "epsilon = 1, 2 and 4, 20 seeds (the paper's 20 "
                   "runs; a LeNet-5 DPDL run is about 5 min on one CPU thread); every private "
                   "row's step tuned for LeNet-5 at each epsilon on a validation split "
                   "(DP-DPSGD 0.1 / 0.3 / 0.3, MUFFLIATO 0.1 / 0.3 / 1, DP-CGA 0.003 / 0.003 / "
                   "0.03, DP-CGA calibrated 1e-5 / 1e-4 / 0.3, DPDL 0.01 / 0.03 / 0.03, DPDL "
                   "calibrated 0.003 / 0.01 / 0.01 at "
                   "epsilon 1 / 2 / 4), and MUFFLIATO also at epsilon 4 with its tune's "
                   "runner-up there, 0.3 (0.587 on validation against lr 1's 0.598), and DP-CGA "
                   "at epsilon 4 with its tune's runner-up, 0.01 (0.595 against lr 0.03's "
                   "0.632): checks of the step"),
    ),
))
