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
IEEE S&P 2019 (white-box gradient features).

"span" (in "all", or alone) is the rank test of a Linear first layer: that layer's weight
gradient is sum_i e_i a_i^T over the batch, so its row space is the span of the batch's inputs,
and s(x) = max_t ||P_t [x, 1]||^2 / ||[x, 1]||^2 (P_t the projection on the row space of round
t's first-layer gradient, bias as a column) is exactly 1 for every sample of an attacked batch
and below 1 for the others. Unlike "regression" it needs none of the batch's other samples
among the candidates, so it keeps its strength on a random subset of candidates (`candidates`):
non-private D-PSGD on the Fashion-MNIST DPDL setting, 200 of 1,000 rounds, 250 + 250
candidates per node: span AUC 0.930, regression 0.593, cosine 0.516. The max over rounds, not
the mean, because a member is in about q R of the R attacked batches (often one). Noise makes
the gradient full rank, its row space a random subspace and the test uninformative; the
statistic is NaN (never graded) for a model whose first layer is not Linear (a CNN).

View kinds: "gradient" uses G_t as is; "sign" compares with sign(G_t); "partial" restricts both
vectors to the observed coordinates `mask`. Per-sample gradients for all candidates and a chunk
of rounds come from one `per_sample_grads` call (rows = rounds); the loop runs over round chunks.

Statistic "auto" (the default) computes both "regression" and "cosine" from the same per-sample
gradients and reports both. Which is stronger under DP depends on the defense (quick preset,
eps = 8: ADP-VRSGP regression 0.616 vs cosine 0.568; an eavesdropper run on DP-SGP: regression
0.609 vs cosine 0.674), so by default (`select = "strongest"`) the one graded (verdict, gate) is
the stronger on the audited candidates: an auditor's worst case, the attack's full strength. A
best-of-two is optimistic for the attacker, so its intervals and empirical epsilon are computed
at the Bonferroni level 1 - 0.05 / 2 per statistic: the two intervals then hold together at
95 %, and the graded one is a 95 % interval whichever was picked (privbench.audit.membership.grade).
`select = "reference"` (privbench.audit.reference.choose_statistic) picks on two reference systems
the attacker trains itself, with known membership, never reading the target's labels (a
realistic attacker; on the quick preset it picked the weaker statistic for three of five DP
defenses at eps = 8). Without reference systems
(`select = "fit"`, or when no reference view exists) a label-free rule on what the attacker
observes decides: the fraction R^2 of the views' energy that the candidates' gradients
explain in the regression fit (mean over rounds) against its chance level N / d (N candidates, d
observed coordinates: a random direction is explained by N random ones to about N / d). A raw
batch gradient lies in the span of its batch's gradients (R^2 near 1): "regression", which then
recovers the batch; DP noise of norm sigma C sqrt(d) / B dominates the view (R^2 near chance):
"cosine", which the noise hurts less (eavesdropper AUC at eps = 8: regression 0.609 vs cosine
0.674; eps = 1: 0.491 vs 0.574; no DP: 1.000 vs 0.643). Rule: "regression" when
R^2 >= (1 + N / d) / 2, else "cosine" (always "cosine" when N >= d). No membership label is used.

