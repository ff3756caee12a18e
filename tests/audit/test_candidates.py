"""The membership sample: sized by the lowest FPR shown, stratified by node and by member /
non-member, drawn deterministically from the cell's seed, with the FPR interval it resolves."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from privbench.audit.candidates import (
    FALSE_POSITIVES,
    LOWEST_FPR,
    SampleRule,
    allocate,
    candidates,
    draw_sample,
    sample_generator,
)
from privbench.audit.membership import membership_scores
from privbench.config import RunConfig
from privbench.data.datasets import NodeData
from privbench.engine.loop import train
from privbench.engine.runner import build
from privbench.metrics.roc import DEFAULT_FPRS, clopper_pearson
from privbench.threat.observation import ThreatModel, observe


def _node_data(counts: list[int], counts_out: list[int]) -> NodeData:
    """Nodes whose sample k of either side is the image filled with k (its identity)."""
    n, m, mo = len(counts), max(counts), max(counts_out)
    x = torch.arange(m, dtype=torch.float32)[None, :, None].expand(n, m, 1).clone()
    x_out = 1000 + torch.arange(mo, dtype=torch.float32)[None, :, None].expand(n, mo, 1).clone()
    y, y_out = torch.zeros(n, m, dtype=torch.int64), torch.zeros(n, mo, dtype=torch.int64)
    return NodeData(x, y, torch.full((n, m), -1), torch.tensor(counts), x_out, y_out,
                    torch.full((n, mo), -1), torch.tensor(counts_out), x[0], y[0], 2)


def test_the_rule_asks_k_over_f_non_members_at_the_lowest_fpr_shown() -> None:
    assert LOWEST_FPR == min(DEFAULT_FPRS) == 0.001
    assert SampleRule().size() == math.ceil(FALSE_POSITIVES / 0.001)
    assert SampleRule(fpr=0.01, false_positives=5).size() == 500
    assert SampleRule(fpr=0.003, false_positives=1).size() == 334  # ceil: at least k / f


def test_allocation_is_proportional_to_each_node_and_exact() -> None:
    take = allocate(np.array([50, 30, 20]), 20)
    assert take.tolist() == [10, 6, 4]
    uneven = allocate(np.array([7, 7, 7]), 10)  # remainders tie: the lower nodes take them
    assert uneven.tolist() == [4, 3, 3] and uneven.sum() == 10
    assert allocate(np.array([5, 0, 9]), 100).tolist() == [5, 0, 9]  # all of a small set
    rng = np.random.default_rng(0)
    for _ in range(50):
        avail = rng.integers(0, 40, size=rng.integers(1, 8))
        want = int(rng.integers(0, avail.sum() + 5))
        got = allocate(avail, want)
        assert got.sum() == min(want, avail.sum()) and (got <= avail).all()
        assert (np.abs(got - avail * min(want, avail.sum()) / max(avail.sum(), 1)) < 1).all()


def test_the_sample_is_stratified_by_node_and_by_membership() -> None:
    data = _node_data([50, 30, 20], [40, 40, 20])
    rule = SampleRule(fpr=0.05, false_positives=1)  # 20 non-members and 20 members
    picks, sample = draw_sample(data, [0, 1, 2], rule, torch.Generator().manual_seed(0))
    members = [int((idx < int(data.counts[v])).sum()) for v, idx in enumerate(picks)]
    held = [len(idx) - k for idx, k in zip(picks, members, strict=True)]
    assert members == [10, 6, 4] and held == [8, 8, 4]
    assert sample["per_node"] == {"0": [10, 8], "1": [6, 8], "2": [4, 4]}
    assert (sample["members"], sample["nonmembers"]) == (20, 20)
    assert (sample["members_available"], sample["nonmembers_available"]) == (100, 100)
    for v, idx in enumerate(picks):
        assert len(set(idx.tolist())) == len(idx)  # without replacement
        assert idx.max() < int(data.counts[v] + data.counts_out[v])
        x, _, labels = candidates(data, v)
        got = x[torch.from_numpy(idx), 0]
        assert (got[labels[idx]] < 1000).all() and (got[~labels[idx]] >= 1000).all()


def test_the_sample_is_the_cell_seeds_and_only_its() -> None:
    data = _node_data([50, 30], [40, 40])
    rule = SampleRule(fpr=0.05, false_positives=1)
    first = draw_sample(data, [0, 1], rule, sample_generator(7))[0]
    again = draw_sample(data, [0, 1], rule, sample_generator(7))[0]
    other = draw_sample(data, [0, 1], rule, sample_generator(8))[0]
    assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))
    assert not all(np.array_equal(a, b) for a, b in zip(first, other, strict=True))


def test_a_set_smaller_than_the_rule_is_scored_whole_and_draws_nothing() -> None:
    data = _node_data([12, 9], [10, 11])
    gen = torch.Generator().manual_seed(3)
    state = gen.get_state()
    picks, sample = draw_sample(data, [0, 1], SampleRule(), gen)
    assert [p.tolist() for p in picks] == [list(range(22)), list(range(20))]
    assert torch.equal(gen.get_state(), state)
    # 21 non-members cannot resolve 0.1 %: no false positive fits, and the interval says so
    assert sample["false_positives_at_fpr"] == 0 and not sample["resolved"]
    assert sample["fpr_ci"] == pytest.approx(clopper_pearson(0, 21))
    assert sample["fpr_ci"][1] > 0.1  # an FPR of 0.1 % is one of many these could hide


def test_the_stated_interval_is_the_fprs_clopper_pearson_at_the_rule() -> None:
    rule = SampleRule()
    n0 = rule.size()
    data = _node_data([n0, n0], [n0, n0])  # twice what the rule takes on each side
    _, sample = draw_sample(data, [0, 1], rule, torch.Generator().manual_seed(0))
    assert sample["nonmembers"] == sample["members"] == n0
    assert sample["false_positives_at_fpr"] == FALSE_POSITIVES and sample["resolved"]
    lo, hi = sample["fpr_ci"]
    assert (lo, hi) == pytest.approx(tuple(clopper_pearson(FALSE_POSITIVES, n0)))
    assert lo < LOWEST_FPR < hi < 4 * LOWEST_FPR  # resolved within a few multiples of f
    assert "k / f" in sample["rule"] and sample["ci_level"] == 0.95


@pytest.mark.parametrize("attack", ["mia_threshold", "mia_message"])
def test_every_membership_attack_scores_the_cells_sample(attack: str) -> None:
    run = RunConfig(nodes=3, rounds=4, max_per_node=60, holdout=0.5, batch_size=8,
                    device="cpu", eval_every=4)
    built = build(run, "sgp")
    train(built.trainer)
    obs = {v: observe(built, ThreatModel("eavesdropper")) for v in range(3)}
    data, dev = built.ctx.data, torch.device("cpu")
    rule = SampleRule(fpr=0.1, false_positives=3)  # 30 of the 90 on each side
    gen = torch.Generator().manual_seed(0)
    scores, labels, info = membership_scores(obs, data, attack, None, gen, dev, rule=rule)
    assert len(scores) == len(labels) == 60 and labels.sum() == 30
    assert info["sample"]["per_node"] == {"0": [10, 10], "1": [10, 10], "2": [10, 10]}
    again, labels2, _ = membership_scores(obs, data, attack, None,
                                          torch.Generator().manual_seed(0), dev, rule=rule)
    np.testing.assert_array_equal(scores, again)
    np.testing.assert_array_equal(labels, labels2)
    picks = draw_sample(data, [0, 1, 2], rule, sample_generator(run.seed))[0]
    expect = np.concatenate([candidates(data, v)[2][idx] for v, idx in enumerate(picks)])
    np.testing.assert_array_equal(labels, expect)
