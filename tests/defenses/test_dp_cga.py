"""DP-CGA (defenses/dp_cga.py), DPDL's Cross-Gradient Aggregation baseline (DPDL paper, Sec. VI).

Covers the batched QP solver against scipy's NNLS, the padding and KKT properties of the
aggregate, batch-level clipping and the noise actually drawn, the two privacy readings and their
calibration, the per-edge messages and the gradient view, training on digits, and the config
checks. Statistical tests state their failure probability (for a correct implementation).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.optimize import nnls

from defenses._cga_direction import block_grams, cga_direction, segments, solve_dual_qp
from defenses.dp_cga import DPCGA, DPCGAConfig, unit_ratios
from privbench.config import RunConfig
from privbench.engine.grads import batch_grads
from privbench.engine.loop import train
from privbench.engine.runner import Built, build
from privbench.errors import ConfigError, NotApplicable
from privbench.threat.observation import ThreatModel, observe

torch.set_num_threads(1)
MARGIN = 0.5


def _run(topology: str = "ring", nodes: int = 6, rounds: int = 3, **kw: object) -> RunConfig:
    return RunConfig(dataset="digits", nodes=nodes, topology=topology, rounds=rounds,
                     batch_size=8, lr=0.05, device="cpu", eval_every=rounds, seed=1, **kw)


def _build(topology: str = "ring", nodes: int = 6, rounds: int = 3, **cfg: object) -> Built:
    return build(_run(topology, nodes, rounds), "dp_cga", cfg)


# ---------------------------------------------------------------- the QP solver


def _instances(kind: str, m: int, k: int, d: int, gen: torch.Generator
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """(m, k, d) rows M and (m, d) g0: independent Gaussians, rows nearly parallel to one
    direction (highly correlated, the usual case of cross-gradients), or nearly parallel with
    random signs (nearly opposite rows: the QP's optimum v* is ~1e4, ill-conditioned)."""
    f64 = torch.float64
    if kind == "random":
        return (torch.randn(m, k, d, generator=gen, dtype=f64),
                torch.randn(m, d, generator=gen, dtype=f64))
    base = torch.randn(m, 1, d, generator=gen, dtype=f64)
    if kind == "correlated":
        size = 0.5 + torch.rand(m, k, 1, generator=gen, dtype=f64)
        rows = base * size + 1e-3 * torch.randn(m, k, d, generator=gen, dtype=f64)
        return rows, -2 * base[:, 0] + 1e-2 * torch.randn(m, d, generator=gen, dtype=f64)
    sign = torch.where(torch.rand(m, k, 1, generator=gen) < 0.5, -1.0, 1.0).to(f64)
    rows = base * sign + 1e-4 * torch.randn(m, k, d, generator=gen, dtype=f64)
    return rows, torch.randn(m, d, generator=gen, dtype=f64)


def _nnls_direction(rows: torch.Tensor, g0: torch.Tensor) -> np.ndarray:
    """scipy's g~: v = margin + u, u = nnls(M^T, -(g0 + M^T margin)), g~ = M^T v + g0."""
    out = []
    for m, g in zip(rows.numpy(), g0.numpy(), strict=True):
        u, _ = nnls(m.T, -(g + MARGIN * m.sum(0)), maxiter=50 * len(m))
        out.append(m.T @ (u + MARGIN) + g)
    return np.stack(out)


# kind, tolerance on ||g~ - g~_nnls|| / (||g0|| + sum_k ||m_k||). The Gram form squares the
# condition number. Measured over 5 seeds: <= 4e-11 on random rows, <= 3e-12 on correlated ones;
# nearly opposite rows (cond(M M^T) ~ 1e8, v* ~ 1e4) lose ~8 digits: <= 3e-5 for K <= d and
# 1.8e-4 for 29 rows in 10 dimensions (rank-deficient Gram; g~* = 0, scipy's QR gives 1e-11).
CASES = [("random", 1e-9), ("correlated", 1e-9), ("opposite", 1e-3)]


@pytest.mark.parametrize(("kind", "tol"), CASES)
@pytest.mark.parametrize(("k", "d"), [(3, 5), (8, 40), (8, 1000), (20, 50), (29, 10)])
def test_batched_qp_matches_scipy_nnls(kind: str, tol: float, k: int, d: int) -> None:
    gen = torch.Generator().manual_seed(k * 1000 + d)
    rows, g0 = _instances(kind, 16, k, d, gen)
    gram, lin = block_grams(rows, g0, [(0, d)])  # (m, 1, k, k), (m, 1, k)
    v, solved = solve_dual_qp(gram, lin, MARGIN, 0.0, iters=200)
    assert bool(solved.all()) and bool((v >= MARGIN).all())
    mine = ((v[:, 0, None, :] @ rows)[:, 0] + g0).numpy()
    ref = _nnls_direction(rows, g0)
    scale = (g0.norm(dim=1) + rows.norm(dim=2).sum(1)).numpy()
    assert (np.linalg.norm(mine - ref, axis=1) / scale).max() <= tol
    # and never a worse objective ||g~||^2 than scipy's beyond rounding
    excess = ((mine**2).sum(1) - (ref**2).sum(1)) / scale**2
    assert excess.max() <= 10 * tol**2 + 1e-14


def test_zero_padding_rows_do_not_change_the_result() -> None:
    gen = torch.Generator().manual_seed(0)
    rows, g0 = _instances("random", 12, 4, 30, gen)
    blocks = [(0, 10), (10, 30)]
    ref, v_ref = cga_direction(rows, g0, blocks, MARGIN, 1e-12, 100)
    pad = torch.cat([rows, torch.zeros(12, 3, 30, dtype=rows.dtype)], dim=1)  # K = 4 -> 7
    got, v = cga_direction(pad, g0, blocks, MARGIN, 1e-12, 100)
    assert torch.allclose(got, ref, rtol=1e-12, atol=1e-12)
    assert torch.allclose(v[..., :4], v_ref, rtol=1e-10, atol=1e-12)
    assert torch.all(v[..., 4:] == MARGIN)  # padding duals sit at the margin
    # zero rows interleaved with real ones are inert too
    mixed = rows.clone()
    mixed[:, 1] = 0
    got2, v2 = cga_direction(mixed, g0, blocks, MARGIN, 1e-12, 100)
    ref2, _ = cga_direction(rows[:, [0, 2, 3]], g0, blocks, MARGIN, 1e-12, 100)
    assert torch.allclose(got2, ref2, rtol=1e-12, atol=1e-12) and torch.all(v2[..., 1] == MARGIN)


def _padded_rows(tr: DPCGA) -> torch.Tensor:
    """(n, K, d) each receiver's weighted received rows, rebuilt from the taps by loops."""
    taps, n = tr.taps, tr.ctx.n
    w = tr.graphs[0][0]
    k = int(torch.bincount(taps["dst"], minlength=n).max())
    rows = torch.zeros(n, k, taps["cross"].shape[1], dtype=torch.float64)
    fill = [0] * n
    for e, (i, j) in enumerate(zip(taps["src"].tolist(), taps["dst"].tolist(), strict=True)):
        rows[j, fill[j]] = w[j, i].double() * taps["cross"][e].double()
        fill[j] += 1
    return rows


@pytest.mark.parametrize("topology", ["complete", "two_hub"])
def test_aggregate_meets_the_kkt_conditions(topology: str) -> None:
    # no noise, no clipping: g~_j = M^T v + g0 with v >= margin and, per QP block, the KKT
    # conditions <m_k, g~> + eps v_k >= 0 (GEM: no conflict with any neighbour's gradient),
    # = 0 where v_k > margin. two_hub: receivers of in-degree 2 and 4 (grouped views).
    b = _build(topology, nodes=6, sigma=0.0, clip=float("inf"))
    tr = b.trainer
    tr.round(0)
    tr.round(1)
    taps = tr.taps
    rows, g0 = _padded_rows(tr), taps["g0"].double()
    agg = taps["agg_grad"].double()
    v = taps["v"]  # (n, L, K)
    assert bool(taps["qp_solved"].all()) and bool((v >= MARGIN).all())
    scale = rows.norm(dim=-1).amax() * agg.norm(dim=-1).amax()
    for blk, (a, c) in enumerate(tr.blocks):
        part = rows[:, :, a:c]  # (n, K, d_l)
        rebuilt = g0[:, a:c] + (v[:, blk, None, :] @ part)[:, 0]
        assert torch.allclose(agg[:, a:c], rebuilt, atol=1e-6 * float(scale) + 1e-7)
        grad = (part @ agg[:, a:c, None])[..., 0] + tr.cfg.qp_eps * v[:, blk]  # (n, K)
        assert float(grad.min()) >= -1e-5 * float(scale)  # dual feasibility (float32 Gram)
        slack = (v[:, blk] - MARGIN) * grad  # complementary slackness
        assert float(slack.abs().max()) <= 1e-5 * float(scale) * (1 + float(v.max()))
    # the trainer's grouped views give the padded reference computation
    ref, _ = cga_direction(rows, g0, tr.blocks, MARGIN, tr.cfg.qp_eps, 100)
    assert torch.allclose(agg, ref, rtol=1e-4, atol=1e-6)
    # and CGA differs from plain averaging here (the QP is active)
    assert not torch.allclose(agg, g0 + MARGIN * rows.sum(1), atol=1e-4)


def test_model_scope_is_one_qp_over_the_flat_vector() -> None:
    b = _build("complete", nodes=4, sigma=0.0, qp_scope="model")
    tr = b.trainer
    tr.round(0)
    tr.round(1)
    assert tr.blocks == [(0, b.ctx.fm.d)] and tr.taps["v"].shape[1] == 1
    ref, _ = cga_direction(_padded_rows(tr), tr.taps["g0"].double(), tr.blocks, MARGIN,
                           tr.cfg.qp_eps, 100)
    assert torch.allclose(tr.taps["agg_grad"].double(), ref, rtol=1e-4, atol=1e-6)
    assert len(segments(b.ctx.fm, "layer")) == len(b.ctx.fm.specs)


# ---------------------------------------------------------------- clipping, noise, update


def test_batch_level_clipping_noise_scale_and_update() -> None:
    sigma, clip = 40.0, 0.05
    b = _build(sigma=sigma, clip=clip, nesterov=True)
    tr, ctx = b.trainer, b.ctx
    tr.round(0)
    m_prev = tr.buf.clone()
    tr.round(1)
    taps, src, dst = tr.taps, tr.taps["src"], tr.taps["dst"]
    # independent recomputation from ground truth: the batch MEAN at the receiver's model,
    # divided by the expected Poisson size q_i |D_i|, then clipped as one vector
    slots, mask = ctx.truth.batches[1]
    x, y = ctx.data.gather(slots)
    owner = torch.cat([src, torch.arange(ctx.n)])
    params = torch.cat([taps["x_prev"][dst], taps["x_prev"]])
    real = mask[owner].sum(1).float()
    mean = batch_grads(ctx.fm, params, x[owner], y[owner], mask[owner])
    mean = mean * (real / taps["denom"][owner])[:, None]
    assert torch.allclose(taps["denom"], (tr.rates * tr.counts).float())
    factor = (clip / mean.norm(dim=1)).clamp(max=1.0)
    assert float(factor.max()) < 1  # every row is clipped at this C: the test bites
    clipped = mean * factor[:, None]
    noisy = torch.cat([taps["cross"], taps["self_grad_noisy"]])
    assert torch.allclose(noisy - taps["noise"], clipped, atol=1e-6)
    # the drawn noise is N(0, (sigma C / B_i)^2): m = 18 rows x 17,226 ~ 3.1e5 values,
    # sample-variance sd sqrt(2 / m) ~ 0.0025; 2% is 8 sd: P(fail) < 1e-14
    z = (noisy - clipped) * (taps["denom"][owner] / (sigma * clip))[:, None]
    assert float(z.var()) == pytest.approx(1.0, rel=0.02)
    assert abs(float(z.mean())) < 6 / math.sqrt(z.numel())  # P(fail) < 1e-8
    # the sent messages are the released rows
    log = ctx.bus.log.get(1, "cross_grad")
    for e, (i, j) in enumerate(zip(src.tolist(), dst.tolist(), strict=True)):
        hit = torch.nonzero((log.edges[:, 0] == i) & (log.edges[:, 1] == j)).flatten()
        assert torch.equal(log.payload[hit[0]], taps["cross"][e])
    # momentum and the Nesterov update of the reference code, then gossip of x^t
    beta, w = tr.cfg.momentum, tr.graphs[0][0]
    m_new = beta * m_prev + taps["agg_grad"]
    assert torch.allclose(tr.buf, m_new, atol=1e-6)
    assert torch.allclose(taps["update"], taps["agg_grad"] + beta * m_new, atol=1e-6)
    x_recv = ctx.bus.log.get(1, "model").payload  # every node's x^t (all send)
    assert torch.allclose(tr.models(), w @ x_recv - ctx.run.lr * taps["update"], atol=1e-5)


# ---------------------------------------------------------------- training


def test_learns_without_noise_and_trains_with_it() -> None:
    run = RunConfig(dataset="digits", nodes=6, topology="ring", rounds=40, batch_size=16,
                    lr=0.2, device="cpu", eval_every=40, seed=1, epsilon=8.0)
    res = train(build(run, "dp_cga", {"sigma": 0.0}).trainer)
    assert res.diverged_round is None and res.average_accuracy > 0.6  # chance: 0.1
    dp = build(run, "dp_cga", {})
    res = train(dp.trainer)
    assert res.diverged_round is None and torch.isfinite(dp.trainer.models()).all()
    assert float(dp.trainer.sigma.min()) > 0


# ---------------------------------------------------------------- privacy


def test_two_readings_per_node_and_their_order() -> None:
    run = _run("two_hub", nodes=6, rounds=50, epsilon=2.0, partition="dirichlet", alpha=0.5)
    strict = build(run, "dp_cga", {})
    reps = strict.trainer.privacy()
    assert {(r["node"], r["reading"]) for r in reps} == {(i, r) for i in range(6)
                                                         for r in ("paper", "strict")}
    by = {(r["node"], r["reading"]): r for r in reps}
    plan = strict.trainer.plan
    for i in range(6):
        s, p = by[i, "strict"], by[i, "paper"]
        assert s["mode"] == "calibrated" and p["mode"] == "paper" and p["approximate"]
        assert s["epsilon"] >= p["epsilon"]  # the same sigma: strict is the larger epsilon
        n_i, b_i = plan.releases[i], plan.divisors[i]
        assert s["noise_multiplier"] == pytest.approx(plan.sigma[i] / (2 * b_i * math.sqrt(n_i)))
        assert p["noise_multiplier"] == pytest.approx(plan.sigma[i] / math.sqrt(n_i))
        assert s["sampling"] == "poisson" and s["sample_rate"] == plan.sample_rates[i]
    assert plan.releases == (5, 5, 3, 3, 3, 3)  # hubs: 4 spokes + self; spokes: 2 hubs + self
    worst = max(by[i, "strict"]["epsilon"] for i in range(6))
    assert 2.0 * 0.99 <= worst <= 2.0 + 1e-9  # strict calibration meets the target
    # paper calibration needs far less noise (about 2 B_i times less) and meets it in its reading
    paper = build(run, "dp_cga", {"calibrate_with": "paper"})
    assert paper.trainer.sigma[0] < strict.trainer.sigma[0] / 4
    worst_p = max(r["epsilon"] for r in paper.trainer.privacy() if r["reading"] == "paper")
    assert worst_p <= 2.0 + 1e-9
    worst_s = max(r["epsilon"] for r in paper.trainer.privacy() if r["reading"] == "strict")
    assert worst_s > 2.0 * 2  # and is no bound: the strict reading of that sigma is far above


def test_per_node_sigma_rule_and_fixed_sampling_ratios() -> None:
    run = _run("two_hub", nodes=6, rounds=30, epsilon=4.0, partition="dirichlet", alpha=0.3)
    b = build(run, "dp_cga", {"sigma_rule": "per_node"})
    eps = [r["epsilon"] for r in b.trainer.privacy() if r["reading"] == "strict"]
    assert all(4.0 * 0.99 <= e <= 4.0 + 1e-9 for e in eps)
    # fixed-size batches: the without-replacement ledger halves z itself (replace-one, 2C)
    assert unit_ratios([3], [8.0], "fixed")[0]["strict"] == pytest.approx(1 / (8 * math.sqrt(3)))
    assert unit_ratios([3], [8.0], "poisson")[0]["strict"] == pytest.approx(
        1 / (16 * math.sqrt(3)))


# ---------------------------------------------------------------- messages and views


def test_per_edge_messages_and_the_cross_gradient_view() -> None:
    b = _build("two_hub", nodes=6, sigma=1.0)
    tr, log = b.trainer, b.ctx.bus.log
    for t in range(3):
        tr.round(t)
    adj = tr.graphs[0][1]
    want = {(int(i), int(j)) for j, i in torch.nonzero(adj).tolist()}
    assert (0, 1) not in want and (2, 0) in want  # CGA weights: the hubs are not linked
    for t in range(3):
        for kind in ("model", "cross_grad"):
            rec = log.get(t, kind)
            assert {tuple(e) for e in rec.edges.tolist()} == want and len(rec.edges) == len(want)
    assert set(log.kinds()) == {"model", "cross_grad"}
    taps, victim = tr.taps, 2
    (view,) = DPCGA.gradient_views(observe(b, ThreatModel("eavesdropper")), victim, [2])
    e = int(torch.nonzero(taps["src"] == victim).flatten()[0])  # lowest receiver: hub 0
    j = int(taps["dst"][e])
    assert torch.equal(view.gradient, taps["cross"][e])
    assert torch.equal(view.params, taps["x_prev"][j]) and view.kind == "gradient"
    # the curious receiver sees the same; another spoke receives nothing from the victim
    (nb,) = DPCGA.gradient_views(observe(b, ThreatModel("neighbour", (j,))), victim, [2])
    assert torch.equal(nb.gradient, view.gradient)
    with pytest.raises(NotApplicable):
        DPCGA.gradient_views(observe(b, ThreatModel("neighbour", (3,))), victim, [2])
    with pytest.raises(NotApplicable):
        DPCGA.gradient_views(observe(b, ThreatModel("eavesdropper")), victim, [2], "momentum")
    # round 0: the receivers' models are the public initialisation
    (v0,) = DPCGA.gradient_views(observe(b, ThreatModel("eavesdropper")), victim, [0])
    assert torch.equal(v0.params, tr.init_params()[0])


# ---------------------------------------------------------------- config


@pytest.mark.parametrize("bad", [
    {"qp_scope": "tensor"}, {"margin": -0.1}, {"margin": float("nan")}, {"qp_eps": -1.0},
    {"qp_iters": 0}, {"qp_iters": 2.5}, {"clip": 0.0}, {"momentum": 1.0}, {"sigma": -1.0},
    {"calibrate_with": "full"}, {"sigma_rule": "min"}, {"accountant": "gdp"},
    {"sampling": "one_sample"}, {"weights": "uniform"}, {"nesterov": "yes"},
    {"clip": float("inf")}, {"row_chunk": -1},
])
def test_bad_config_values_raise_one_line_errors(bad: dict) -> None:
    with pytest.raises(ConfigError) as err:
        DPCGAConfig(**bad)
    assert "dp_cga" in str(err.value) and "\n" not in str(err.value)


def test_directed_topology_is_refused() -> None:
    cfg = DPCGAConfig(clip=float("inf"), sigma=0.0)
    assert cfg.calibration_mode == "calibrated"
    with pytest.raises(ConfigError, match="undirected"):
        build(RunConfig(dataset="digits", nodes=4, topology="exponential", rounds=1,
                        device="cpu"), "dp_cga", {})
