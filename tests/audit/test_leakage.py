"""Leakage across the graph: placed threat models, gossip inversion, network DP, leakage map."""

from __future__ import annotations

import dataclasses
import itertools
import json

import numpy as np
import pytest
import torch

from privbench.audit.inversion import grade, invert
from privbench.audit.network_dp import pairwise_epsilon
from privbench.cli import main
from privbench.config import RunConfig
from privbench.data import files as datafiles
from privbench.engine.loop import train
from privbench.engine.runner import build
from privbench.errors import ConfigError, NotApplicable
from privbench.registry import DEFENSES
from privbench.results.provenance import code_digest
from privbench.threat.gossip_inversion import BestViews, GossipViews, LinearGossip, build_system
from privbench.threat.observation import ThreatModel, hop_distances, observe, placed
from privbench.topology import build_topology

# El Mrini et al.'s D-GD regime: one member per node (batch-1 views are the full local batch),
# a small step so releases change slowly over the first rounds
BATCH1 = dict(nodes=8, topology="ring", rounds=8, batch_size=1, lr=0.003, max_per_node=2,
              holdout=0.5, eval_every=8, device="cpu")


def _trained(defense: str, overrides: dict | None = None, **run: object):
    built = build(RunConfig(**{**BATCH1, **run}), defense, overrides)
    train(built.trainer)
    return built


def _ring(n: int = 8):
    return build_topology("ring", n, torch.Generator().manual_seed(0))


# ------------------------------------------------------------------------------- placements
def test_placements_on_a_ring() -> None:
    topo = _ring()
    assert hop_distances(topo, 0) == [0, 1, 2, 3, 4, 3, 2, 1]
    assert placed("hops:2", topo, 0).observers == (2,)
    assert placed("hops:2x2", topo, 0).observers == (2, 6)
    assert placed("node:5", topo, 0).observers == (5,)
    assert placed("nodes:3,5", topo, 0) == ThreatModel("colluding", (3, 5), "nodes:3,5")
    far = placed("random:3", topo, 0).observers
    assert len(far) == 3 and not set(far) & {0, 1, 7}
    assert len(placed("degree:2", topo, 0).observers) == 2


@pytest.mark.parametrize("spec", ["hops:5", "hops:0", "node:0", "node:9", "nodes:", "far:2",
                                  "random:9", "hops:a"])
def test_bad_placements_are_refused(spec: str) -> None:
    with pytest.raises(ConfigError):
        placed(spec, _ring(), 0)


# --------------------------------------------------------------------------- gossip inversion
def _ring_spec(n: int, releases: int, lag: int, evaluated_at: str) -> LinearGossip:
    topo = _ring(n)
    w = topo.mixing(0, "doubly").double()
    return LinearGossip("model", n, releases, lambda t: w, np.full(releases, 0.1),
                        np.ones(releases), np.zeros(releases), lag, evaluated_at, "g")


