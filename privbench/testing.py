"""Privacy tests in a few lines, for users' test suites and our own regression suite.

    from privbench.testing import audit, assert_bounds

    def test_my_defense_resists_inversion():
        res = audit("dyn_d2p", eps=1.0, attacks=["idlg", "mia_threshold"], rounds=20)
        assert_bounds(res, "dyn_d2p", max_psnr=15, max_auc=0.65, require_coverage=True)

`audit` trains tiny, attacks and returns the results dict of `privbench attack` (the same JSON
schema, so the same bounds as `privbench check` policies apply). `disable_noise` is a TEST-ONLY
switch that silently removes the DP noise of every defense (it zeroes the draws of the "noise"
random stream), to prove that a privacy test catches a defense that drops its noise.
"""

from __future__ import annotations

import contextlib
import dataclasses
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from privbench.config import JSONObject, RunConfig, replace_checked
from privbench.report.gate import Check, check_bound
from privbench.seeding import noise_off

TINY_RUN = {"model": "mlp", "nodes": 4, "rounds": 10, "eval_every": 10, "batch_size": 2,
            "device": "cpu"}
TINY_ATTACKS = {"idlg": {"adam_steps": 150}, "geiping": {"steps": 150}}


def audit(defense: str, eps: float | Sequence[float] = 1.0,
          attacks: Sequence[str] = ("idlg", "mia_threshold"),
          defense_config: Mapping[str, object] | None = None,
          attack_config: Mapping[str, Mapping[str, object]] | None = None,
          out: str | Path | None = None, **run: Any) -> JSONObject:
    """Train `defense` on a tiny digits setup, run `attacks`, return the audit results dict.

    Args:
        defense: defense registry key.
        eps: target ε (or a grid); ignored for non-private defenses.
        attacks: attack registry keys.
        defense_config: overrides of the defense's config.
        attack_config: per-attack config overrides (merged over fast defaults).
        out: keep the files here (default: a temporary folder, removed afterwards).
        **run: RunConfig overrides (nodes, rounds, model, seed, ...).
    """
    from privbench.pipeline import Sweep, audit_config

    base = replace_checked(RunConfig(), {**TINY_RUN, **run}, where="run")
    cfgs = {k: dict(v) for k, v in TINY_ATTACKS.items()}
    for name, over in (attack_config or {}).items():
        cfgs.setdefault(name, {}).update(over)
    grid = (eps,) if isinstance(eps, (int, float)) else tuple(eps)
    audit_cfg = audit_config("quick", [defense], list(grid), list(attacks), None,
                             {"attack_config": cfgs})
    # the tiny setting keeps the single-run, single-victim audit its golden baselines measured
    audit_cfg = dataclasses.replace(audit_cfg, inversion_batch_sizes=(), pool_victims=False,
                                    paper_settings={}, paper_readings={})
    with contextlib.ExitStack() as stack:
        folder = Path(out) if out else Path(stack.enter_context(tempfile.TemporaryDirectory()))
        runner = Sweep(base, dict(defense_config or {}), audit_cfg, folder / "audit",
                       progress=False, command=f"privbench.testing.audit({defense!r})")
        return runner.run().to_json()


def evaluate_bounds(results: JSONObject, defense: str, eps: float | None = None,
                    **bounds: Any) -> list[Check]:
    """Evaluate `privbench check` bounds (max_psnr=..., max_auc=..., ...) on matching cells."""
    cells = [c for c in results["cells"] if c["defense"] == defense
             and (eps is None or c.get("epsilon") is None or abs(c["epsilon"] - eps) < 1e-9)]
    if not cells:
        return [Check(f"{defense}", False, "no cell of this defense in the results")]
    return [chk for cell in cells for chk in check_bound(bounds, cell)]


def assert_bounds(results: JSONObject, defense: str, eps: float | None = None,
                  **bounds: Any) -> None:
    """Assert every bound holds; the message lists each failed check."""
    failed = [c for c in evaluate_bounds(results, defense, eps, **bounds) if not c.passed]
    assert not failed, "privacy bounds violated: " + "; ".join(
        f"{c.name}: {c.detail}" for c in failed)


@contextlib.contextmanager
def disable_noise() -> Iterator[None]:
    """TEST ONLY: every draw from a "noise" stream generator returns its noiseless value
    (`privbench.seeding.noise_off`, which the mechanism audit's clean replays use)."""
    with noise_off():
        yield
