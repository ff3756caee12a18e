"""MUFFLIATO (defenses/muffliato.py), DPDL's peer-to-peer amplification baseline (DPDL paper,
Sec. VI).

Covers the spectral constants (omega, K), the accelerated gossip against an independent
recursion and against plain gossip, the noisy release and its noise scale, which rounds sample
and release, the accounting over ceil(T / K) releases (equal to DP-DPSGD's at the same
releases), the gradient view, training on digits, and the config checks. Statistical tests
state their failure probability (for a correct implementation).
"""

from __future__ import annotations

import math

import pytest
import torch

from defenses._node_dp import gaussian_node_reports
from defenses.muffliato import (
    Muffliato,
    MuffliatoConfig,
    chebyshev_omega,
    mixing_steps,
    second_eigenvalue,
)
from privbench.config import RunConfig
from privbench.engine.loop import train
from privbench.engine.runner import Built, build
from privbench.errors import ConfigError, NotApplicable
from privbench.threat.observation import ThreatModel, observe

torch.set_num_threads(1)


def _run(topology: str = "ring", nodes: int = 6, rounds: int = 6, **kw: object) -> RunConfig:
    return RunConfig(dataset="digits", nodes=nodes, topology=topology, rounds=rounds,
                     batch_size=8, lr=0.05, device="cpu", eval_every=rounds, seed=1, **kw)


def _build(topology: str = "ring", nodes: int = 6, rounds: int = 6, **cfg: object) -> Built:
    return build(_run(topology, nodes, rounds), "muffliato", cfg)


# ---------------------------------------------------------------- spectral constants


def test_omega_and_steps_from_the_spectral_gap() -> None:
    # a ring of 8 with Metropolis weights 1/3: eigenvalues 1/3 + 2/3 cos(2 pi k / 8)
    mu = 1 / 3 + 2 / 3 * math.cos(2 * math.pi / 8)
    b = _build("ring", nodes=8)
    assert b.trainer.mu == pytest.approx(mu, abs=1e-6)  # W is float32
    assert b.trainer.omega == pytest.approx(2 / (1 + math.sqrt(1 - mu * mu)))
    assert b.trainer.steps == math.ceil(1 / math.sqrt(1 - mu)) == 3
    # the two-hub graph with CGA's weights, N = 10: K = 3
    assert build(_run("two_hub", nodes=10), "muffliato", {}).trainer.steps == 3
    # a complete graph averages in one step: omega 1, K 1
    w = torch.full((5, 5), 0.2)
    assert second_eigenvalue([w]) == pytest.approx(0.0, abs=1e-12)
    assert chebyshev_omega(0.0) == 1.0 and mixing_steps(0.0) == 1
    # disjoint copies (LiRA's reference runs) mix at one copy's rate; a periodic walk is refused
    ring = b.trainer.graphs[0][0]
    assert second_eigenvalue([torch.block_diag(ring, ring, ring)]) == pytest.approx(mu, abs=1e-6)
    flip = torch.tensor([[0.0, 1.0], [1.0, 0.0]])  # eigenvalues 1 and -1
    with pytest.raises(ConfigError, match="eigenvalue -1"):
        second_eigenvalue([flip])
    # Muffliato's own gamma is this omega for its lazy walk (mu = 1 - lambda_2 / 2)
    lam = 0.1
    gamma = 2 * (1 - math.sqrt(lam * (1 - lam / 4))) / (1 - lam / 2) ** 2
    assert chebyshev_omega(1 - lam / 2) == pytest.approx(gamma, rel=1e-12)


# ---------------------------------------------------------------- gossip and release


def _gossip_only(b: Built, monkeypatch: pytest.MonkeyPatch) -> torch.Tensor:
    """Replace the release by y^0 = x (no gradient, no noise); distinct random start models."""
    monkeypatch.setattr(b.trainer, "_noisy_gradient", lambda t: torch.zeros_like(b.trainer.x))
    b.trainer.x = torch.randn(b.trainer.x.shape, generator=torch.Generator().manual_seed(0))
    return b.trainer.x.clone()


