"""Mutation tests for the gate: deliberately broken defenses must fail it, the correct one pass.

A privacy check is trusted once it has failed on a broken defense (DESIGN.md, "Privacy
accounting"). Each mutant is DP-SGP (`defenses/dp_sgp.py`) broken in one way, built here in the
test (a subclass swapped into the registry under the same name, or a patched module function),
never in the library:

| mutant | break | what must catch it |
|---|---|---|
| noise x 0.3 | noise std x 0.3, claim unchanged (ε = 1 claimed, about 6.8 spent) | canary audit |
| noise x 0 | no noise | canary audit (and the attacks) |
| clipping off | per-sample gradients not clipped, noise still sigma x C | canary audit |
| unnoised message | the clean clipped gradient also sent, as an uncovered kind | coverage |
| fixed batches | fixed-size batches drawn, Poisson still accounted | sampling match |

The audit is the quick preset's (`privbench attack --preset quick`) for DP-SGP at ε = 1, checked
against the shipped `policy.toml`. Each run trains twice (the cell and the canary audit's run):
about 1 minute per defense on 2 CPU cores, so the module is `slow` (opt-in):

    PYTHONPATH=$PWD python -m pytest -m slow tests/regression/test_mutants.py
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from privbench.config import RunConfig, replace_checked
from privbench.engine.messages import MessageKind
from privbench.pipeline import sweep
from privbench.plugins import load_plugins
from privbench.registry import DEFENSES
from privbench.report import gate

pytestmark = pytest.mark.slow
HERE = Path(__file__).parent
load_plugins()

from defenses import _noisy_sum, dp_sgp  # noqa: E402  (registered by load_plugins)


def quick_audit(out: Path, defenses: tuple[str, ...] = ("dp_sgp",)) -> dict:
    """The quick preset's audit at ε = 1 (the shipped policy's setting)."""
    p = sweep.PRESETS["quick"]
    base = replace_checked(RunConfig(), {**p["run"], "device": "cpu"}, where="run")
    cfg = sweep.audit_config("quick", list(defenses), [1.0], None, None, {})
    return sweep.Sweep(base, {}, cfg, out, progress=False).run().to_json()


def failed_checks(results: dict) -> list[gate.Check]:
    """The failed checks of the shipped policy (plus the sampling match) on dp_sgp@1."""
    policy = gate.load_policy(HERE / "policy.toml")
    policy["bound"].append({"defense": "*", "eps": 1.0, "require_sampling_match": True})
    return [c for c in gate.run_checks(results, policy)
            if not c.passed and c.name.startswith("dp_sgp@")]


def canary(results: dict) -> dict:
    cell = next(c for c in results["cells"] if c["defense"] == "dp_sgp")
    return cell["attacks"]["canary"]


def scaled_noise(factor: float) -> type:
    class ScaledNoise(dp_sgp.DPSGP):
        def noise_std(self, t: int) -> torch.Tensor:
            return super().noise_std(t) * factor  # the claim is still the calibrated one

    return ScaledNoise


class UnnoisedMessage(dp_sgp.DPSGP):
    """Also sends its clean clipped mean gradient to its out-neighbours."""

    kinds = (*dp_sgp.DPSGP.kinds,
             MessageKind("clean_gradient", covered=False, description="clean clipped gradient"))

    def round(self, t: int) -> None:
        ctx = self.ctx
        x, y, mask = ctx.draw(t, rates=self.rates)
        sums, _ = _noisy_sum.clipped_grad_sum(ctx.fm, self.models(), x, y, mask, self.cfg.clip)
        ctx.bus.broadcast(t, "clean_gradient", sums / ctx.run.batch_size,
                          self.mixer.adjacency(t))
        super().round(t)


class FixedBatches(dp_sgp.DPSGP):
    """Draws fixed-size batches without replacement; its ledger still accounts Poisson."""

    def round(self, t: int) -> None:
        ctx = self.ctx
        z = self.models()
        x, y, mask = self.sample_batch(t)
        sums, _ = _noisy_sum.clipped_grad_sum(ctx.fm, z, x, y, mask, self.cfg.clip)
        u = torch.randn(z.shape, generator=ctx.streams.get("noise"), device=ctx.device)
        x_half = self.x - ctx.run.lr * (sums + self.noise_std(t) * u) / ctx.run.batch_size
        self.x, self.w = dp_sgp.push_sum(ctx.bus, self.mixer, t, x_half, self.w)


def no_clipping(monkeypatch) -> None:
    real = _noisy_sum.clipped_grad_sum

    def unclipped(fm, params, x, y, mask, bound, *args, **kwargs):
        return real(fm, params, x, y, mask, math.inf, *args, **kwargs)

    monkeypatch.setattr(_noisy_sum, "clipped_grad_sum", unclipped)


@pytest.fixture(scope="module")
def correct(tmp_path_factory) -> dict:
    return quick_audit(tmp_path_factory.mktemp("correct") / "audit", ("sgp", "dp_sgp"))


def test_the_correct_defense_passes_the_shipped_policy(correct):
    checks = gate.run_checks(correct, gate.load_policy(HERE / "policy.toml"))
    failed = [f"{c.name}: {c.detail}" for c in checks if not c.passed]
    assert not failed, failed
    audit = canary(correct)
    assert audit["metrics"]["empirical_epsilon"] <= 1.0 < audit["metrics"]["empirical_epsilon_cap"]


def test_noise_times_0_3_fails_by_the_empirical_audit(monkeypatch, tmp_path):
    monkeypatch.setitem(DEFENSES._items, "dp_sgp", scaled_noise(0.3))
    res = quick_audit(tmp_path / "audit")
    metrics = canary(res)["metrics"]
    assert metrics["empirical_epsilon"] > 1.0, metrics
    assert metrics["empirical_epsilon_cap"] > metrics["empirical_epsilon"]
    assert any("max_empirical_ratio" in c.name for c in failed_checks(res))


@pytest.mark.parametrize("mutant", ["noise x 0", "clipping off"])
def test_no_noise_or_no_clipping_fails_by_the_empirical_audit(monkeypatch, tmp_path, mutant):
    if mutant == "noise x 0":
        monkeypatch.setitem(DEFENSES._items, "dp_sgp", scaled_noise(0.0))
    else:
        no_clipping(monkeypatch)
    res = quick_audit(tmp_path / "audit")
    assert canary(res)["metrics"]["empirical_epsilon"] > 2.0
    assert any("max_empirical_ratio" in c.name for c in failed_checks(res))


def test_an_unnoised_message_fails_coverage(monkeypatch, tmp_path):
    monkeypatch.setitem(DEFENSES._items, "dp_sgp", UnnoisedMessage)
    failed = failed_checks(quick_audit(tmp_path / "audit"))
    assert any("require_coverage" in c.name and "clean_gradient" in c.detail for c in failed)


def test_poisson_claimed_for_fixed_batches_fails_the_sampling_match(monkeypatch, tmp_path):
    monkeypatch.setitem(DEFENSES._items, "dp_sgp", FixedBatches)
    res = quick_audit(tmp_path / "audit")
    assert res["cells"][0]["sampling_drawn"] == ["fixed_without_replacement"]
    assert any("require_sampling_match" in c.name for c in failed_checks(res))



def table() -> None:  # pragma: no cover - prints the README's table; run by hand
    """PYTHONPATH=$PWD python -c 'from tests.regression.test_mutants import table; table()'

    The canary audit and the structural checks of every mutant (the quick preset's canary audit
    alone: its numbers equal those of the full audit, which derives its generator per attack).
    """
    import contextlib
    import tempfile
    from unittest import mock

    p = sweep.PRESETS["quick"]
    base = replace_checked(RunConfig(), {**p["run"], "device": "cpu"}, where="run")
    cfg = sweep.audit_config("quick", ["dp_sgp"], [1.0], ["canary"], None, {})
    keep = ("max_empirical_ratio", "require_coverage", "require_sampling_match")

    def registered(cls: type) -> contextlib.AbstractContextManager:
        return mock.patch.dict(DEFENSES._items, {"dp_sgp": cls})

    real = _noisy_sum.clipped_grad_sum
    unclipped = mock.patch.object(
        _noisy_sum, "clipped_grad_sum",
        lambda fm, params, x, y, mask, bound, *a, **k: real(fm, params, x, y, mask, math.inf,
                                                            *a, **k))
    mutants = {"correct": contextlib.nullcontext(), "noise x 0.3": registered(scaled_noise(0.3)),
               "noise x 0": registered(scaled_noise(0.0)), "clipping off": unclipped,
               "unnoised message": registered(UnnoisedMessage),
               "Poisson claimed, fixed batches": registered(FixedBatches)}
    for name, patch in mutants.items():
        with patch, tempfile.TemporaryDirectory() as tmp:
            res = sweep.Sweep(base, {}, cfg, Path(tmp) / "a", progress=False).run().to_json()
        cell = res["cells"][0]
        audit = cell["attacks"]["canary"]
        m = audit.get("metrics", {})
        est = (audit.get("intervals") or {}).get("estimated_epsilon", [math.nan, math.nan])
        policy = gate.load_policy(HERE / "policy.toml")
        policy["bound"].append({"defense": "*", "eps": 1.0, "require_sampling_match": True})
        failed = [c.name.split(" ", 1)[1] for c in gate.run_checks(res, policy)
                  if not c.passed and c.name.split(" ", 1)[-1] in keep]
        print(f"| {name} | {m.get('empirical_epsilon', float('nan')):.2f} | "
              f"{m.get('empirical_epsilon_cap', float('nan')):.2f} | "
              f"{m.get('estimated_epsilon', float('nan')):.2f} [{est[0]:.2f}, {est[1]:.2f}] | "
              f"{', '.join(failed) or 'none'} | {cell['sampling_drawn']} |", flush=True)
