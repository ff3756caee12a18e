"""LiRA: the likelihood-ratio membership attack with per-example Gaussians.

Carlini, Chien, Nasr, Song, Terzis, Tramer, "Membership Inference Attacks From First Principles",
IEEE S&P 2022, Algorithm 1 (online) and §IV-C (offline); reference code tensorflow/privacy
research/mi_lira_2021 (plot.py `generate_ours`, `generate_ours_offline`).

Statistic: the logit-scaled confidence phi = log(p_y / (1 - p_y)) of the true label (stable form in
attacks/_mia.py). For each candidate x, reference models trained with x ("IN") and without it
("OUT") give per-example Gaussians:

    mu_in(x), mu_out(x) = median of phi over IN / OUT reference models   (as the reference code;
                          the paper writes the mean: offline, the median cost 0.011 AUC on
                          privbench's signals, a documented choice)
    sigma_in(x), sigma_out(x) = std over IN / OUT reference models
    online:  Lambda(x) = log N(phi_t; mu_in, sigma_in^2) - log N(phi_t; mu_out, sigma_out^2)
    offline: Lambda(x) = log Phi((phi_t - mu_out) / sigma_out)   (one-sided test on OUT only)

with phi_t the target model's statistic.

Variance by reference count (`variance`, `global_below`):
* "per_example": sigma_in(x), sigma_out(x) as above.
* "global": one sigma per side, shared by every candidate. With few reference models a
  per-example std rests on K / 2 values per side and is noisy; Carlini et al. Sec. VI (the
  ablation over the number of shadow models) find the global ("fixed") variance stronger below
  64 shadow models.
* "auto" (default): the paper's advice as a rule on the number K of reference models: global
  when K < `global_below` (64), per example when K >= `global_below`. `variance_choice(K)` says
  which was used and why; the membership result records it (`variance`, `variance_rule`).
* The reference code's global sigma is np.std over all IN (OUT) values, which also counts the
  spread of the per-example means; privbench pools the per-example residuals (values -
  per-example median), i.e. the within-example spread the Gaussians model.

Other choices / deviations:
* With few reference models some candidates have < 2 IN (or OUT) models: their sigma falls back to
  the pooled one, and a missing mu_in to mu_out + the average (mu_in - mu_out) over candidates.
* No augmentation queries (digits / MNIST-size images; the reference code averages over mirrors
  and shifts of CIFAR images).
* Offline uses only the OUT models of the same reference set (as `generate_ours_offline` does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

import numpy as np
from scipy.stats import norm

from attacks._mia import ModelAttack, ModelMIAInput, gaussian_logpdf, masked_median_std
from privbench.errors import ConfigError
from privbench.registry import ATTACKS

_MIN_SD = 1e-6


VARIANCES = ("auto", "per_example", "global")
GLOBAL_BELOW = 64  # Carlini et al. Sec. VI: the global variance is stronger below 64 models


class VarianceChoice(TypedDict):
    """The variance a LiRA score used ("per_example" or "global") and the rule that chose it."""

    variance: str
    variance_rule: str


@dataclass(frozen=True)
class LiRAConfig:
    """Attributes:
    online: use IN and OUT reference models (True) or OUT only (False, offline).
    variance: "auto" (global below `global_below` reference models, per example at or above),
        "per_example" or "global" (one pooled sigma per side).
    global_below: the reference count from which "auto" estimates a variance per example.
    """

    online: bool = True
    variance: str = "auto"
    global_below: int = GLOBAL_BELOW

    def __post_init__(self) -> None:
        if self.variance not in VARIANCES:
            raise ConfigError(f"lira.variance must be one of {', '.join(VARIANCES)}, "
                              f"got {self.variance!r}")
        if self.global_below < 1:
            raise ConfigError(f"lira.global_below must be >= 1, got {self.global_below}")


def _pooled_sd(values: np.ndarray, mask: np.ndarray, med: np.ndarray) -> float:
    """Within-example std of `values` (K, N) around per-example medians, over mask entries."""
    res = np.where(mask, values - np.nan_to_num(med)[None], 0.0)
    n = int(mask.sum())
    return float(np.sqrt((res ** 2).sum() / max(n - 1, 1))) if n else 1.0


def _nanmean(v: np.ndarray) -> float:
    """Mean over finite entries (0 when there is none, e.g. a diverged run's NaN signals)."""
    ok = np.isfinite(v)
    return float(v[ok].mean()) if ok.any() else 0.0


def _fit(values: np.ndarray, mask: np.ndarray, fixed: bool) -> tuple[np.ndarray, np.ndarray]:
    """Per-example (mu, sigma) over the masked rows, with pooled fallbacks."""
    mu, sd, count = masked_median_std(values, mask)
    pooled = max(_pooled_sd(values, mask, mu), _MIN_SD)
    sd = np.full_like(mu, pooled) if fixed else np.where(count >= 2, sd, pooled)
    return mu, np.maximum(np.nan_to_num(sd, nan=pooled), _MIN_SD)


@ATTACKS.register("lira")
class LiRA(ModelAttack):
    """Likelihood-ratio attack with per-example Gaussians (online or offline)."""

    needs = frozenset({"model", "reference_systems"})

    Config = LiRAConfig

    @property
    def needs_in_models(self) -> bool:
        return bool(self.cfg.online)

    def variance_choice(self, reference_models: int) -> VarianceChoice:
        """The variance scored with `reference_models` reference models, and why."""
        v, below = self.cfg.variance, self.cfg.global_below
        if v != "auto":
            return {"variance": v, "variance_rule": f"configured (variance = {v!r})"}
        if reference_models < below:
            return {"variance": "global", "variance_rule":
                    f"auto: {reference_models} reference models < {below}: one global variance "
                    "(Carlini et al. 2022, Sec. VI: per-example variances are noisy with few "
                    "reference models)"}
        return {"variance": "per_example", "variance_rule":
                f"auto: {reference_models} reference models >= {below}: a variance per example "
                "(Carlini et al. 2022, Alg. 1)"}

    def reference_detail(self, reference_models: int) -> dict[str, str]:
        return dict(self.variance_choice(reference_models))

    def score(self, inp: ModelMIAInput) -> np.ndarray:
        """(N,) LiRA scores (higher = member)."""
        if inp.reference is None or inp.in_mask is None:
            raise ConfigError("lira needs reference models (reference signals and in_mask)")
        phi = inp.target.logit[0]  # (N,)
        ref = inp.reference.logit  # (K, N)
        out_mask = ~inp.in_mask
        if not out_mask.any():
            raise ConfigError("lira needs OUT reference models for every candidate")
        fixed = self.variance_choice(ref.shape[0])["variance"] == "global"
        mu_out, sd_out = _fit(ref, out_mask, fixed)
        # candidates with no OUT model: borrow the average OUT level of the others
        mu_out = np.where(np.isnan(mu_out), _nanmean(mu_out), mu_out)
        if not self.cfg.online:
            return norm.logcdf((phi - mu_out) / sd_out)
        if not inp.in_mask.any():
            raise ConfigError("online lira needs IN reference models (or set online=false)")
        mu_in, sd_in = _fit(ref, inp.in_mask, fixed)
        shift = _nanmean(mu_in - mu_out)
        mu_in = np.where(np.isnan(mu_in), mu_out + shift, mu_in)
        return gaussian_logpdf(phi, mu_in, sd_in) - gaussian_logpdf(phi, mu_out, sd_out)
