"""mia_message at scale: a subset of rounds (recorded and attacked) and of candidates, and the
"span" statistic that keeps the attack at full strength on a subset.

Without the subsets the attack needs the whole run's log (8 GB for 20 nodes x 600 rounds of the
MLP) and an N x N solve per round with N = every member and held-out sample of the victim (3,000
+ 3,000 per node on Fashion-MNIST), which kept it off every Fashion-MNIST setting. The
regression statistic needs the whole batch among the candidates to be exact; "span" does not.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from attacks.mia_message import MIAMessage, MIAMessageConfig
from privbench.audit.candidates import SampleRule, candidates, draw_sample, sample_generator
from privbench.audit.config import AuditConfig
from privbench.audit.membership import membership_scores, run_membership
from privbench.commands.common import add_audit_sets
from privbench.config import RunConfig
from privbench.engine.grads import per_sample_grads
from privbench.engine.loop import train
from privbench.engine.messages import RecordPolicy
from privbench.engine.runner import build
from privbench.errors import ConfigError, NotApplicable
from privbench.pipeline.cells import needed_rounds
from privbench.plugins import load_plugins
from privbench.registry import DEFENSES
from privbench.threat.observation import GradientView, ThreatModel, observe

load_plugins()


def test_attacked_rounds_are_evenly_spaced_first_and_last_included() -> None:
    picked = MIAMessageConfig(rounds=5).attacked_rounds(100)
    assert picked is not None and len(picked) == 5 and min(picked) == 0 and max(picked) == 99
    gaps = np.diff(sorted(picked))
    assert gaps.max() - gaps.min() <= 1
    assert MIAMessageConfig().attacked_rounds(100) is None  # 0: every round
    assert MIAMessageConfig(rounds=100).attacked_rounds(100) is None
    for field in ("rounds", "candidates"):
        with pytest.raises(ConfigError, match=f"mia_message.{field} must be >= 0"):
            MIAMessageConfig(**{field: -1})


def test_the_candidates_cap_limits_each_victim_and_side_of_the_sample() -> None:
    run = RunConfig(nodes=3, rounds=1, max_per_node=30, holdout=0.5, device="cpu")
    data = build(run, "sgp").ctx.data
    gen = torch.Generator().manual_seed(0)
    picks, sample = draw_sample(data, [0, 1, 2], SampleRule(), gen, cap=4)
    for v, idx in zip((0, 1, 2), picks, strict=True):
        c = int(data.counts[v])
        assert (idx < c).sum() == 4 and (idx >= c).sum() == 4  # members, then held out
        assert len(set(idx.tolist())) == 8 and idx.max() < c + int(data.counts_out[v])
    assert sample["members"] == sample["nonmembers"] == 12
    assert sample["per_node"] == {"0": [4, 4], "1": [4, 4], "2": [4, 4]}


def test_the_run_records_only_the_attacked_rounds_and_their_neighbours() -> None:
    run = RunConfig(rounds=50)
    every = needed_rounds(run, AuditConfig(attacks=("mia_message",)), "sgp")
    assert every.rounds is None
    audit = AuditConfig(attacks=("idlg", "mia_message"),
                        attack_config={"mia_message": {"rounds": 3}})
    kept = needed_rounds(run, audit, "sgp").rounds
    assert kept is not None
    picked = MIAMessageConfig(rounds=3).attacked_rounds(50)
    assert picked == {0, 24, 49}
    assert kept == {0, 1, 2, 23, 24, 25, 48, 49}  # idlg's rounds 0-2, the picked ones +- 1
    placed = AuditConfig(attacks=("mia_message",), threat="hops:1",
                         attack_config={"mia_message": {"rounds": 3}})
    assert needed_rounds(run, placed, "sgp").rounds is None  # gossip inversion reads every round
    bad = AuditConfig(attacks=("mia_message",), attack_config={"mia_message": {"rounds": -2}})
    with pytest.raises(ConfigError, match="rounds must be >= 0"):
        needed_rounds(run, bad, "sgp")


def _with_views() -> list[str]:
    return [name for name in DEFENSES.names() if hasattr(DEFENSES.get(name), "gradient_views")]


@pytest.mark.parametrize("defense", _with_views())
def test_recording_the_attacked_rounds_loses_no_view(defense: str) -> None:
    # a view of round t reads other rounds' messages (SGP's t + 1, DP-SGP's t - 1, ADP-VRSGP's
    # gradient fusion t - 2): the subset the run records must give every view the whole log gives
    run = RunConfig(nodes=4, rounds=20, max_per_node=24, holdout=0.5, batch_size=8, device="cpu",
                    eval_every=20, epsilon=8.0, topology="complete")
    cfg = {"rounds": 4, "candidates": 5}
    audit = AuditConfig(attacks=("mia_message",), attack_config={"mia_message": cfg})
    results: list[dict | str] = []
    for policy in (needed_rounds(run, audit, defense), RecordPolicy()):
        built = build(run, defense, policy=policy)
        train(built.trainer)
        try:
            results.append(run_membership(built, [0, 1], "mia_message", cfg,
                                          threat=ThreatModel("eavesdropper")))
        except NotApplicable as exc:
            results.append(str(exc))
    subset, full = results
    assert isinstance(subset, str) == isinstance(full, str), subset
    if isinstance(full, str):
        pytest.skip(f"{defense}: {full}")
    assert subset["rounds_attacked"] == full["rounds_attacked"] > 0
    assert subset["rounds_not_applicable"] == full["rounds_not_applicable"]
    assert subset["n_members"] == 2 * 5 and subset["n_nonmembers"] == 2 * 5


def test_a_subset_of_candidates_gets_the_scores_it_gets_among_all() -> None:
    # the cosine statistic scores each candidate on its own: the subset's scores are the full
    # set's scores of the same candidates (the regression fits them jointly, so it is not)
    run = RunConfig(nodes=4, rounds=12, max_per_node=24, holdout=0.5, batch_size=8, device="cpu",
                    eval_every=12)
    built = build(run, "sgp")
    train(built.trainer)
    obs = {v: observe(built, ThreatModel("eavesdropper")) for v in (0, 2)}
    data, dev = built.ctx.data, torch.device("cpu")
    cfg = {"statistic": "cosine", "rounds": 5}
    full, full_labels, _ = membership_scores(obs, data, "mia_message", cfg,
                                             torch.Generator().manual_seed(3), dev)
    part, labels, info = membership_scores(obs, data, "mia_message", {**cfg, "candidates": 4},
                                           torch.Generator().manual_seed(3), dev)
    assert info["candidate_cap"] == 4 and info["rounds_attacked"] == 2 * 5
    picks, _ = draw_sample(data, [0, 2], SampleRule(), sample_generator(run.seed), cap=4)
    sizes = [len(candidates(data, v)[1]) for v in (0, 2)]
    expect = np.concatenate([picks[0], sizes[0] + picks[1]])  # the full ordering's rows
    assert len(expect) == 2 * 8 and not np.array_equal(expect, np.arange(len(expect)))
    np.testing.assert_allclose(part, full[expect], rtol=1e-6)
    assert labels.tolist() == full_labels[expect].tolist()


def test_attack_config_keys_can_be_set_on_the_command_line() -> None:
    sets: dict = {"attack_config": {"geiping": {"steps": 10}}}  # from a config file
    add_audit_sets(sets, ["lr=0.1", "audit.victim=2",
                           "audit.attack_config.mia_message.rounds=100",
                           "audit.attack_config.mia_message.candidates=256"])
    assert sets == {"victim": "2", "attack_config": {
        "geiping": {"steps": 10}, "mia_message": {"rounds": "100", "candidates": "256"}}}
    for bad in ("audit.attack_config.mia_message=3", "audit.attack_config.a.b.c=1"):
        with pytest.raises(ConfigError, match=r"audit\.attack_config\.ATTACK\.KEY=VALUE"):
            add_audit_sets({}, [bad])


def _batch_view(built, batch: torch.Tensor, x: torch.Tensor, y: torch.Tensor, noise: float,
                gen: torch.Generator) -> GradientView:
    """The mean gradient of candidates `batch` at the shared initial model, plus Gaussian noise
    of `noise` per coordinate (0: the raw batch gradient an undefended node releases)."""
    fm = built.ctx.fm
    params = built.trainer.models()[0]  # (d,)
    g = per_sample_grads(fm, params[None], x[batch][None], y[batch][None])[0].mean(dim=0)
    g = g + noise * torch.randn(g.shape, generator=gen)
    return GradientView(victim=0, round=0, params=params, gradient=g, kind="gradient", mask=None,
                        batch_size=len(batch), source="test")


@pytest.mark.parametrize("model,applies", [("mlp", True), ("cnn", False)])
def test_span_puts_the_batch_at_one_and_noise_makes_it_chance(model: str, applies: bool) -> None:
    built = build(RunConfig(nodes=3, rounds=1, max_per_node=80, holdout=0.5, batch_size=8,
                            device="cpu", model=model), "sgp")
    x, y, _ = candidates(built.ctx.data, 0)  # (80, 1, 8, 8): 40 members, 40 held out
    gen = torch.Generator().manual_seed(0)
    batch = torch.randperm(len(y), generator=gen)[:8]
    inside = np.isin(np.arange(len(y)), batch.numpy())
    atk = MIAMessage(MIAMessageConfig(statistic="all"))
    raw, _ = atk.score_all(built.ctx.fm, [_batch_view(built, batch, x, y, 0.0, gen)], x, y)
    if not applies:  # a conv first layer: no row-space test, NaN (never graded "strongest")
        assert np.isnan(raw["span"]).all() and np.isfinite(raw["regression"]).all()
        return
    assert raw["span"][inside].min() > 1 - 1e-6  # in the span of the batch's inputs
    assert raw["span"][~inside].max() < 0.999  # digits images are not in 8 others' span
    noisy, _ = atk.score_all(built.ctx.fm, [_batch_view(built, batch, x, y, 1.0, gen)], x, y)
    assert raw["span"][inside].min() - noisy["span"][inside].max() > 0.05
    # noise-dominated: the row space is a random one, members no higher than the others
    assert noisy["span"][inside].mean() < np.quantile(noisy["span"][~inside], 0.95)


def test_span_takes_the_max_over_rounds() -> None:
    # a member is in one of the attacked batches only: its best round decides, not the mean
    built = build(RunConfig(nodes=3, rounds=1, max_per_node=80, holdout=0.5, batch_size=8,
                            device="cpu"), "sgp")
    x, y, _ = candidates(built.ctx.data, 0)
    gen = torch.Generator().manual_seed(1)
    order = torch.randperm(len(y), generator=gen)
    views = [_batch_view(built, order[k * 8:(k + 1) * 8], x, y, 0.0, gen) for k in range(4)]
    scores, _ = MIAMessage(MIAMessageConfig(statistic="span")).score_all(built.ctx.fm, views, x, y)
    inside = np.isin(np.arange(len(y)), order[:32].numpy())
    assert scores["span"][inside].min() > 1 - 1e-6 and scores["span"][~inside].max() < 0.999


def test_partial_views_score_on_the_observed_coordinates_only(monkeypatch) -> None:
    # DPPS shares only some layers: the statistics over the observed coordinates (sliced, N^2
    # d_obs) must equal those of the per-sample gradients masked to them (N^2 d)
    import attacks.mia_message as mm

    built = build(RunConfig(nodes=4, rounds=6, max_per_node=24, holdout=0.5, batch_size=8,
                            device="cpu", eval_every=6), "sgp")
    train(built.trainer)
    obs = observe(built, ThreatModel("eavesdropper"))
    d = obs.fm.d
    mask = torch.zeros(d, dtype=torch.bool)
    mask[: d // 3] = True
    views = [dataclasses.replace(v, kind="partial", mask=mask)
             for v in DEFENSES.get("sgp").gradient_views(obs, 0, list(range(5)))]
    x, y, _ = candidates(built.ctx.data, 0)
    atk = MIAMessage(MIAMessageConfig(statistic="all"))
    sliced, fit = atk.score_all(obs.fm, views, x, y)

    def masked(self, fm, params, x, y, target, masks, need_gram, ghost=None, shared=None):
        r = len(params)
        g = mm.per_sample_grads(fm, params, x.expand(r, *x.shape), y.expand(r, len(y)))
        g = g * torch.stack(masks)[:, None, :]  # (r, N, d), zero off the observed coordinates
        out = {"rhs": torch.einsum("rnd,rd->rn", g, target), "sq": g.pow(2).sum(-1),
               "gram": torch.bmm(g, g.transpose(1, 2))}
        return out, float(torch.stack(masks).sum())

    monkeypatch.setattr(mm.MIAMessage, "_pair_stats", masked)
    full, fit_full = atk.score_all(obs.fm, views, x, y)
    for k in sliced:
        np.testing.assert_allclose(sliced[k], full[k], rtol=1e-5, atol=1e-7)
    assert fit == pytest.approx(fit_full)
