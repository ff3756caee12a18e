"""Topologies and mixing matrices: stochasticity and push-sum de-biasing."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from privbench.errors import ConfigError, UnknownNameError
from privbench.topology import build_topology, metropolis_hastings, strongly_connected

NAMES = ["exponential", "random_out", "ring", "complete", "two_hub"]


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(NAMES), st.integers(3, 24), st.integers(0, 10_000), st.booleans())
def test_column_stochastic_and_doubly_stochastic(name, n, seed, time_varying):
    topo = build_topology(name, n, torch.Generator().manual_seed(seed), k=2,
                          time_varying=time_varying if name in ("random_out",) else None)
    for t in range(3):
        p = topo.mixing(t, "column")
        assert torch.allclose(p.sum(dim=0), torch.ones(n), atol=1e-6)
        assert torch.all(p >= 0)
        assert not topo.adjacency(t).diagonal().any()
    if topo.undirected:
        w = topo.mixing(0, "doubly")
        assert torch.allclose(w.sum(0), torch.ones(n), atol=1e-6)
        assert torch.allclose(w.sum(1), torch.ones(n), atol=1e-6)
        assert torch.allclose(w, w.T)


@settings(max_examples=20, deadline=None)
@given(st.integers(3, 30), st.integers(0, 10_000))
def test_random_out_has_out_degree_k_and_is_strongly_connected(n, seed):
    topo = build_topology("random_out", n, torch.Generator().manual_seed(seed), k=2)
    adj = topo.adjacency(0)
    assert torch.all(adj.sum(dim=0) == 2)  # out-degree of every sender
    assert strongly_connected(adj)


def test_push_sum_debiasing_reaches_true_average_on_non_regular_directed_graph():
    n = 10
    topo = build_topology("random_out", n, torch.Generator().manual_seed(3), k=2)
    assert len(set(topo.adjacency(0).sum(dim=1).tolist())) > 1  # in-degrees differ: non-regular
    x = torch.randn(n, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    target = x.mean(dim=0)
    w = torch.ones(n, dtype=torch.float64)
    p = topo.mixing(0, "column").double()
    for _ in range(200):
        x, w = p @ x, p @ w
    assert w.std() > 0.05  # the weights really moved away from 1
    assert torch.allclose(x / w[:, None], target.expand(n, -1), atol=1e-8)
    # without de-biasing the nodes would be wrong
    assert not torch.allclose(x, target.expand(n, -1), atol=1e-3)


def test_time_varying_exponential_cycles_peers():
    topo = build_topology("exponential", 8, torch.Generator())
    assert topo.graphs.shape[0] == 3  # hops 1, 2, 4
    assert topo.out_neighbours(0, 0) == [1] and topo.out_neighbours(1, 0) == [2]
    assert topo.out_neighbours(2, 0) == [4] and topo.out_neighbours(3, 0) == [1]


def test_two_hub_and_ring_shapes():
    hub = build_topology("two_hub", 6, torch.Generator()).adjacency(0)
    assert hub[:, 0].sum() == 5 and hub[:, 3].sum() == 2
    ring = build_topology("ring", 5, torch.Generator()).adjacency(0)
    assert torch.all(ring.sum(0) == 2)


def test_bad_topologies_are_config_errors():
    with pytest.raises(UnknownNameError, match=r"known: .*complete, exponential"):
        build_topology("star", 4, torch.Generator())
    with pytest.raises(ConfigError, match="nodes must be >= 2"):
        build_topology("ring", 1, torch.Generator())
    with pytest.raises(ConfigError, match="out-degree"):
        build_topology("random_out", 4, torch.Generator(), k=4)
    directed = build_topology("random_out", 6, torch.Generator().manual_seed(0), k=1)
    if not torch.equal(directed.adjacency(0), directed.adjacency(0).T):
        with pytest.raises(ConfigError, match="undirected"):
            metropolis_hastings(directed.adjacency(0))