Choices: "regression" is scale-free in G_t and needs no knowledge of the clip bound or step size;
ridge 1e-3 of the mean squared gradient norm keeps the N x N solve well-posed; the mean over
rounds weighs every observed round equally. Views that are estimates (`exact=False`, e.g. a lone
neighbour's difference of a push-sum victim's consecutive messages, which carries its
neighbours' mixing) form a second test next to the exact views: each group's mean statistic is
standardized across the candidates and the two are averaged (a label-free Stouffer-style
combination; on SGP, 6 nodes, 60 rounds, neighbour threat, regression: round-0 exact view alone
AUC 0.712, plain mean with the 354 difference views 0.678, this combination 0.790). Where both
kinds exist `score_all` also returns each statistic on the exact views alone ("regression@exact",
"cosine@exact"): after 1,000 non-private rounds the exact round-0 view alone is perfect (AUC
1.000) and the combination slightly weaker (0.992), so "strongest" grades the best of the four
(intervals at the Bonferroni level 1 - 0.05 / 4).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from attacks._mia import MessageAttack
from privbench import progress
from privbench.engine.ghost import FastClip, Layer, plan_for
from privbench.engine.grads import per_sample_grads, rows_to_dict
from privbench.errors import ConfigError, NotApplicable
from privbench.models import FlatModel
from privbench.registry import ATTACKS
from privbench.threat.observation import GradientView

STATISTICS = ("auto", "all", "regression", "cosine", "dot", "span")
AUTO = ("regression", "cosine")  # what "auto" computes and chooses between
ALL = (*AUTO, "span")  # what "all" computes
SETS = {"auto": AUTO, "all": ALL}  # the statistics that compute several (the rule picks)
MAX_OVER_ROUNDS = ("span",)  # statistics aggregated by the max over rounds, not the mean
SPAN_TOL = 1e-5  # singular values below this fraction of the largest are rounding noise
SELECT = ("strongest", "reference", "fit")  # how "auto" chooses (see the module docstring)
EXACT_ONLY = "@exact"  # suffix of a statistic computed on the exact views alone


@dataclass(frozen=True)
class MIAMessageConfig:
    """Attributes:
    statistic: "auto" (default: regression and cosine, chosen by the label-free rule above),
        "all" (those two and "span"; the label-free rule still picks between the first two),
        "regression", "cosine", "dot" or "span".
    select: how "auto" picks the graded statistic (privbench.audit.membership): "strongest"
    (default:
        the higher AUC on the audited candidates, intervals at the Bonferroni level for two),
        "reference" (the higher AUC on two reference copies of the system with known
        membership) or "fit" (the label-free R^2 rule, always used by callers without
        membership labels, e.g. the one-run canary audit).
    clip: clip candidate gradients to this L2 norm before a "dot" (0 = no clipping).
    ridge: ridge strength of "regression", relative to the mean squared gradient norm.
    max_floats: memory cap on the views scored in one batch (views x `_floats_per_view`:
        the candidates' per-sample gradients, or their ghost factors, and the Gram).
    rounds: attack this many rounds, evenly spaced over the run (first and last included);
        0 (default) = every observed round. The run then records only these rounds and the
        rounds on either side (a view of round t may read round t - 1 or t + 1), which is what
        lets the attack run on a paper-scale setting: 20 nodes x 600 rounds of a
        109k-parameter model is an 8 GB log when every round is kept.
    candidates: per victim, score at most this many members and this many held-out samples,
        drawn at random without replacement (`subsample`); 0 (default) = all of them. The
        regression statistic solves an N x N system per round (N = candidates of the victim),
        and 3,000 members + 3,000 held-out samples per node made one cell run for hours. The
        audit's sample (`privbench.audit.candidates.SampleRule`, k / f of each side pooled over
        the victims) applies first; this caps it further per victim.
    """

    statistic: str = "auto"
    select: str = "strongest"
    clip: float = 0.0
    ridge: float = 1e-3
    max_floats: int = 20_000_000
    rounds: int = 0
    candidates: int = 0

    def __post_init__(self) -> None:
        if self.select not in SELECT:
            raise ConfigError(f"mia_message.select must be one of {', '.join(SELECT)}, "
                              f"got {self.select!r}")
        if self.statistic not in STATISTICS:
            raise ConfigError(f"mia_message.statistic must be one of {', '.join(STATISTICS)}, "
                              f"got {self.statistic!r}")
        for name in ("rounds", "candidates"):
            if getattr(self, name) < 0:
                raise ConfigError(f"mia_message.{name} must be >= 0 (0 = all), "
                                  f"got {getattr(self, name)}")

    def attacked_rounds(self, total: int) -> frozenset[int] | None:
        """The rounds attacked in a run of `total` rounds: `rounds` of them evenly spaced from
        the first to the last, or None (every observed round) when `rounds` is 0 or >= total."""
        if self.rounds == 0 or self.rounds >= total:
            return None
        return frozenset(int(t) for t in np.linspace(0, total - 1, self.rounds).round())


def _spd_solve(system: Tensor, rhs: Tensor) -> Tensor:
    """x with system @ x = rhs, batched: system (r, N, N) symmetric positive definite, rhs (r, N).

    Cholesky, not `torch.linalg.solve`: on CPU the batched LU of matrices larger than 14 x 14
    runs LAPACK's getrf concurrently over the batch, and once `torch.set_num_threads(k > 1)` has
    been called (as `privbench bench --threads 2` does) MKL then fails or silently returns
    garbage (measured with torch 2.14: residual 1e18 for a (60, 200, 200) batch;
    pytorch/pytorch#142815, fix proposed in pytorch/pytorch#181570). Cholesky is also half the work.
    """
    chol, info = torch.linalg.cholesky_ex(system)
    if bool((info != 0).any()):  # not numerically positive definite: the general solve
        return torch.linalg.solve(system, rhs)
    return torch.cholesky_solve(rhs[..., None], chol)[..., 0]


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

    def attacked_rounds(self, total: int) -> frozenset[int] | None:
        """`rounds` evenly spaced rounds of the run (None: all; `MIAMessageConfig`)."""
        return self.cfg.attacked_rounds(total)

    def candidate_cap(self) -> int:
        """The configured `candidates` cap (0: every member and held-out sample)."""
        return self.cfg.candidates

    def statistics(self) -> tuple[str, ...]:
        """The statistics this configuration computes."""
        return SETS.get(self.cfg.statistic, (self.cfg.statistic,))

    def score(self, fm: FlatModel, views: list[GradientView], x: Tensor, y: Tensor) -> np.ndarray:
        """(N,) mean alignment of each candidate's gradient with the victim's released ones
        (for "auto", the statistic `choose` picks)."""
        scores, fit = self.score_all(fm, views, x, y)
        return scores[self.choose(fit)]

    def choose(self, fit: dict[str, float]) -> str:
        """The statistic graded: the configured one, or for "auto" the label-free rule on the
        regression fit (`fit`: explained R^2 and its chance level, from `score_all`)."""
        if self.cfg.statistic not in SETS:
            return self.cfg.statistic
        chance = fit["chance"]
        return "regression" if chance < 1 and fit["explained"] >= (1 + chance) / 2 else "cosine"

    def score_all(self, fm: FlatModel, views: list[GradientView], x: Tensor,
                  y: Tensor) -> tuple[dict[str, np.ndarray], dict[str, float]]:
        """(N,) scores per statistic of `statistics()`, from one pass of per-sample gradients, and
        the regression fit: {"explained": mean R^2 of the views, "chance": N / d}.

        Raises:
            NotApplicable: when there is no view to score against.
        """
        if not views:
            raise NotApplicable("no gradient view of the victim was observed")
        n, d = len(y), fm.d
        stats = self.statistics()
        groups = [[v for v in views if v.exact], [v for v in views if not v.exact]]
        groups = [grp for grp in groups if grp]
        # per group (exact views, estimates) and statistic: the (N,) sum over its rounds
        total = [{k: torch.full((n,), -math.inf if k in MAX_OVER_ROUNDS else 0.0,
                                dtype=torch.float64, device=x.device) for k in stats}
                 for _ in groups]
        explained, observed = 0.0, 0.0
        # the first layer's inputs do not depend on the round: captured once, not per chunk
        first = _first_linear_inputs(fm, views[0].params.to(x.device).float(), x, y) \
            if "span" in stats else None
        ghost = _ghost_plan(fm, x, [v.mask for v in views])
        shared: dict[str, Tensor] = {}  # what every view shares (`_ghost_pairs`)
        chunk = max(1, self.cfg.max_floats // _floats_per_view(ghost, n, d,
                                                               "regression" in stats))
        for gi, part in ((gi, grp[s:s + chunk]) for gi, grp in enumerate(groups)
                         for s in range(0, len(grp), chunk)):
            params = torch.stack([v.params.to(x.device).float() for v in part])  # (r, d)
            target = self._targets(part, x.device)  # (r, d)
            pairs, seen = self._pair_stats(fm, params, x, y, target, [v.mask for v in part],
                                           need_gram="regression" in stats, ghost=ghost,
                                           shared=shared)
            if "span" in stats:
                pairs["span"] = _span_scores(fm, first, target, [v.batch_size for v in part],
                                             n)
            observed += seen
            for k in stats:
                stat, r2 = self._statistic(k, pairs, target)
                if k in MAX_OVER_ROUNDS:
                    total[gi][k] = torch.maximum(total[gi][k], stat.double().max(dim=0).values)
                else:
                    total[gi][k] += stat.double().sum(dim=0)
                explained += float(r2.sum()) if r2 is not None else 0.0
            progress.advance(len(part))
        fit = {"explained": explained / len(views) if "regression" in stats else float("nan"),
               "chance": min(1.0, n / max(observed / len(views), 1.0))}
        means = [{k: (v if k in MAX_OVER_ROUNDS else v / len(grp)).cpu().numpy()
                  for k, v in tot.items()} for tot, grp in zip(total, groups, strict=True)]
        if len(means) == 1:
            return means[0], fit
        # exact views and estimates both observed: the combination, and (for a caller that
        # grades the strongest) each statistic on the exact views alone, which the noisier
        # estimates can dilute (non-private SGP, 1,000 rounds: exact alone AUC 1.0, combined 0.99)
        combined = {k: (_standardize(means[0][k]) + _standardize(means[1][k])) / 2 for k in stats}
        return {**combined, **{f"{k}{EXACT_ONLY}": means[0][k] for k in stats}}, fit

    def _pair_stats(self, fm: FlatModel, params: Tensor, x: Tensor, y: Tensor, target: Tensor,
                    masks: list[Tensor | None], need_gram: bool,
                    ghost: Ghost | None = None,
                    shared: dict[str, Tensor] | None = None) -> tuple[dict[str, Tensor], float]:
        """What every statistic reads of the candidates' per-sample gradients g (r, N, d) at the
        views' params (r, d): {"rhs": <g_n, target> (r, N), "sq": ||g_n||^2 (r, N), "gram":
        <g_n, g_m> (r, N, N) when `need_gram`}, and the number of observed coordinates.

        Models made only of Linear layers (the MLP) take the ghost path: per layer a sample's
        weight gradient is the outer product e a^T of its output gradient e (q,) and input a (p,),
        so <g_n, g_m> = (e_n . e_m)(a_n . a_m + 1) with the bias, and <g_n, T> = e_n^T T a_n:
        N^2 (p + q) instead of N^2 p q per layer, and the (r, N, d) stack is never formed (the
        message MIA dominated the audit's time): `ghost` (`_ghost_plan`), when it applies;
        `shared` keeps what every view of the candidates shares between calls.
        Views that see part of a tensor, and other models, form g.
        """
        r, n, d = len(params), len(y), fm.d
        xs, ys = x.expand(r, *x.shape), y.expand(r, n)
        if ghost is not None:
            seen = sum(s.stop - s.start for s in fm.specs if s.name in ghost[1])
            return (_ghost_pairs(ghost, fm, params, xs, ys, target, need_gram,
                                 {} if shared is None else shared), float(r * seen))
        g = per_sample_grads(fm, params, xs, ys)  # (r, N, d)
        seen = float(r * d)
        if any(m is not None for m in masks):
            keep = torch.stack([m.to(x.device) if m is not None else
                                torch.ones(d, dtype=torch.bool, device=x.device)
                                for m in masks])  # (r, d)
            seen = float(keep.sum())
            if bool((keep == keep[:1]).all()):  # one observed set (DPPS's shared layers):
                idx = keep[0].nonzero()[:, 0]  # the Gram over it only, N^2 d_obs, not N^2 d
                g, target = g[..., idx], target[:, idx]
            else:
                g = g * keep[:, None, :]
        out = {"rhs": torch.einsum("rnd,rd->rn", g, target), "sq": g.pow(2).sum(dim=-1)}
        if need_gram:
            out["gram"] = torch.bmm(g, g.transpose(1, 2))  # (r, N, N)
        return out, seen

    def _statistic(self, name: str, pairs: dict[str, Tensor],
                   target: Tensor) -> tuple[Tensor, Tensor | None]:
        """(r, N) per-round statistic of the candidates against target (r, d) from their pair
        statistics (`_pair_stats`), and for "regression" the (r,) fraction of each target's
        energy the fit explains."""
        rhs, sq = pairs["rhs"], pairs["sq"]  # (r, N) each
        if name == "span":
            return pairs["span"], None
        if name == "regression":
            gram, rhs = pairs["gram"].double(), rhs.double()  # (r, N, N), (r, N)
            ridge = self.cfg.ridge * gram.diagonal(dim1=1, dim2=2).mean(dim=1) + 1e-30
            eye = torch.eye(gram.shape[1], dtype=gram.dtype, device=gram.device)
            coef = _spd_solve(gram + ridge[:, None, None] * eye, rhs)  # (r, N)
            energy = target.double().pow(2).sum(dim=1)  # (r,)
            resid = energy - 2 * (coef * rhs).sum(1) + torch.einsum("rn,rnm,rm->r", coef, gram,
                                                                    coef)
            return coef, (1 - resid / energy.clamp_min(1e-30)).clamp(0, 1)
        if name == "cosine":
            den = sq.clamp_min(0).sqrt() * target.norm(dim=-1)[:, None] + 1e-12
            return rhs / den, None
        if self.cfg.clip > 0:  # clip_C(g) . T = min(1, C / ||g||) <g, T>
            return rhs * (self.cfg.clip / (sq.clamp_min(0).sqrt() + 1e-12)).clamp(max=1.0), None
        return rhs, None


