"""Shared interface and machinery of the membership-inference attacks (not a registry entry).

Two kinds of attacks, both returning one score per candidate (higher = "more likely a member"):

* `ModelAttack` (needs "model"): scores candidates from a target model's outputs, optionally
  with reference (shadow) models: `score(ModelMIAInput) -> (N,)`. The caller
  (privbench.audit.membership) computes the signals once for the target, the reference models and a
  population set.
* `MessageAttack` (needs "messages"): scores candidates from a victim's `GradientView`s (what a
  curious neighbour derives from observed messages): `score(fm, views, x, y) -> (N,)`.

The signals and their bundle (`Signals`, `model_signals`, `ModelMIAInput`) are the core's
(privbench.threat.signals), re-exported here for the attacks.
"""

from __future__ import annotations

import abc
import warnings
from typing import ClassVar

import numpy as np
from torch import Tensor

from privbench.audit.attack import Attack
from privbench.models import FlatModel
from privbench.threat.observation import GradientView
from privbench.threat.signals import ModelMIAInput, Signals, model_signals

__all__ = ["MessageAttack", "ModelAttack", "ModelMIAInput", "Signals", "gaussian_logpdf",
           "masked_median_std", "model_signals"]


class ModelAttack(Attack, abc.ABC):
    """A membership attack on a model's outputs. Subclasses set `Config` and implement `score`."""

    kind: ClassVar[str] = "membership"
    needs: ClassVar[frozenset[str]] = frozenset({"model"})

    @property
    def needs_reference(self) -> bool:
        """Whether reference models must be trained for this attack."""
        return "reference_systems" in self.needs

    @property
    def needs_in_models(self) -> bool:
        """Whether reference models must include the candidates (online attacks)."""
        return False

    def reference_detail(self, reference_models: int) -> dict[str, str]:
        """What the attack chose from the number of reference models, for the result (e.g.
        LiRA's variance and the rule that picked it); empty when it chooses nothing."""
        return {}

    @abc.abstractmethod
    def score(self, inp: ModelMIAInput) -> np.ndarray:
        """(N,) membership scores, higher = member."""


class MessageAttack(Attack, abc.ABC):
    """A membership attack on a victim's gradient views (message level)."""

    kind: ClassVar[str] = "membership"
    needs: ClassVar[frozenset[str]] = frozenset({"messages"})

    @abc.abstractmethod
    def score(self, fm: FlatModel, views: list[GradientView], x: Tensor, y: Tensor) -> np.ndarray:
        """(N,) membership scores of candidates x (N, C, H, W), y (N,), higher = member."""

    def attacked_rounds(self, total: int) -> frozenset[int] | None:
        """The rounds of a `total`-round run whose views are scored (None: every observed one)."""
        return None

    def candidate_cap(self) -> int:
        """At most this many members and this many held-out samples per victim (0: all)."""
        return 0


def gaussian_logpdf(v: np.ndarray, mu: np.ndarray, sd: np.ndarray) -> np.ndarray:
    """Elementwise log N(v; mu, sd^2)."""
    return -0.5 * ((v - mu) / sd) ** 2 - np.log(sd) - 0.5 * np.log(2 * np.pi)


def masked_median_std(values: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray,
                                                                        np.ndarray]:
    """Per-column median and std of `values` (K, N) over rows where `mask` (K, N) is True.

    Returns:
        median (N,), std (N,) (NaN where a column has no rows), count (N,).
    """
    v = np.where(mask, values, np.nan)
    count = mask.sum(axis=0)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns are expected
        med = np.nanmedian(v, axis=0)
        sd = np.nanstd(v, axis=0)
    return med, sd, count
