"""Threshold membership inference on a model's loss or confidence (no reference models).

Yeom, Giacomelli, Fredrikson, Jha, "Privacy Risk in Machine Learning: Analyzing the Connection to
Overfitting", IEEE CSF 2018 (the loss attack: predict "member" when the loss is below a
threshold); the confidence variant thresholds the softmax confidence of the true label (Salem et
al., "ML-Leaks", NDSS 2019); Attack P ("population") of Ye et al., "Enhanced Membership Inference
Attacks against Machine Learning Models", CCS 2022. The threshold is not chosen here: the attack
returns a score per candidate and the ROC sweeps every threshold (so AUC and TPR at low FPR
describe the whole family).

Choices: `signal` "loss" (default; score = -loss), "confidence" (score = p_y) or "logit" (score =
log(p_y / (1 - p_y)), LiRA's statistic without reference models).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attacks._mia import ModelAttack, ModelMIAInput
from privbench.errors import ConfigError
from privbench.registry import ATTACKS

SIGNALS = ("loss", "confidence", "logit")


@dataclass(frozen=True)
class MIAThresholdConfig:
    """Attributes:
    signal: "loss", "confidence" or "logit".
    """

    signal: str = "loss"

    def __post_init__(self) -> None:
        if self.signal not in SIGNALS:
            raise ConfigError(f"mia_threshold.signal must be one of {', '.join(SIGNALS)}, "
                              f"got {self.signal!r}")


@ATTACKS.register("mia_threshold")
class MIAThreshold(ModelAttack):
    """Global-threshold attack on the target model's loss / confidence."""

    Config = MIAThresholdConfig

    def score(self, inp: ModelMIAInput) -> np.ndarray:
        """(N,) -loss, p_y or logit-scaled p_y of the target model."""
        t = inp.target
        if self.cfg.signal == "loss":
            return -t.loss[0]
        if self.cfg.signal == "confidence":
            return t.prob[0]
        return t.logit[0]