def test_accelerated_gossip_follows_the_chebyshev_recursion(monkeypatch) -> None:
    b = _build("ring", nodes=8, rounds=3)
    tr = b.trainer
    y0 = _gossip_only(b, monkeypatch)
    w, omega = tr.graphs[0][0].double(), tr.omega
    ys = [y0.double(), w @ y0.double()]  # independent recursion in float64
    for _ in range(tr.steps - 1):
        ys.append(omega * (w @ ys[-1]) + (1 - omega) * ys[-2])
    for t in range(tr.steps):
        tr.round(t)
    assert torch.allclose(tr.models().double(), ys[tr.steps], atol=1e-5)
    # the average is kept, and the messages are y^0, y^1, y^2
    assert torch.allclose(tr.models().mean(0), y0.mean(0), atol=1e-5)
    log = b.ctx.bus.log
    assert torch.allclose(log.get(0, "model").payload.double(), ys[0], atol=1e-6)
    for k in range(1, tr.steps):
        assert torch.allclose(log.get(k, "gossip").payload.double(), ys[k], atol=1e-5)


def test_acceleration_mixes_faster_than_plain_gossip(monkeypatch) -> None:
    def spread(acceleration: str) -> float:
        b = build(_run("ring", nodes=16, rounds=8), "muffliato",
                  {"gossip_steps": 8, "acceleration": acceleration})
        y0 = _gossip_only(b, monkeypatch)
        for t in range(8):
            b.trainer.round(t)
        return float((b.trainer.models() - y0.mean(0)).norm() / (y0 - y0.mean(0)).norm())

    plain, cheb = spread("none"), spread("chebyshev")
    # ring of 16: mu = 0.9163, plain 8 steps contract by ~mu^8 = 0.50, Chebyshev far more
    assert cheb < 0.5 * plain < 0.5


def _sent_noise_variance(b: Built, sigma: float, clip: float) -> float:
    """Round 0: the variance, in units of (sigma C)^2, of what the sent y^0 adds to the clean
    step x - lr sums / B (1 for a correct MUFFLIATO)."""
    tr, ctx = b.trainer, b.ctx
    x_before = tr.x.clone()
    tr.round(0)
    clean = x_before - ctx.run.lr * tr.taps["sums"] / tr.taps["denom"][:, None]
    sent = ctx.bus.log.get(0, "model").payload
    z = (clean - sent) * tr.taps["denom"][:, None] / (ctx.run.lr * sigma * clip)
    return float(z.var())


def test_release_rounds_sample_and_add_the_calibrated_noise() -> None:
    sigma, clip = 30.0, 0.1
    b = _build("ring", nodes=6, rounds=6, sigma=sigma, clip=clip, gossip_steps=3)
    tr, ctx = b.trainer, b.ctx
    # the sent y^0 carries N(0, (sigma C)^2) per coordinate (divided by B, times lr): 6 rows x
    # d = 4,362 ~ 2.6e4 values, sample-variance sd sqrt(2 / m) < 0.01; 5% is > 5 sd: P(fail)
    # < 1e-6
    assert _sent_noise_variance(b, sigma, clip) == pytest.approx(1.0, rel=0.05)
    for t in range(1, 6):
        tr.round(t)
    # only the release rounds draw a batch; the others only communicate
    assert sorted(ctx.truth.batches) == [0, 3]
    assert ctx.bus.log.rounds("model") == [0, 3]
    assert ctx.bus.log.rounds("gossip") == [1, 2, 4, 5]


def test_a_muffliato_sending_its_clean_step_is_caught(monkeypatch) -> None:
    """Mutant: the noise is added to the node's own model after its clean step was sent."""

    class CleanRelease(Muffliato):
        def round(self, t: int) -> None:
            ctx = self.ctx
            w, adj, _, _ = self.graphs[0]
            noisy = self._noisy_gradient(t)
            clean = self.x - ctx.run.lr * self.taps["sums"] / self.taps["denom"][:, None]
            sent = ctx.bus.broadcast(t, "model", clean, adj)
            self.prev, self.x = self.x - ctx.run.lr * noisy, w @ sent

    b = _build("ring", nodes=6, rounds=6, sigma=30.0, clip=0.1, gossip_steps=3)
    b.trainer.__class__ = CleanRelease
    assert _sent_noise_variance(b, 30.0, 0.1) < 1e-6


# ---------------------------------------------------------------- privacy


