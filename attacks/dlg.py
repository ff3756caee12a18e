"""Deep Leakage from Gradients (DLG).

Zhu, Liu, Han, "Deep Leakage from Gradients", NeurIPS 2019 (Algorithm 1): dummy data x' and a
dummy soft label y' = softmax(v) are optimised jointly so that the gradient of the victim's loss
at the known model matches the observed gradient under the squared L2 distance summed over all
parameters, ||dL(x', y')/dθ - g||², with L-BFGS.

Defaults are the reference code's (mit-han-lab/dlg main.py): L-BFGS with
PyTorch defaults (lr 1, max_iter 20, history 100, no line search), 300 outer steps (the paper's
1,200 is `steps=1200`), N(0, 1) initialisation of image and label logits, no prior, no box, no
restarts.

Choices / deviations:
* Works on any `GradientView` kind (sign views use the soft-sign transform, partial views match
  only observed coordinates; see `attacks/_inversion.py`).
* `restarts` > 1 keeps the restart with the lowest final gradient-matching loss.
* Runs one L-BFGS instance per target and restart (L-BFGS cannot be batched).
* A blow-up to non-finite values keeps the last finite iterate and says so in the status.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from attacks._inversion import InversionAttack, Reconstruction, run_lbfgs
from privbench.models import FlatModel, Shape
from privbench.registry import ATTACKS
from privbench.threat.observation import GradientView


@dataclass(frozen=True)
class DLGConfig:
    """DLG settings (reference code defaults).

    Attributes:
        steps: outer L-BFGS steps (300 in the code, 1,200 in the paper).
        lr: L-BFGS step size.
        max_iter: inner evaluations per step.
        history: L-BFGS history size.
        restarts: independent initialisations per target (best by gradient loss).
        init: "randn" (reference) or "rand".
        tol: stop when the loss (checked every 10 steps) is below this (0: never, as DLG).
        precision: "float32" or "float64" (the attack's arithmetic).
        boxed: clamp images to [0, 1] after every step (False in DLG).
    """

    steps: int = 300
    lr: float = 1.0
    max_iter: int = 20
    history: int = 100
    restarts: int = 1
    init: str = "randn"
    tol: float = 0.0
    boxed: bool = False
    precision: str = "float32"


@ATTACKS.register("dlg")
class DLG(InversionAttack):
    """DLG: joint image + soft-label L2 gradient matching with L-BFGS."""

    Config = DLGConfig
    name = "dlg"

    def reconstruct(self, views: list[GradientView], fm: FlatModel, input_shape: Shape,
                    num_classes: int, device: torch.device,
                    gen: torch.Generator) -> Reconstruction:
        """See `attacks/_inversion.py`."""
        c = self.cfg
        return run_lbfgs(fm, views, input_shape, num_classes, device, gen, restarts=c.restarts,
                         init=c.init, cost="l2", tv=0.0, label_mode="joint", steps=c.steps,
                         lr=c.lr, max_iter=c.max_iter, history=c.history, tol=c.tol,
                         boxed=c.boxed, name=self.name, cfg=c,
                         precision=c.precision)