# The ghost plan of the candidates' model and the parameter tensors the views observe.
Ghost = tuple[FastClip, frozenset[str]]


def _ghost_plan(fm: FlatModel, x: Tensor, masks: list[Tensor | None]) -> Ghost | None:
    """The ghost plan of an all-Linear model on flat inputs whose views observe whole parameter
    tensors, the same ones in every view (no mask, or PartPSP's / DPPS's shared layers), with
    the names of those tensors; else None (`MIAMessage._pair_stats`)."""
    plan = plan_for(fm.module, tuple(x.shape[1:]))
    if plan is None or not all(lay.rule == "linear" and len(lay.in_shape) == 1
                               for lay in plan.layers):
        return None
    if all(m is None for m in masks):
        return plan, frozenset(s.name for s in fm.specs)
    first = masks[0]
    if first is None or any(m is None or not torch.equal(m, first) for m in masks[1:]):
        return None
    parts = [first[s.start:s.stop] for s in fm.specs]  # each tensor's observed coordinates
    if not all(bool(q.all()) or not bool(q.any()) for q in parts):
        return None  # a tensor seen in part: the per-sample gradients restricted to the mask
    return plan, frozenset(s.name for s, q in zip(fm.specs, parts, strict=True) if q.all())


def _floats_per_view(ghost: Ghost | None, n: int, d: int, need_gram: bool) -> int:
    """Floats one view's pair statistics hold for n candidates: the per-sample gradients
    (n, d), or on the ghost path each layer's inputs and output gradients (n, p + q); with the
    regression's Gram, its (n, n) in single and double precision and the Cholesky factor (five
    single-precision (n, n) in all). Sets how many views are scored in one batch."""
    width = d if ghost is None else sum(lay.in_shape[0] + lay.out_shape[0]
                                        for lay in ghost[0].layers)
    return max(1, n * width + (5 * n * n if need_gram else 0))