def test_constant_releases_are_recovered_exactly_two_hops_away() -> None:
    """The solver on a synthetic gossip with constant releases: exact beyond the neighbours."""
    n, d, rounds = 8, 5, 6
    spec = _ring_spec(n, rounds, 1, "message")
    g = torch.randn(n, d, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    w, y = spec.matrix(1), torch.zeros(n, d, dtype=torch.float64)
    ys = [y]
    for _ in range(rounds - 1):  # y^t = W y^{t-1} - c g (x0 = 0)
        y = w @ y - 0.1 * g
        ys.append(y)
    pairs = [(j, t) for t in range(rounds) for j in (7, 0, 1)]  # node 0 and its neighbours
    system = build_system(spec, pairs, {0}, None, rounds - 1)
    col = system.column(2, 0)
    e = np.zeros(len(system.columns))
    e[col] = 1.0
    assert system.in_row_space(e)  # node 2 is 2 hops from the attacker
    wts = system.weights(e)
    est = sum(float(wi) * ys[t][j] for (j, t), wi in zip(system.rows.tolist(), wts, strict=True))
    assert torch.allclose(est, g[2], atol=1e-8)


def test_eavesdropper_inversion_without_assumption_is_exact() -> None:
    built = _trained("d_psgd")
    obs = observe(built, ThreatModel("eavesdropper"))
    mine = DEFENSES.get("d_psgd").gradient_views(obs, 3, [0])[0]
    est = GossipViews(DEFENSES.get("d_psgd"), window=1).gradient_views(obs, 3, [0])[0]
    assert est.exact
    assert torch.allclose(est.gradient, mine.gradient, rtol=1e-3, atol=1e-5)
    assert torch.equal(est.params, mine.params)


@pytest.mark.parametrize("defense,overrides", [
    ("d_psgd", None), ("sgp", {"momentum": 0.9}), ("dp_dpsgd", {"momentum": 0.5}),
    ("dp_sgp", None), ("adp_vrsgp", None), ("dyn_d2p", None)])
def test_every_linear_gossip_declaration_matches_the_defense(defense, overrides) -> None:
    """Each defense's `linear_gossip` (mixing, lag, step schedule, release filter, where the
    release is computed): an eavesdropper's inversion without assumption equals the defense's
    own exact per-round view, gradient and model, in rounds 0, 3 and 5."""
    built = build(RunConfig(nodes=6, topology="ring", rounds=8, batch_size=4, lr=0.05,
                            max_per_node=16, epsilon=8.0, eval_every=8, device="cpu"),
                  defense, overrides)
    train(built.trainer)
    obs = observe(built, ThreatModel("eavesdropper"))
    cls = DEFENSES.get(defense)
    est = {v.round: v for v in GossipViews(cls, window=1).estimate(obs, 2).views}
    for t in (0, 3, 5):
        own = cls.gradient_views(obs, 2, [t])[0]
        assert torch.allclose(est[t].gradient, own.gradient, rtol=1e-4,
                              atol=1e-4 * float(own.gradient.abs().max()))
        assert torch.allclose(est[t].params, own.params, rtol=1e-5, atol=1e-6)


def test_unidentifiable_settings_are_not_applicable() -> None:
    built = _trained("d_psgd")
    obs = observe(built, placed("hops:2", built.ctx.topology, 2))
    with pytest.raises(NotApplicable, match="rank deficit"):  # one unknown per round
        GossipViews(DEFENSES.get("d_psgd"), window=1).estimate(obs, 2)
    defl = _trained("defl_vp", epsilon=8.0)
    obs = observe(defl, placed("hops:2", defl.ctx.topology, 2))
    with pytest.raises(NotApplicable, match="not a linear gossip"):
        BestViews(DEFENSES.get("defl_vp")).gradient_views(obs, 2, [0])


def _two_hop_psnr(built, attack: str = "idlg") -> float:
    obs = observe(built, placed("hops:2", built.ctx.topology, 2))
    run = invert(obs, BestViews(type(built.trainer)), [2], [0], attack,
                 input_shape=built.ctx.data.input_shape)
    graded = grade(run, built.ctx.data, built.ctx.truth, use_lpips=False)
    assert graded["n_graded"] == 1, run.status
    assert "gossip inversion" in run.targets[0]["source"]
    return graded["psnr"]


FMNIST = datafiles.DEBIAN["fashion-mnist"][1] / "train-images-idx3-ubyte.gz"
NEEDS_FMNIST = pytest.mark.skipif(not FMNIST.is_file(), reason="dataset-fashion-mnist missing")


@pytest.mark.parametrize("defense,dataset", [
    ("d_psgd", "digits"), ("sgp", "digits"),
    pytest.param("d_psgd", "fashion-mnist", marks=NEEDS_FMNIST),
    pytest.param("sgp", "fashion-mnist", marks=NEEDS_FMNIST)])
def test_victim_two_hops_away_is_reconstructed(defense: str, dataset: str) -> None:
    """Non-private gossip: one curious node reconstructs a victim it never hears from."""
    assert _two_hop_psnr(_trained(defense, dataset=dataset)) >= 20.0


@pytest.mark.slow  # 20 s or more on 2 cores: .ci/run runs it in its slow step
def test_dp_stops_the_two_hop_reconstruction_and_its_removal_is_caught() -> None:
    """Both ways: DP-DPSGD at eps = 1 resists; the same defense with its noise and clipping
    switched off (a deliberately broken defense) is reconstructed 2 hops away."""
    assert _two_hop_psnr(_trained("dp_dpsgd", epsilon=1.0)) < 15.0
    assert _two_hop_psnr(_trained("dp_dpsgd", {"sigma": 0.0, "clip": 1e9}, epsilon=1.0)) >= 20.0


@pytest.mark.slow
def test_noise_alone_removed_is_caught_by_inverting_gradients() -> None:
    """The subtler mutant: noise off, clipping kept. The clipped release is a rescaled gradient;
    Inverting Gradients' cosine loss reconstructs it 2 hops away (~29 dB), and at eps = 1 not."""
    assert _two_hop_psnr(_trained("dp_dpsgd", {"sigma": 0.0}, epsilon=1.0), "geiping") >= 20.0
    assert _two_hop_psnr(_trained("dp_dpsgd", epsilon=1.0), "geiping") < 15.0


# ------------------------------------------------------------------------------- network DP
def test_network_dp_falls_with_distance_and_equals_local_for_an_eavesdropper() -> None:
    built = build(RunConfig(nodes=8, topology="ring", rounds=30, batch_size=8, max_per_node=40,
                            epsilon=1.0, device="cpu"), "dp_dpsgd")
    spec = DEFENSES.get("dp_dpsgd").linear_gossip(observe(built))
    z = built.trainer.release_noise()
    topo, delta = built.ctx.topology, built.ctx.run.delta
    eav = pairwise_epsilon(spec, topo, ThreatModel("eavesdropper"), 0, z, delta, 1.0)
    assert eav["network_mu"] == pytest.approx(eav["local_full_mu"], rel=0.02)
    mus = [pairwise_epsilon(spec, topo, placed(f"hops:{h}", topo, 0), 0, z, delta)["network_mu"]
           for h in (1, 2, 3, 4)]
    assert mus[0] <= eav["local_full_mu"] * (1 + 1e-9)
    assert all(a > b for a, b in itertools.pairwise(mus)), mus
    assert mus[1] < 0.7 * mus[0]  # amplification by decentralization two hops away
    assert eav["epsilon"] == 1.0  # the calibrated guarantee caps the reported epsilon
    with pytest.raises(NotApplicable, match="without noise"):
        pairwise_epsilon(spec, topo, ThreatModel("eavesdropper"), 0, z * 0, delta)


# ------------------------------------------------------------------------------ leakage map
@pytest.mark.slow  # 20 s or more on 2 cores: .ci/run runs it in its slow step
def test_leakage_command_writes_map_and_refuses_to_overwrite(tmp_path, capsys) -> None:
    """`privbench leakage` (`privbench.commands.leakage`): the map written, then refused over."""
    out = tmp_path / "leak"
    args = ["leakage", "--defense", "d_psgd", "--distances", "2", "--sizes", "2", "--victims",
            "2", "--inversion-victims", "2", "--rounds", "6", "--members", "4", "--out", str(out),
            "--quiet"]
    assert main(args) == 0
    res = json.loads((out / "leakage.json").read_text())
    assert res["environment"]["code_sha256"] == code_digest()  # which code drew the map
    rows = {r["placement"]: r for r in res["cells"][0]["rows"]}
    assert rows["2 hops"]["inversion"]["via"] == "gossip inversion"
    assert rows["2 hops"]["inversion"]["psnr"] >= 20.0
    assert rows["2 hops"]["membership"]["status"] == "ok"
    assert "How far does a leak travel" in (out / "leakage.html").read_text()
    printed = capsys.readouterr().out
    assert "inversion PSNR (dB)" in printed and "membership AUC" in printed
    assert main(args) == 2
    assert "exists" in capsys.readouterr().err
    assert main(["leakage", "--distances", "a", "--out", str(tmp_path / "x")]) == 2


def test_audit_with_a_placed_threat_attacks_through_gossip_inversion(tmp_path) -> None:
    """`privbench attack --threat hops:2`: the audit's inversion and message MIA reach the
    victim through gossip inversion, and the results name the placement."""
    from privbench.pipeline import sweep

    run = RunConfig(**{**BATCH1, "rounds": 6})
    audit = sweep.audit_config("quick", ["d_psgd"], [8.0], ["idlg", "mia_message"], "hops:2",
                               {"inversion_rounds": (0,), "inversion_batch_sizes": (1,)})
    res = sweep.Sweep(run, {}, audit, tmp_path / "a", progress=False).run().to_json()
    attacks = res["cells"][0]["attacks"]
    inv = attacks["idlg"]
    assert inv["status"] == "ok" and inv["metrics"]["psnr"] >= 20.0, inv["status"]
    assert inv["threat"]["placement"] == "hops:2"
    assert "gossip inversion" in inv["targets"][0]["source"]
    assert attacks["mia_message"]["status"] == "ok"


def test_every_attack_of_the_leakage_map_goes_through_the_one_dispatch(monkeypatch) -> None:
    """The map mounts its inversion (once per cell, every placement batched) and its membership
    attack (once per placement) through `dispatch.run_attack`, and reports what it returns."""
    from privbench.audit import dispatch
    from privbench.audit.leakage import LeakageConfig, run_leakage

    real, calls = dispatch.run_attack, []

    def spy(built, attack, audit, seed, views=None, mount=None):
        calls.append((attack, len(mount.targets) if mount else None))
        res = real(built, attack, audit, seed, views, mount)
        if attack != "idlg":
            return res
        marked = [{**t, "psnr": 99.0} if t.get("psnr") is not None else t
                  for t in res.detail["targets"]]
        return dataclasses.replace(res, detail={**res.detail, "targets": marked})

    monkeypatch.setattr(dispatch, "run_attack", spy)
    cfg = LeakageConfig(defenses=("d_psgd",), nodes=6, rounds=4, members=2, distances=(2,),
                        sizes=(), victims=2, inversion_victims=1)
    rows = run_leakage(cfg)["cells"][0]["rows"]
    assert calls == [("idlg", 2), ("mia_message", 2), ("mia_message", 2)]
    assert [r["placement"] for r in rows] == ["2 hops", "eavesdropper"]
    assert all(r["membership"]["status"] == "ok" for r in rows)
    # the map reports the dispatch's grades: the spy's marked PSNR is what the map shows
    assert [r["inversion"]["psnr"] for r in rows] == [99.0, 99.0]
