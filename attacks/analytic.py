"""Analytic first-layer inversion: a fully connected first layer's input, read off its gradient.

Phong, Aono, Hayashi, Wang, Moriai, "Privacy-Preserving Deep Learning via Additively Homomorphic
Encryption", IEEE TIFS 2018 (ATIS 2017), §3; Geiping et al., "Inverting Gradients", NeurIPS 2020,
Prop. D.1. For a first layer z = W x + b (W: (h, D), D = C H W) and one sample, dL/dW_k =
(dL/db_k) x for every unit k, so x = dL/dW_k / dL/db_k exactly wherever dL/db_k != 0: no
optimisation, no prior, and it only needs the first layer's gradient (PartPSP's shared layer is
enough). For a batch mean (B > 1) the same ratio is a weighted average of the batch's images,
sum_i delta_ik x_i / sum_i delta_ik, dominated by one sample where that sample's delta_ik is the
largest: every unit gives one candidate, and B of them are kept by farthest-point selection
(each next candidate the one farthest in L2 from those kept), starting from the unit with the
largest |dL/db_k|.

Applicability (status "not applicable: ..." otherwise, images left at 0.5): the model's first
two parameters are a (h, D) weight and an (h,) bias, both wholly observed by the view, and the
view is not sign-only (a ratio of signs carries no image). Labels come from the iDLG / LLG rule
on the last layer where it is observed (`attacks/_inversion.py::labels_for`), else 0 with
"labels: not observed" in the status; the attack reconstructs images, not labels.

The loss returned per target is the relative residual of the best rank-one fit among the kept
candidates, ||dL/dW - dL/db x^T||^2 / ||dL/dW||^2 over the whole first layer (0 when one sample
produced it: an exact batch-1 view; larger for a batch or a noisy view).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch
from torch import Tensor

from attacks._inversion import (
    InversionAttack,
    Problems,
    Reconstruction,
    Shape,
    config_dict,
    labels_for,
    stack_views,
)
from privbench.models import FlatModel
from privbench.registry import ATTACKS
from privbench.results import outcome
from privbench.results.outcome import Status
from privbench.threat.observation import GradientView


@dataclass(frozen=True)
class AnalyticConfig:
    """Analytic first-layer inversion settings.

    Attributes:
        min_ratio: units whose |dL/db_k| is below min_ratio x the largest are not used (the
            ratio is then noise over a near-zero denominator).
    """

    min_ratio: float = 1e-3


def first_layer(fm: FlatModel, input_shape: Shape) -> tuple[slice, slice, int] | None:
    """(weight slice, bias slice, units) of a fully connected first layer with bias, or None."""
    if len(fm.specs) < 2:
        return None
    w, b = fm.specs[0], fm.specs[1]
    fan_in = math.prod(input_shape)
    if len(w.shape) != 2 or w.shape[1] != fan_in or tuple(b.shape) != (w.shape[0],):
        return None
    return slice(w.start, w.stop), slice(b.start, b.stop), w.shape[0]


def candidates(gw: Tensor, gb: Tensor, min_ratio: float) -> Tensor:
    """Per-unit input estimates of one view.

    Args:
        gw: (h, D) first-layer weight gradient; gb: (h,) its bias gradient.

    Returns:
        x (h', D): the estimates dL/dW_k / dL/db_k of the usable units, ordered by |dL/db_k|
        (largest first).
    """
    mag = gb.abs()
    usable = mag > min_ratio * mag.max().clamp_min(torch.finfo(gb.dtype).tiny)
    idx = torch.nonzero(usable).flatten()
    idx = idx[mag[idx].argsort(descending=True)]
    return gw[idx] / gb[idx, None]  # (h', D)


def rank_one_residual(gw: Tensor, gb: Tensor, x: Tensor) -> Tensor:
    """||dL/dW - dL/db x_j^T||^2 / ||dL/dW||^2 for each candidate x_j (P, D): (P,).

    0 when one sample produced the whole first-layer gradient (an exact batch-1 view)."""
    fit = gb[None, :, None] * x[:, None, :]  # (P, h, D)
    return (gw[None] - fit).pow(2).sum((1, 2)) / gw.pow(2).sum().clamp_min(1e-30)


def farthest(x: Tensor, b: int) -> Tensor:
    """Indices of b rows of x (h', D): the first, then each next the farthest from those kept."""
    keep = [0]
    dist = (x - x[0]).pow(2).sum(1)  # (h',) distance to the kept set
    while len(keep) < min(b, x.shape[0]):
        j = int(dist.argmax())
        keep.append(j)
        dist = torch.minimum(dist, (x - x[j]).pow(2).sum(1))
    while len(keep) < b:  # fewer usable units than images: repeat the strongest
        keep.append(0)
    return torch.tensor(keep, device=x.device)


@ATTACKS.register("analytic")
class Analytic(InversionAttack):
    """Analytic first-layer inversion (Phong et al. 2017): x = dL/dW_k / dL/db_k."""

    Config = AnalyticConfig
    name = "analytic"

    def reconstruct(self, views: list[GradientView], fm: FlatModel, input_shape: Shape,
                    num_classes: int, device: torch.device,
                    gen: torch.Generator) -> Reconstruction:
        """See `attacks/_inversion.py` (no randomness: `gen` is unused)."""
        start = time.perf_counter()
        probs = stack_views(views, device, torch.float64)
        k, b = probs.k, probs.batch_size
        images = torch.full((k, b, *input_shape), 0.5, dtype=torch.float64, device=device)
        loss = torch.full((k,), math.inf, dtype=torch.float64, device=device)
        labels, rules = _labels(fm, probs, num_classes)
        status: list[Status] = []
        layer = first_layer(fm, input_shape)
        for i in range(k):
            reason = _not_applicable(layer, probs, i)
            if reason:
                status.append(outcome.not_applicable(reason))
                continue
            ws, bs, h = layer  # type: ignore[misc]
            gw, gb = probs.target[i, ws].view(h, -1), probs.target[i, bs]  # (h, D), (h,)
            x = candidates(gw, gb, self.cfg.min_ratio)
            if x.shape[0] == 0:
                status.append(outcome.not_applicable("the first layer's bias gradient is zero"))
                continue
            pick = farthest(x, b)
            images[i] = x[pick].view(b, *input_shape)
            loss[i] = rank_one_residual(gw, gb, x[pick]).min()
            status.append(outcome.ok(f"(labels: {rules[i]}; {x.shape[0]} of {h} units usable)"))
        return Reconstruction(images.clamp(0, 1).float(), labels, loss.float(), status,
                              loss.float()[:, None], time.perf_counter() - start,
                              {"attack": self.name, "config": config_dict(self.cfg),
                               "labels": rules})


def _labels(fm: FlatModel, probs: Problems, num_classes: int) -> tuple[Tensor, list[str]]:
    """Labels (K, B) by the iDLG / LLG rule where the last layer is observed, else 0; and each
    target's rule ("idlg", "llg-simple" or "not observed")."""
    try:
        labels, unobserved, src = labels_for(fm, probs, num_classes, "infer")
    except ValueError:  # no final linear layer with num_classes rows
        unobserved = torch.ones(probs.k, dtype=torch.bool, device=probs.mask.device)
        labels, src = torch.zeros(probs.k, probs.batch_size, dtype=torch.long,
                                  device=probs.mask.device), [""] * probs.k
    labels = torch.where(unobserved[:, None], torch.zeros_like(labels), labels)
    return labels, ["not observed" if u else s for u, s in zip(unobserved.tolist(), src,
                                                                 strict=True)]


def _not_applicable(layer: tuple[slice, slice, int] | None, probs: Problems, i: int) -> str:
    """Why target i cannot be read analytically ("" when it can)."""
    if layer is None:
        return "the model's first layer is not a fully connected layer with a bias"
    if bool(probs.sign[i]):
        return "a sign-only view carries no first-layer magnitudes"
    ws, bs, _ = layer
    if not (bool(probs.mask[i, ws].all()) and bool(probs.mask[i, bs].all())):
        return "the view does not observe the whole first layer"
    return ""
