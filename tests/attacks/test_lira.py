"""LiRA's variance by reference count: the "auto" rule (global below `global_below` reference
models, per example at or above), the override, bad values, and the scores each mode gives
against a direct computation of its Gaussians (Carlini et al. 2022, Alg. 1)."""

from __future__ import annotations

import numpy as np
import pytest

from attacks._mia import ModelMIAInput, Signals
from privbench.audit.reference import DEFAULT_REFERENCE_MODELS
from privbench.config import replace_checked
from privbench.errors import ConfigError
from privbench.plugins import load_plugins
from privbench.registry import ATTACKS
from privbench.results import outcome


def _lira(**cfg: object) -> object:
    load_plugins()
    cls = ATTACKS.get("lira")
    return cls(replace_checked(cls.Config(), cfg, where="lira"))


def _signals(k: int, n: int = 300, seed: int = 0) -> tuple[ModelMIAInput, np.ndarray]:
    """Balanced references (each candidate IN in exactly k / 2 of k) whose spread differs per
    example, so per-example and global variances rank candidates differently."""
    rng = np.random.default_rng(seed)
    mu, sd = rng.normal(0, 3, n), rng.uniform(0.2, 2.0, n)  # per-example centre and spread
    mask = np.argsort(rng.random((k, n)), axis=0) < k // 2  # (k, n), k / 2 True per column
    ref = mu + 1.5 * mask + sd * rng.normal(size=(k, n))
    member = rng.random(n) < 0.5
    tgt = mu + 1.5 * member + sd * rng.normal(size=n)

    def sig(v: np.ndarray) -> Signals:
        return Signals(np.zeros_like(v), np.zeros_like(v), v)
    return ModelMIAInput(sig(tgt[None]), sig(ref), mask), member


def _direct(inp: ModelMIAInput, pooled: bool) -> np.ndarray:
    """Online LiRA written out: medians per side, std per example (ddof 0) or one
    within-example std per side; log N(phi; in) - log N(phi; out)."""
    ref, mask, phi = inp.reference.logit, inp.in_mask, inp.target.logit[0]
    k = ref.shape[0]
    side = {}
    for name, m in (("in", mask), ("out", ~mask)):
        vals = ref.T[m.T].reshape(-1, k // 2)  # (n, k / 2): each candidate's values on the side
        med = np.median(vals, axis=1)
        sd = (np.full(len(med), np.sqrt(((vals - med[:, None]) ** 2).sum() / (vals.size - 1)))
              if pooled else vals.std(axis=1))
        side[name] = (med, sd)

    def logpdf(med: np.ndarray, sd: np.ndarray) -> np.ndarray:
        return -0.5 * ((phi - med) / sd) ** 2 - np.log(sd)
    return logpdf(*side["in"]) - logpdf(*side["out"])


@pytest.mark.parametrize("below", [8, 64])
def test_auto_is_global_below_the_threshold_and_per_example_from_it(below: int) -> None:
    lira = _lira(global_below=below)
    assert lira.variance_choice(below - 1)["variance"] == "global"
    assert lira.variance_choice(below)["variance"] == "per_example"
    assert lira.variance_choice(below + 2)["variance"] == "per_example"
    assert f"{below - 1} reference models < {below}" in lira.variance_choice(below - 1)[
        "variance_rule"]
    # the scores follow the choice: K = below - 2 (global), K = below (per example)
    for k, pooled in ((below - 2, True), (below, False)):
        inp, _ = _signals(k)
        np.testing.assert_allclose(lira.score(inp), _direct(inp, pooled), atol=1e-9)
        assert not np.allclose(lira.score(inp), _direct(inp, not pooled), atol=1e-3)


def test_default_is_auto_at_64_and_global_at_the_default_reference_count() -> None:
    lira = _lira()
    assert (lira.cfg.variance, lira.cfg.global_below) == ("auto", 64)
    assert lira.variance_choice(DEFAULT_REFERENCE_MODELS)["variance"] == "global"
    assert lira.reference_detail(64) == {"variance": "per_example", "variance_rule": lira.
                                         variance_choice(64)["variance_rule"]}


@pytest.mark.parametrize("variance,k,pooled", [("per_example", 8, False), ("global", 64, True)])
def test_override_wins_over_the_rule(variance: str, k: int, pooled: bool) -> None:
    inp, _ = _signals(k)
    lira, auto = _lira(variance=variance), _lira()
    assert lira.variance_choice(k) == {"variance": variance,
                                       "variance_rule": f"configured (variance = {variance!r})"}
    np.testing.assert_allclose(lira.score(inp), _direct(inp, pooled), atol=1e-9)
    assert not np.allclose(lira.score(inp), auto.score(inp), atol=1e-3)


def test_per_example_variance_pays_off_with_many_references_on_heteroscedastic_signals() -> None:
    # the spreads differ 10x across candidates: with 64 references the per-example Gaussians
    # know each one's spread and separate better than one pooled variance
    from privbench.metrics.roc import roc_curve

    inp, member = _signals(64, n=2000, seed=1)
    per, glob = (roc_curve(_lira(variance=v).score(inp), member).auc
                 for v in ("per_example", "global"))
    assert per > glob


@pytest.mark.parametrize("cfg,needle", [({"variance": "fixed"}, "auto, per_example, global"),
                                        ({"global_below": 0}, "global_below must be >= 1"),
                                        ({"fixed_variance": True}, "accepted: online, variance")])
def test_bad_variance_settings_name_what_is_accepted(cfg: dict, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        _lira(**cfg)


@pytest.mark.parametrize("cfg,variance", [({}, "global"), ({"global_below": 2}, "per_example"),
                                          ({"variance": "global", "global_below": 2}, "global")])
def test_the_audit_record_says_which_variance_was_used_and_why(cfg: dict, variance: str) -> None:
    """Through the one dispatch, as the audit sweep runs it: 2 reference systems."""
    from privbench.audit.config import AuditConfig
    from privbench.audit.dispatch import run_attack
    from tests.attacks.test_mia import _tiny

    audit = AuditConfig(attacks=("lira",), reference_models=2, attack_config={"lira": cfg})
    res = run_attack(_tiny("sgp"), "lira", audit, seed=0)
    assert res.status == outcome.OK, res.status
    assert (res.detail["variance"], res.detail["reference_models"]) == (variance, 2)
    rule = res.detail["variance_rule"]
    assert rule.startswith("configured" if "variance" in cfg else "auto: 2 reference models")
