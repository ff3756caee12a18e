"""What a model-level membership attack sees: per-(model, sample) signals and their bundle.

The core computes these (privbench.audit.membership, for the target, the reference models and a
population set) and the attacks in `attacks/` score them: the contract lives here, in the core,
so that the core never imports an attack (the core sits below the plugins).

Signals (`model_signals`), all per (model, sample), computed for every model row at once with one
`vmap` over models:
* `loss`: cross-entropy of the true label;
* `prob`: softmax confidence of the true label, p_y;
* `logit`: LiRA's logit-scaled confidence phi = log(p_y / (1 - p_y)), computed stably as
  z_y - logsumexp_{y' != y} z_{y'} (Carlini et al. 2022, §IV-B; equivalent to the reference code's
  log p_y - log sum_{y' != y} p_{y'}).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor
from torch.func import vmap

from privbench.models import FlatModel


@dataclass(frozen=True)
class Signals:
    """Per-(model, sample) signals, float64 numpy arrays of shape (m, N)."""

    loss: np.ndarray
    prob: np.ndarray
    logit: np.ndarray

    def row(self, i: int) -> Signals:
        """Signals of model row i, kept 2-D (1, N)."""
        return Signals(self.loss[i:i + 1], self.prob[i:i + 1], self.logit[i:i + 1])


@torch.no_grad()
def model_signals(fm: FlatModel, params: Tensor, x: Tensor, y: Tensor, chunk: int = 512) -> Signals:
    """Loss, confidence and logit-scaled confidence of every model row on every sample.

    Args:
        fm: the architecture.
        params: (m, d) model rows.
        x: (N, C, H, W) samples (on the same device as params).
        y: (N,) labels.
        chunk: samples per forward pass.
    """
    fwd = vmap(fm.forward, in_dims=(0, None))
    losses, logits_ = [], []
    for s in range(0, len(y), chunk):
        z = fwd(params, x[s:s + chunk]).double()  # (m, b, classes)
        yy = y[s:s + chunk].expand(z.shape[0], -1)[..., None]  # (m, b, 1)
        zy = z.gather(-1, yy)[..., 0]  # (m, b)
        others = z.scatter(-1, yy, float("-inf")).logsumexp(dim=-1)  # (m, b)
        losses.append(z.logsumexp(dim=-1) - zy)
        logits_.append(zy - others)
    loss = torch.cat(losses, dim=1).cpu().numpy()
    return Signals(loss, np.exp(-loss), torch.cat(logits_, dim=1).cpu().numpy())


@dataclass(frozen=True)
class ModelMIAInput:
    """What a model-level attack sees.

    Attributes:
        target: signals of the target model on the N candidates, shape (1, N).
        reference: signals of K reference models on the candidates (K, N), or None.
        in_mask: (K, N) bool, whether candidate n was in reference model k's training data.
        pop_target: target model on Z population samples (1, Z) (RMIA's z), or None.
        pop_reference: reference models on the population (K, Z), or None.
    """

    target: Signals
    reference: Signals | None = None
    in_mask: np.ndarray | None = None
    pop_target: Signals | None = None
    pop_reference: Signals | None = None