def test_accounting_composes_one_release_per_block() -> None:
    run = _run("ring", nodes=6, rounds=30, epsilon=2.0, delta=1e-5)
    tr = build(run, "muffliato", {"gossip_steps": 3}).trainer
    assert tr.releases == 10
    cal = [r for r in tr.privacy() if r["mode"] == "calibrated"]
    assert len(cal) == 6 and max(r["epsilon"] for r in cal) <= 2.0 * (1 + 1e-9)
    assert max(r["epsilon"] for r in cal) > 1.9  # calibrated to the target, not far below
    # the same reports as DP-DPSGD's accounting of 10 releases at this sigma and rate
    ref = gaussian_node_reports(tr.rates.tolist(), tr.sigma.tolist(), 1e-5, 10, "rdp",
                                "poisson", "x")
    assert [r["epsilon"] for r in tr.privacy()] == pytest.approx([r["epsilon"] for r in ref])
    # accounting all 30 rounds as releases would need more noise: the block structure counts
    one_per_round = build(run, "muffliato", {"gossip_steps": 1}).trainer
    assert float(one_per_round.sigma[0]) > float(tr.sigma[0])
    off = build(run, "muffliato", {"sigma": 0.0}).trainer.privacy()
    assert math.isinf(float(off[1]["epsilon"]))  # no noise: no guarantee


# ---------------------------------------------------------------- attack surface


def test_gradient_view_is_the_noisy_release() -> None:
    b = _build("ring", nodes=6, rounds=7, sigma=1.0, gossip_steps=3)
    tr = b.trainer
    noisy = {}
    for t in range(7):
        tr.round(t)
        if t % 3 == 0:
            noisy[t] = tr.taps["noisy"].clone()
    obs, victim = observe(b, ThreatModel("eavesdropper")), 2
    for t in (0, 3, 6):
        (view,) = Muffliato.gradient_views(obs, victim, [t])
        assert torch.allclose(view.gradient, noisy[t][victim], rtol=1e-3, atol=1e-3)
    (v0,) = Muffliato.gradient_views(obs, victim, [0])
    assert torch.equal(v0.params, tr.init_params()[0])
    with pytest.raises(NotApplicable, match="gossip step"):
        Muffliato.gradient_views(obs, victim, [4])
    # a neighbour misses the far side's gossip messages: x_i^t cannot be rebuilt
    with pytest.raises(NotApplicable):
        Muffliato.gradient_views(observe(b, ThreatModel("neighbour", (1,))), victim, [3])


# ---------------------------------------------------------------- training


def test_learns_without_noise_and_trains_with_it() -> None:
    # ring of 6: K = 2, so 120 rounds are 60 gradient steps
    run = RunConfig(dataset="digits", nodes=6, topology="ring", rounds=120, batch_size=16,
                    lr=0.5, device="cpu", eval_every=120, seed=1, epsilon=8.0)
    res = train(build(run, "muffliato", {"sigma": 0.0}).trainer)
    assert res.diverged_round is None and res.average_accuracy > 0.6  # chance: 0.1
    dp = build(run, "muffliato", {})
    res = train(dp.trainer)
    assert res.diverged_round is None and float(dp.trainer.sigma.min()) > 0


# ---------------------------------------------------------------- config


@pytest.mark.parametrize("bad", [
    {"clip": 0.0}, {"gossip_steps": -1}, {"gossip_steps": 2.5}, {"gossip_steps": True},
    {"acceleration": "nesterov"}, {"sigma": -1.0}, {"sigma_rule": "min"},
    {"accountant": "gdp"}, {"sampling": "one_sample"}, {"weights": "uniform"},
    {"clip": math.inf},
])
def test_bad_config_values_raise_one_line_errors(bad: dict) -> None:
    with pytest.raises(ConfigError) as err:
        MuffliatoConfig(**bad)
    assert "muffliato" in str(err.value) and "\n" not in str(err.value)


def test_no_clipping_is_accepted_only_without_noise() -> None:
    assert math.isinf(MuffliatoConfig(clip=math.inf, sigma=0.0).clip)
    with pytest.raises(ConfigError, match="unbounded sensitivity"):
        MuffliatoConfig(clip=math.inf, sigma=1.0)


def test_directed_topology_is_refused() -> None:
    with pytest.raises(ConfigError, match="undirected"):
        build(RunConfig(dataset="digits", nodes=4, topology="exponential", rounds=1,
                        device="cpu"), "muffliato", {})
