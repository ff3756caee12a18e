"""DP-DFedSAM (defenses/dp_dfedsam.py), ADP-VRSGP's DFedSAM baseline ported to sample-level DP.

Covers: rho = 0 is DP-SGP bit for bit; the gradient is taken at the SAM point of the node's
previous privatized release (never at a point computed from the current batch); the same
noise and accounting as DP-SGP; the gradient view rebuilds the release and its SAM point from
the messages; training on digits; the config check.
"""

from __future__ import annotations

import pytest
import torch

import defenses._noisy_sum as noisy_sum_module
from defenses.dp_dfedsam import DPDFedSAM, DPDFedSAMConfig, sam_shift
from privbench.config import RunConfig
from privbench.engine.loop import train
from privbench.engine.runner import build
from privbench.errors import ConfigError, NotApplicable
from privbench.threat.observation import ThreatModel, observe

torch.set_num_threads(1)


def _run(rounds: int = 4, **kw: object) -> RunConfig:
    return RunConfig(dataset="digits", nodes=6, topology="ring", rounds=rounds, batch_size=8,
                     lr=0.5, device="cpu", eval_every=rounds, seed=1, epsilon=4.0, **kw)


def test_rho_zero_is_dp_sgp_bit_for_bit() -> None:
    a, b = build(_run(), "dp_sgp", {}), build(_run(), "dp_dfedsam", {"rho": 0.0})
    train(a.trainer)
    train(b.trainer)
    assert torch.equal(a.trainer.models(), b.trainer.models())
    for key, rec in a.ctx.bus.log.records.items():
        assert torch.equal(rec.payload, b.ctx.bus.log.records[key].payload), key
    # and rho > 0 moves the models: the shift is used
    c = build(_run(), "dp_dfedsam", {"rho": 0.5})
    train(c.trainer)
    assert not torch.allclose(a.trainer.models(), c.trainer.models())


def test_gradient_is_taken_at_the_sam_point_of_the_previous_release(monkeypatch) -> None:
    rho = 0.3
    b = build(_run(), "dp_dfedsam", {"rho": rho})
    tr = b.trainer
    tr.debug_released = {}
    points = []
    real = noisy_sum_module.clipped_grad_sum

    def spy(fm, params, *args, **kw):
        points.append(params.clone())
        return real(fm, params, *args, **kw)

    monkeypatch.setattr(noisy_sum_module, "clipped_grad_sum", spy)
    models = []
    for t in range(3):
        models.append(tr.models().clone())
        tr.round(t)
    assert torch.equal(points[0], models[0])  # round 0: nothing released yet
    for t in (1, 2):
        g = tr.debug_released[t - 1]  # (n, d) what each node released in round t-1
        want = models[t] + rho * g / g.norm(dim=1, keepdim=True)
        assert torch.allclose(points[t], want, rtol=0, atol=1e-6)
        shift = (points[t] - models[t]).norm(dim=1)
        assert torch.allclose(shift, torch.full_like(shift, rho), rtol=1e-5)


def test_sam_shift_is_zero_for_a_zero_row() -> None:
    g = torch.tensor([[3.0, 4.0], [0.0, 0.0]])
    assert torch.equal(sam_shift(g, 0.5), torch.tensor([[0.3, 0.4], [0.0, 0.0]]))


def test_same_noise_and_accounting_as_dp_sgp() -> None:
    a, b = build(_run(), "dp_sgp", {}).trainer, build(_run(), "dp_dfedsam", {}).trainer
    assert torch.equal(a.z, b.z)  # the plan's schedule, what each draws
    assert a.privacy() == b.privacy()
    cal = [r["epsilon"] for r in b.privacy() if r["mode"] == "calibrated"]
    assert max(cal) <= 4.0 * (1 + 1e-9) and max(cal) > 3.9


def test_gradient_view_is_the_release_at_its_sam_point() -> None:
    b = build(_run(rounds=3), "dp_dfedsam", {"rho": 0.3})
    tr = b.trainer
    tr.debug_released, models = {}, []
    for t in range(3):
        models.append(tr.models().clone())
        tr.round(t)
    obs, victim = observe(b, ThreatModel("eavesdropper")), 2
    for t in (0, 1, 2):
        (view,) = DPDFedSAM.gradient_views(obs, victim, [t])
        assert torch.allclose(view.gradient, tr.debug_released[t][victim], atol=1e-4)
        shift = 0.0 if t == 0 else sam_shift(tr.debug_released[t - 1], 0.3)[victim]
        assert torch.allclose(view.params, models[t][victim] + shift, atol=1e-5)
    # a neighbour misses the far side's messages: z_i^t cannot be rebuilt
    with pytest.raises(NotApplicable):
        DPDFedSAM.gradient_views(observe(b, ThreatModel("neighbour", (1,))), victim, [1])


def test_trains_on_digits() -> None:
    run = RunConfig(dataset="digits", nodes=6, topology="ring", rounds=60, batch_size=16,
                    lr=2.0, device="cpu", eval_every=60, seed=1, epsilon=8.0)
    res = train(build(run, "dp_dfedsam", {"clip": 1.0}).trainer)
    assert res.diverged_round is None and res.average_accuracy > 0.5  # chance: 0.1


@pytest.mark.parametrize("rho", [-0.1, float("nan"), float("inf")])
def test_bad_rho_is_a_one_line_error(rho: float) -> None:
    with pytest.raises(ConfigError) as err:
        DPDFedSAMConfig(rho=rho)
    assert "dp_dfedsam rho" in str(err.value) and "\n" not in str(err.value)