def _ghost_pairs(ghost: Ghost, fm: FlatModel, params: Tensor, x: Tensor, y: Tensor,
                 target: Tensor, need_gram: bool, shared: dict[str, Tensor]) -> dict[str, Tensor]:
    """`_pair_stats` of an all-Linear model from each layer's inputs a (r, N, p) and per-sample
    output gradients e (r, N, q), one forward and backward per view (`FastClip.capture`), over
    the observed tensors only (a weight adds (e_n . e_m)(a_n . a_m), a bias e_n . e_m).

    The first layer's inputs are the candidates themselves in every view (no parameter precedes
    it), so their Gram (N, N) is formed once and kept in `shared`: on the Fashion-MNIST MLP
    that layer's p = 784 is two thirds of the Gram's work."""
    (plan, observed), (r, n) = ghost, y.shape
    acts, outs = plan.capture(fm.module, rows_to_dict(fm, params), x, y)
    tgt = rows_to_dict(fm, target)  # {name: (r, *shape)}
    rhs = torch.zeros(r, n, dtype=target.dtype, device=target.device)
    sq = torch.zeros_like(rhs)
    gram = torch.zeros(r, n, n, dtype=target.dtype, device=target.device) if need_gram else None
    for k, (lay, a, e) in enumerate(zip(plan.layers, acts, outs, strict=True)):
        weight = lay.param("weight") in observed
        bias = lay.module.bias is not None and lay.param("bias") in observed
        if not (weight or bias):
            continue
        e2 = e.pow(2).sum(dim=-1)  # (r, N)
        if weight:
            rhs += ((e @ tgt[lay.param("weight")]) * a).sum(dim=-1)  # e_n^T W_T a_n, (r, N)
            a2 = a.pow(2).sum(dim=-1)  # (r, N)
            sq += e2 * (a2 + 1.0) if bias else e2 * a2
        else:
            sq += e2
        if bias:
            rhs += (e * tgt[lay.param("bias")][:, None, :]).sum(dim=-1)
        if gram is not None:
            ee = torch.bmm(e, e.transpose(1, 2))  # (r, N, N)
            if not weight:
                gram += ee
                continue
            if k == 0:  # (1, N, N), broadcast over the views
                aa = shared.get("first_gram")
                if aa is None:
                    aa = shared["first_gram"] = torch.bmm(a[:1], a[:1].transpose(1, 2))
            else:
                aa = torch.bmm(a, a.transpose(1, 2))  # (r, N, N)
            gram += ee * (aa + 1.0 if bias else aa)
    out = {"rhs": rhs, "sq": sq}
    if gram is not None:
        out["gram"] = gram
    return out


