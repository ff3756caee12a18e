"""Message-level membership inference by a curious neighbour (gradient alignment).

A neighbour that derives the victim's released gradient G_t at a known model theta_t (the
defense's `gradient_views`) scores a candidate sample (x, y) by how well the candidate's own
per-sample gradient at theta_t aligns with G_t, averaged over the observed rounds:

    s(x) = 1/R sum_t cos(grad l(theta_t; x, y), G_t)        (statistic "cosine")
    s(x) = 1/R sum_t < clip_C(grad l(theta_t; x, y)), G_t >  (statistic "dot", optional clip C)
    s(x) = 1/R sum_t a_t(x),  a_t = argmin_a ||G_t - sum_x' a(x') g_t(x')||^2 + ridge ||a||^2
                                                             (statistic "regression", default)

"regression" scores all candidates of the victim jointly: G_t is (up to clipping and noise) the
mean of its batch's gradients, so regressing it on the candidates' gradients g_t(x') gives a
coefficient of about 1/B (times the clip factor) to every candidate in the batch and about 0 to the
others; it is the least-squares (optimal linear) version of the alignment test and is exact for
an unprotected raw batch gradient whose batch lies among the candidates.

A member enters G_t whenever it is in the victim's batch, adding its own (clipped) gradient to
the sum, so its alignment is higher; DP noise of scale sigma C / B per coordinate drowns this in
proportion to the noise. This is the white-box "all updates visible" auditor of Nasr et al.,
"Tight Auditing of Differentially Private Machine Learning", USENIX Security 2023 (statistic:
the dot product of the observed update with the canary's gradient), and the gradient-alignment
membership signal of Nasr, Shokri, Houmansadr, "Comprehensive Privacy Analysis of Deep Learning",
IEEE S&P 2019 (white-box gradient features); reference/membership-inference-and-accounting.md
§3.3 and §8 item 2.

View kinds: "gradient" uses G_t as is; "sign" compares with sign(G_t); "partial" restricts both
vectors to the observed coordinates `mask`. Per-sample gradients for all candidates and a chunk
of rounds come from one `per_sample_grads` call (rows = rounds); the loop runs over round chunks.

Choices: "regression" by default (scale-free in G_t, needs no knowledge of the clip bound or
step size; ridge 1e-3 of the mean squared gradient norm keeps the N x N solve well-posed); the
mean over rounds weighs every observed round equally.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from attacks._mia import MessageAttack
from privbench.engine import clip_l2, per_sample_grads
from privbench.errors import ConfigError
from privbench.models import FlatModel
from privbench.registry import ATTACKS
from privbench.threat import GradientView, NotApplicable

STATISTICS = ("regression", "cosine", "dot")


@dataclass(frozen=True)
class MIAMessageConfig:
    """Attributes:
    statistic: "regression" (default), "cosine" or "dot".
    clip: clip candidate gradients to this L2 norm before a "dot" (0 = no clipping).
    ridge: ridge strength of "regression", relative to the mean squared gradient norm.
    max_floats: memory cap on one per-sample-gradient chunk (rounds x candidates x d floats).
    """

    statistic: str = "regression"
    clip: float = 0.0
    ridge: float = 1e-3
    max_floats: int = 20_000_000

    def __post_init__(self) -> None:
        if self.statistic not in STATISTICS:
            raise ConfigError(f"mia_message.statistic must be one of {', '.join(STATISTICS)}, "
                              f"got {self.statistic!r}")


@ATTACKS.register("mia_message")
class MIAMessage(MessageAttack):
    """Gradient-alignment membership scores from a victim's gradient views."""

    Config = MIAMessageConfig

    @torch.no_grad()
    def _targets(self, views: list[GradientView], device: torch.device) -> Tensor:
        """(R, d) the comparison vectors (sign / partial handled)."""
        rows = []
        for v in views:
            g = v.gradient.to(device).float()
            if v.kind == "sign":
                g = torch.sign(g)
            if v.mask is not None:
                g = g * v.mask.to(device)
            rows.append(g)
        return torch.stack(rows)

    def score(self, fm: FlatModel, views: list[GradientView], x: Tensor, y: Tensor) -> np.ndarray:
        """(N,) mean alignment of each candidate's gradient with the victim's released ones.

        Raises:
            NotApplicable: when there is no view to score against.
        """
        if not views:
            raise NotApplicable("no gradient view of the victim was observed")
        n, d = len(y), fm.d
        total = torch.zeros(n, dtype=torch.float64, device=x.device)
        chunk = max(1, self.cfg.max_floats // max(1, n * d))
        for s in range(0, len(views), chunk):
            part = views[s:s + chunk]
            r = len(part)
            params = torch.stack([v.params.to(x.device).float() for v in part])  # (r, d)
            target = self._targets(part, x.device)  # (r, d)
            g = per_sample_grads(fm, params, x.expand(r, *x.shape), y.expand(r, n))  # (r, N, d)
            masks = [v.mask for v in part]
            if any(m is not None for m in masks):
                keep = torch.stack([m.to(x.device) if m is not None else
                                    torch.ones(d, dtype=torch.bool, device=x.device)
                                    for m in masks])  # (r, d)
                g = g * keep[:, None, :]
            if self.cfg.statistic == "regression":
                gram = torch.einsum("rnd,rmd->rnm", g, g).double()  # (r, N, N)
                rhs = torch.einsum("rnd,rd->rn", g, target).double()  # (r, N)
                ridge = self.cfg.ridge * gram.diagonal(dim1=1, dim2=2).mean(dim=1) + 1e-30
                eye = torch.eye(n, dtype=gram.dtype, device=gram.device)
                stat = torch.linalg.solve(gram + ridge[:, None, None] * eye, rhs)  # (r, N)
            elif self.cfg.statistic == "cosine":
                num = torch.einsum("rnd,rd->rn", g, target)
                den = g.norm(dim=-1) * target.norm(dim=-1)[:, None] + 1e-12
                stat = num / den  # (r, N)
            else:
                if self.cfg.clip > 0:
                    g, _ = clip_l2(g, self.cfg.clip)
                stat = torch.einsum("rnd,rd->rn", g, target)
            total += stat.double().sum(dim=0)
        return (total / len(views)).cpu().numpy()