def _first_linear_inputs(fm: FlatModel, params: Tensor, x: Tensor,
                         y: Tensor) -> tuple[Layer, Tensor] | None:
    """The model's first layer and its inputs a (N, p) for candidates x, when that layer is
    Linear on a flat input (else None). No parameter precedes it, so a is the same at every
    round; `params` (d,) is any round's model."""
    plan = plan_for(fm.module, tuple(x.shape[1:]))
    first = plan.layers[0] if plan is not None and plan.layers else None
    if first is None or first.rule != "linear" or len(first.in_shape) != 1:
        return None
    acts, _ = plan.capture(fm.module, rows_to_dict(fm, params[None]), x[None], y[None])
    return first, acts[0][0]


def _span_scores(fm: FlatModel, first: tuple[Layer, Tensor] | None, target: Tensor,
                 batch_sizes: list[int], n: int) -> Tensor:
    """(r, N) the fraction of each candidate's first-layer input that lies in the row space of
    the view's first-layer gradient (statistic "span"; NaN where the first layer is not Linear).

    The weight gradient of a Linear first layer is a sum of outer products e_i a_i^T over the
    batch, so its rows (with the bias as an extra column, inputs [a, 1]) span exactly the batch's
    inputs: a raw batch gradient puts every candidate of the batch at 1 and any other below it
    (Fashion-MNIST images are far from each other's span; this is the rank argument of the
    analytic attack, `attacks.analytic`, used as a membership test). The row space is the span of
    the right singular vectors above SPAN_TOL of the largest (rounding noise), at most twice the
    view's batch size (a Poisson batch is rarely that large); DP noise makes the gradient full
    rank, its row space a random subspace, and the statistic uninformative. Aggregated by the
    max over rounds: a member needs to be in one attacked batch.
    """
    r, device = len(target), target.device
    if first is None:  # not a Linear first layer (`_first_linear_inputs`)
        return torch.full((r, n), math.nan, dtype=torch.float64, device=device)
    layer, a = first[0], first[1].double()  # a (N, p): the first layer's inputs
    tgt = rows_to_dict(fm, target)
    w = tgt[layer.param("weight")].double()  # (r, q, p)
    if layer.module.bias is not None:
        w = torch.cat([w, tgt[layer.param("bias")].double()[..., None]], dim=-1)  # (r, q, p+1)
        a = torch.cat([a, torch.ones_like(a[:, :1])], dim=-1)  # (N, p+1)
    _, sv, vh = torch.linalg.svd(w, full_matrices=False)  # sv (r, k), vh (r, k, p+1)
    rank = torch.arange(sv.shape[1], device=device)[None, :]  # (1, k)
    cap = 2 * torch.tensor(batch_sizes, device=device)[:, None]  # (r, 1)
    keep = (sv > SPAN_TOL * sv[:, :1]) & (rank < cap)  # (r, k)
    proj = torch.einsum("rkp,np->rnk", vh, a).pow(2)  # (r, N, k)
    return (proj * keep[:, None, :]).sum(dim=-1) / a.pow(2).sum(dim=-1).clamp_min(1e-30)


def _standardize(v: np.ndarray) -> np.ndarray:
    """(N,) scores centred and scaled to unit spread across the candidates (label-free)."""
    sd = float(v.std())
    return (v - v.mean()) / (sd if sd > 0 else 1.0)
